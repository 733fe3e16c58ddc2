package pgmetrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mooncake-go/mooncake/pg"
	"github.com/mooncake-go/mooncake/worker"
)

// DurationBuckets are the bounds of mooncake_pg_op_duration_seconds: 10 µs to about 42 s.
var DurationBuckets = prometheus.ExponentialBuckets(10e-6, 2, 23)

// Failure reasons (the reason label of mooncake_pg_op_failures_total).
const (
	ReasonTimeout       = "timeout"        // the op (or the collective timeout) expired
	ReasonTransferFail  = "transfer_fail"  // a peer failed or aborted the op (TRANSFER_FAIL)
	ReasonInvalidParams = "invalid_params" // bad arguments, or ranks disagreeing on the op (INVALID_PARAMS)
	ReasonClosed        = "closed"         // the group was destroyed under the op
	ReasonOther         = "other"
)

// Reasons are the failure reasons, in the order of the constants above.
var Reasons = []string{ReasonTimeout, ReasonTransferFail, ReasonInvalidParams, ReasonClosed, ReasonOther}

// Exporter is one process's process-group metrics: a registry and at most one HTTP server.
type Exporter struct {
	reg      *prometheus.Registry
	ops      *prometheus.CounterVec   // group, rank, backend, collective
	bytes    *prometheus.CounterVec   // group, rank, backend, collective
	duration *prometheus.HistogramVec // group, rank, backend, collective
	failures *prometheus.CounterVec   // group, rank, backend, collective, reason
	degraded *prometheus.CounterVec   // group, rank, backend, collective
	epoch    *prometheus.GaugeVec     // group, rank
	active   *prometheus.GaugeVec     // group, rank
	slots    *prometheus.GaugeVec     // group, rank
	member   *prometheus.GaugeVec     // group, rank
	changes  *prometheus.CounterVec   // group, rank

	mu  sync.Mutex
	srv *http.Server
	ln  net.Listener
}

// New makes an exporter with its own registry (the Go runtime and process collectors included).
func New() *Exporter {
	opLabels := []string{"group", "rank", "backend", "collective"}
	viewLabels := []string{"group", "rank"}
	e := &Exporter{
		reg: prometheus.NewRegistry(),
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mooncake_pg_ops_total", Help: "Ops this rank finished (successful, degraded or failed), by group, collective and backend.",
		}, opLabels),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mooncake_pg_op_bytes_total", Help: "Bytes of this rank's buffers in finished ops (input; scatter: output; recv: receive buffer).",
		}, opLabels),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "mooncake_pg_op_duration_seconds", Help: "Time from an op's start to its end on this rank (reruns over survivors included; recv: from posting to arrival).",
			Buckets: DurationBuckets,
		}, opLabels),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mooncake_pg_op_failures_total", Help: "Ops that failed on this rank, by reason (timeout, transfer_fail, invalid_params, closed, other).",
		}, append(append([]string(nil), opLabels...), "reason")),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mooncake_pg_op_degraded_total", Help: "Ops that completed over the survivors of a peer failure (get_local_success False).",
		}, opLabels),
		epoch: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mooncake_pg_epoch", Help: "The group's membership epoch as this rank sees it.",
		}, viewLabels),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mooncake_pg_active_ranks", Help: "Active ranks of the group as this rank sees it.",
		}, viewLabels),
		slots: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mooncake_pg_group_slots", Help: "The group's slot count (max_group_size).",
		}, viewLabels),
		member: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mooncake_pg_member", Help: "1 while this rank is an active member of the group.",
		}, viewLabels),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mooncake_pg_membership_changes_total", Help: "Membership decisions (fault, deactivate, activate, sync) this rank applied.",
		}, viewLabels),
	}
	e.reg.MustRegister(e.ops, e.bytes, e.duration, e.failures, e.degraded, e.epoch, e.active, e.slots,
		e.member, e.changes, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return e
}

// Registry is the exporter's registry.
func (e *Exporter) Registry() *prometheus.Registry { return e.reg }

// Handler serves the registry in the Prometheus text format.
func (e *Exporter) Handler() http.Handler {
	return promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{Registry: e.reg})
}

// Serve starts the HTTP server on addr (host:port; ":0" picks a port) serving /metrics, and
// returns the address it listens on. A second call returns the first server's address.
func (e *Exporter) Serve(addr string) (net.Addr, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ln != nil {
		return e.ln.Addr(), nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("process-group metrics: listening on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", e.Handler())
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "mooncake process-group metrics: /metrics")
	})
	e.ln, e.srv = ln, &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go e.srv.Serve(ln) // returns http.ErrServerClosed after Close
	return ln.Addr(), nil
}

