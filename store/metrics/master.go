package metrics

import (
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// SegmentUsage is one mounted segment in a Snapshot.
type SegmentUsage struct {
	Label    string // unique label value (engine segment name, disambiguated when shared)
	Capacity uint64
	Used     uint64
}

// Snapshot is the master state as metrics see it.
type Snapshot struct {
	Objects, PendingPuts, SoftPinned, HardPinned, Leased int
	Clients, ActiveClients                               int
	Capacity, Used                                       uint64
	Segments                                             []SegmentUsage
	EvictedObjects, EvictedBytes, EvictionPasses         uint64
	ReclaimedPuts, ExpiredClients                        uint64
	AppliedEntries                                       uint64
	Role                                                 string

	// HA (zero without --enable_ha).
	HA               bool   // HA is on: the fields below are exported
	Serving          bool   // this master is the serving leader
	OplogAppliedSeq  uint64 // seq of the last oplog entry applied (leader: appended)
	OplogDurableSeq  uint64 // leader: seq of the last entry known durable
	StandbyLag       uint64 // standby: last seq in the oplog store minus applied seq
	LagAlert         bool   // StandbyLag > max_replication_lag_entries
	VerifyOK         uint64 // standby: verification entries whose state digest matched
	VerifyMismatch   uint64 // standby: verification entries whose state digest differed
	StateTransitions uint64 // role changes (standby -> leader -> standby ...)

	// G3 (the shared file/DFS tier, --root_fs_dir). Exported always; zero until the tier is
	// configured and fills them.
	DFSCapacity uint64 // bytes the tier may hold
	DFSUsed     uint64 // bytes of objects stored in the tier
	Tier        TierStats

	// The value cache: small values' bytes the master answers gets with.
	ValueCacheBytes, ValueCacheHits, ValueCacheDrops uint64
}

// Ops are the operations with their own mooncake_master_<op>_requests_total and
// mooncake_master_<op>_failures_total counters.
var Ops = []string{
	"mount_segment", "unmount_segment", "ping", "put_start", "put_end", "put_end_reserved", "put_revoke",
	"get_replica_list", "exist_key", "remove", "remove_by_regex", "remove_all",
	"batch_put_start", "batch_put_end", "batch_put_revoke", "batch_get_replica_list",
	"batch_exist_key", "batch_remove", "service_status",
}

// Master holds the master's metrics.
type Master struct {
	reg         *prometheus.Registry
	rpcRequests *prometheus.CounterVec
	rpcFailures *prometheus.CounterVec
	opRequests  map[string]prometheus.Counter
	opFailures  map[string]prometheus.Counter
	snapshot    func() Snapshot
	rpc         rpcResults // latency and error codes per method (rpc.go)
}

// NewMaster creates the metrics; snapshot is called (concurrently) on every scrape.
func NewMaster(snapshot func() Snapshot) *Master {
	m := &Master{
		reg:      prometheus.NewRegistry(),
		snapshot: snapshot,
		rpcRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mooncake_master_rpc_requests_total", Help: "Total RPC requests served, by method.",
		}, []string{"method"}),
		rpcFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mooncake_master_rpc_failures_total", Help: "gRPC requests that failed (non-OK code or transport error), by method.",
		}, []string{"method"}),
		opRequests: map[string]prometheus.Counter{},
		opFailures: map[string]prometheus.Counter{},
		rpc:        newRPCResults(),
	}
	m.reg.MustRegister(m.rpc.duration, m.rpc.errors)
	m.reg.MustRegister(m.rpcRequests, m.rpcFailures, &stateCollector{m: m},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, op := range Ops {
		m.opRequests[op] = prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mooncake_master_" + op + "_requests_total", Help: "Requests of " + op + ".",
		})
		m.opFailures[op] = prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mooncake_master_" + op + "_failures_total", Help: "Failed requests of " + op + ".",
		})
		m.reg.MustRegister(m.opRequests[op], m.opFailures[op])
	}
	return m
}

// ObserveRPC counts one request of method (the gRPC method name, e.g. "PutStart").
func (m *Master) ObserveRPC(method string, failed bool) {
	m.rpcRequests.WithLabelValues(method).Inc()
	op := snake(method)
	if c, ok := m.opRequests[op]; ok {
		c.Inc()
	}
	if failed {
		m.rpcFailures.WithLabelValues(method).Inc()
		if c, ok := m.opFailures[op]; ok {
			c.Inc()
		}
	}
}

// PageMetrics are the metrics Mooncake's monitoring page lists, in its order: /metrics
// serves them first, then the master's other mooncake_* metrics, then the go_* and process_*
// ones of the Go runtime, so `curl -s .../metrics | head -20` shows the store's state.
var PageMetrics = []string{
	"mooncake_master_kv_object_count", "mooncake_master_segment_free_bytes",
	"mooncake_master_eviction_total", "mooncake_master_pending_tasks",
	"mooncake_master_rpc_requests_total",
}

// Handler serves the Prometheus text exposition (families in exposition order, see
// PageMetrics).
func (m *Master) Handler() http.Handler {
	return promhttp.HandlerFor(prometheus.GathererFunc(m.gatherOrdered), promhttp.HandlerOpts{Registry: m.reg})
}

func (m *Master) gatherOrdered() ([]*dto.MetricFamily, error) {
	mfs, err := m.reg.Gather()
	rank := func(name string) int {
		for i, p := range PageMetrics {
			if name == p {
				return i
			}
		}
		if strings.HasPrefix(name, "mooncake_") {
			return len(PageMetrics)
		}
		return len(PageMetrics) + 1
	}
	sort.SliceStable(mfs, func(i, j int) bool { return rank(mfs[i].GetName()) < rank(mfs[j].GetName()) })
	return mfs, err
}

// Registry exposes the registry (tests, extra collectors).
func (m *Master) Registry() *prometheus.Registry { return m.reg }

// Summary is a short human-readable report (/metrics/summary, periodic log line).
func (m *Master) Summary() string {
	s := m.snapshot()
	pct := 0.0
	if s.Capacity > 0 {
		pct = 100 * float64(s.Used) / float64(s.Capacity)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "role=%s storage: %s / %s (%.1f%%) segments=%d clients=%d\n",
		s.Role, HumanBytes(s.Used), HumanBytes(s.Capacity), pct, len(s.Segments), s.ActiveClients)
	fmt.Fprintf(&b, "keys=%d pending_puts=%d soft_pinned=%d hard_pinned=%d leased=%d\n",
		s.Objects, s.PendingPuts, s.SoftPinned, s.HardPinned, s.Leased)
	fmt.Fprintf(&b, "evicted_objects=%d evicted_bytes=%s eviction_passes=%d reclaimed_puts=%d expired_clients=%d\n",
		s.EvictedObjects, HumanBytes(s.EvictedBytes), s.EvictionPasses, s.ReclaimedPuts, s.ExpiredClients)
	fmt.Fprintf(&b, "value_cache=%s value_cache_hits=%d value_cache_drops=%d\n",
		HumanBytes(s.ValueCacheBytes), s.ValueCacheHits, s.ValueCacheDrops)
	mf, err := m.reg.Gather()
	if err == nil {
		var parts []string
		for _, f := range mf {
			if f.GetName() != "mooncake_master_rpc_requests_total" {
				continue
			}
			for _, mt := range f.GetMetric() {
				parts = append(parts, fmt.Sprintf("%s=%.0f", mt.GetLabel()[0].GetValue(), mt.GetCounter().GetValue()))
			}
		}
		sort.Strings(parts)
		fmt.Fprintf(&b, "requests: %s\n", strings.Join(parts, " "))
	}
	return b.String()
}