// Close stops the HTTP server (the metrics keep counting).
func (e *Exporter) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.srv == nil {
		return nil
	}
	err := e.srv.Close()
	e.srv, e.ln = nil, nil
	return err
}

// Backend is the torch backend name of a pg.Config.DeviceType.
func Backend(deviceType int) string {
	if deviceType == pg.DeviceCUDA {
		return "mooncake"
	}
	return "mooncake-cpu"
}

// Group returns the observer of one group's rank (name as in pg.Config.Name, "default" when
// empty; slots = max_group_size). Every op's series start at zero, so dashboards and alerts
// see a value before the first failure.
func (e *Exporter) Group(name string, rank, slots int, backend string) *Group {
	if name == "" {
		name = "default"
	}
	r := strconv.Itoa(rank)
	g := &Group{e: e, labels: prometheus.Labels{"group": name, "rank": r}, ops: map[string]*opSeries{}}
	opl := prometheus.Labels{"group": name, "rank": r, "backend": backend}
	for _, op := range pg.Ops {
		g.ops[op] = e.series(opl, op)
	}
	g.other = opl
	e.slots.With(g.labels).Set(float64(slots))
	e.epoch.With(g.labels)
	e.active.With(g.labels)
	e.member.With(g.labels)
	e.changes.With(g.labels)
	return g
}

// opSeries are the series of one collective in one group.
type opSeries struct {
	ops, bytes, degraded prometheus.Counter
	duration             prometheus.Observer
	failures             map[string]prometheus.Counter
}

func (e *Exporter) series(l prometheus.Labels, op string) *opSeries {
	l = prometheus.Labels{"group": l["group"], "rank": l["rank"], "backend": l["backend"], "collective": op}
	s := &opSeries{ops: e.ops.With(l), bytes: e.bytes.With(l), degraded: e.degraded.With(l),
		duration: e.duration.With(l), failures: map[string]prometheus.Counter{}}
	for _, reason := range Reasons {
		fl := prometheus.Labels{"reason": reason}
		for k, v := range l {
			fl[k] = v
		}
		s.failures[reason] = e.failures.With(fl)
	}
	return s
}

// Group observes one group's rank; it implements pg.Observer.
type Group struct {
	e      *Exporter
	labels prometheus.Labels // group, rank
	other  prometheus.Labels // group, rank, backend: for op names outside pg.Ops
	ops    map[string]*opSeries

	mu        sync.Mutex // decisions (ViewChanged runs on the op queue; held for safety)
	decisions int64
}

var _ pg.Observer = (*Group)(nil)

// OpDone implements pg.Observer.
func (g *Group) OpDone(op string, bytes int, took time.Duration, err error) {
	s := g.ops[op]
	if s == nil { // an op pg.Ops does not list yet: series made on first use
		s = g.e.series(g.other, op)
	}
	s.ops.Inc()
	s.bytes.Add(float64(bytes))
	s.duration.Observe(took.Seconds())
	var d *worker.Degraded
	switch {
	case err == nil:
	case errors.As(err, &d):
		s.degraded.Inc()
	default:
		s.failures[Reason(err)].Inc()
	}
}

// ViewChanged implements pg.Observer.
func (g *Group) ViewChanged(v pg.View) {
	n := 0
	for _, a := range v.Active {
		if a {
			n++
		}
	}
	g.e.epoch.With(g.labels).Set(float64(v.Epoch))
	g.e.active.With(g.labels).Set(float64(n))
	m := 0.0
	if v.Member {
		m = 1
	}
	g.e.member.With(g.labels).Set(m)
	g.mu.Lock()
	if v.Decisions > g.decisions {
		g.e.changes.With(g.labels).Add(float64(v.Decisions - g.decisions))
		g.decisions = v.Decisions
	}
	g.mu.Unlock()
}

// Reason classifies a failed op's error (the reason label).
func Reason(err error) string {
	var c interface{ Code() int }
	switch {
	case errors.Is(err, worker.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	case errors.Is(err, worker.ErrClosed):
		return ReasonClosed
	case errors.As(err, &c) && c.Code() == pg.CodeTransferFail:
		return ReasonTransferFail
	case errors.As(err, &c) && c.Code() == pg.CodeInvalidParams:
		return ReasonInvalidParams
	}
	return ReasonOther
}