// HumanBytes formats n with binary units ("1.5 GiB").
func HumanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for x := n / unit; x >= unit; x /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

var (
	descObjects    = prometheus.NewDesc("mooncake_master_kv_object_count", "Total number of KV objects in the store", nil, nil)
	descPending    = prometheus.NewDesc("mooncake_master_pending_tasks", "Pending transfer tasks: puts started and not yet ended or revoked.", nil, nil)
	descSoft       = prometheus.NewDesc("mooncake_master_soft_pinned_objects", "Objects with an active soft pin.", nil, nil)
	descHard       = prometheus.NewDesc("mooncake_master_hard_pinned_objects", "Hard-pinned objects.", nil, nil)
	descLeased     = prometheus.NewDesc("mooncake_master_leased_objects", "Objects with an unexpired lease.", nil, nil)
	descCapacity   = prometheus.NewDesc("mooncake_master_capacity_bytes", "Total bytes of mounted segments.", nil, nil)
	descAllocated  = prometheus.NewDesc("mooncake_master_allocated_bytes", "Bytes allocated to replicas.", nil, nil)
	descUsage      = prometheus.NewDesc("mooncake_master_usage_ratio", "allocated_bytes / capacity_bytes.", nil, nil)
	descSegments   = prometheus.NewDesc("mooncake_master_mounted_segments", "Mounted segments.", nil, nil)
	descClients    = prometheus.NewDesc("mooncake_master_active_clients", "Clients heard from within client_ttl.", nil, nil)
	descMounting   = prometheus.NewDesc("mooncake_master_mounted_clients", "Clients with at least one mounted segment.", nil, nil)
	descSegFree    = prometheus.NewDesc("mooncake_master_segment_free_bytes", "Free bytes per segment", []string{"segment"}, nil)
	descSegCap     = prometheus.NewDesc("mooncake_master_segment_capacity_bytes", "Capacity per segment.", []string{"segment"}, nil)
	descSegUsed    = prometheus.NewDesc("mooncake_master_segment_allocated_bytes", "Allocated bytes per segment.", []string{"segment"}, nil)
	descEvicted    = prometheus.NewDesc("mooncake_master_eviction_total", "Eviction events: objects evicted.", nil, nil)
	descEvictBytes = prometheus.NewDesc("mooncake_master_evicted_bytes_total", "Replica bytes freed by eviction.", nil, nil)
	descPasses     = prometheus.NewDesc("mooncake_master_eviction_passes_total", "Eviction passes that evicted something.", nil, nil)
	descReclaimed  = prometheus.NewDesc("mooncake_master_reclaimed_puts_total", "Unfinished puts reclaimed or pre-empted.", nil, nil)
	descExpired    = prometheus.NewDesc("mooncake_master_expired_clients_total", "Clients unmounted after missing client_ttl.", nil, nil)
	descApplied    = prometheus.NewDesc("mooncake_master_applied_entries_total", "State-machine entries applied.", nil, nil)
	descVCBytes    = prometheus.NewDesc("mooncake_master_value_cache_bytes", "Bytes of small values the master keeps to answer gets with (--small_value_cache_bytes).", nil, nil)
	descVCHits     = prometheus.NewDesc("mooncake_master_value_cache_hits_total", "Gets answered with a small value's bytes from the master's cache (no transfer).", nil, nil)
	descVCDrops    = prometheus.NewDesc("mooncake_master_value_cache_drops_total", "Small values dropped from the master's cache to make room for newer ones.", nil, nil)

	descRole        = prometheus.NewDesc("mooncake_master_ha_role", "1 for this master's current HA role (leader, standby, ...).", []string{"role"}, nil)
	descServing     = prometheus.NewDesc("mooncake_master_ha_serving", "1 while this master is the serving leader.", nil, nil)
	descOplogSeq    = prometheus.NewDesc("mooncake_master_oplog_applied_seq", "Sequence id of the last oplog entry applied.", nil, nil)
	descDurableSeq  = prometheus.NewDesc("mooncake_master_oplog_durable_seq", "Leader: sequence id of the last oplog entry known durable.", nil, nil)
	descLag         = prometheus.NewDesc("mooncake_master_standby_lag_entries", "Standby: oplog entries not yet applied.", nil, nil)
	descLagAlert    = prometheus.NewDesc("mooncake_master_standby_lag_alert", "1 when the standby lag exceeds max_replication_lag_entries.", nil, nil)
	descVerify      = prometheus.NewDesc("mooncake_master_standby_verifications_total", "Verification entries a standby checked against its own state, by result.", []string{"result"}, nil)
	descTransitions = prometheus.NewDesc("mooncake_master_ha_state_transitions_total", "HA role changes of this master.", nil, nil)
)

type stateCollector struct{ m *Master }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descObjects, descPending, descSoft, descHard, descLeased, descCapacity,
		descAllocated, descUsage, descSegments, descClients, descMounting, descSegFree, descSegCap, descSegUsed,
		descEvicted, descEvictBytes, descPasses, descReclaimed, descExpired, descApplied, descVCBytes, descVCHits, descVCDrops,
		descRole, descServing, descOplogSeq, descDurableSeq, descLag, descLagAlert, descTransitions, descVerify,
		descDFSCapacity, descDFSUsed, descTierObjects, descTierMoves, descTierReads} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.m.snapshot()
	g := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	ct := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	g(descObjects, float64(s.Objects)) // a gauge, as upstream exports it (promlint flags the _count suffix)
	g(descPending, float64(s.PendingPuts))
	g(descSoft, float64(s.SoftPinned))
	g(descHard, float64(s.HardPinned))
	g(descLeased, float64(s.Leased))
	g(descCapacity, float64(s.Capacity))
	g(descAllocated, float64(s.Used))
	usage := 0.0
	if s.Capacity > 0 {
		usage = float64(s.Used) / float64(s.Capacity)
	}
	g(descUsage, usage)
	g(descSegments, float64(len(s.Segments)))
	g(descClients, float64(s.ActiveClients))
	g(descMounting, float64(s.Clients))
	for _, seg := range s.Segments {
		g(descSegFree, float64(seg.Capacity-seg.Used), seg.Label)
		g(descSegCap, float64(seg.Capacity), seg.Label)
		g(descSegUsed, float64(seg.Used), seg.Label)
	}
	ct(descEvicted, s.EvictedObjects)
	ct(descEvictBytes, s.EvictedBytes)
	ct(descPasses, s.EvictionPasses)
	ct(descReclaimed, s.ReclaimedPuts)
	ct(descExpired, s.ExpiredClients)
	ct(descApplied, s.AppliedEntries)
	g(descVCBytes, float64(s.ValueCacheBytes))
	ct(descVCHits, s.ValueCacheHits)
	ct(descVCDrops, s.ValueCacheDrops)
	g(descDFSCapacity, float64(s.DFSCapacity))
	g(descDFSUsed, float64(s.DFSUsed))
	collectTier(ch, s.Tier)
	if s.HA {
		b := func(v bool) float64 {
			if v {
				return 1
			}
			return 0
		}
		g(descRole, 1, s.Role)
		g(descServing, b(s.Serving))
		g(descOplogSeq, float64(s.OplogAppliedSeq))
		g(descDurableSeq, float64(s.OplogDurableSeq))
		g(descLag, float64(s.StandbyLag))
		g(descLagAlert, b(s.LagAlert))
		ct(descTransitions, s.StateTransitions)
		ch <- prometheus.MustNewConstMetric(descVerify, prometheus.CounterValue, float64(s.VerifyOK), "match")
		ch <- prometheus.MustNewConstMetric(descVerify, prometheus.CounterValue, float64(s.VerifyMismatch), "mismatch")
	}
}
