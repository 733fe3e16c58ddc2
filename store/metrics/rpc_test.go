package metrics

import (
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

func gather(t *testing.T, m *Master) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range mfs {
		out[f.GetName()] = f
	}
	return out
}

func labels(m *dto.Metric) string {
	var parts []string
	for _, l := range m.GetLabel() {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	return strings.Join(parts, ",")
}

func TestRPCResultLatencyAndErrorCodes(t *testing.T) {
	m := NewMaster(func() Snapshot { return Snapshot{} })
	m.ObserveRPCResult("PutStart", "OK", 3*time.Millisecond)
	m.ObserveRPCResult("GetReplicaList", "OBJECT_NOT_FOUND", 100*time.Microsecond)
	m.ObserveRPCResult("GetReplicaList", "OBJECT_NOT_FOUND", 200*time.Microsecond)
	m.ObserveRPCResult("GetReplicaList", "", time.Millisecond)
	fs := gather(t, m)

	h := fs["mooncake_master_rpc_duration_seconds"]
	if h == nil || h.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("mooncake_master_rpc_duration_seconds missing or not a histogram: %v", h)
	}
	counts := map[string]uint64{}
	for _, mt := range h.GetMetric() {
		counts[labels(mt)] = mt.GetHistogram().GetSampleCount()
	}
	if counts["method=PutStart"] != 1 || counts["method=GetReplicaList"] != 3 || len(counts) != 2 {
		t.Fatalf("duration sample counts %v, want PutStart 1, GetReplicaList 3", counts)
	}
	for _, mt := range h.GetMetric() {
		if labels(mt) == "method=PutStart" {
			if got := mt.GetHistogram().GetSampleSum(); got != 0.003 {
				t.Fatalf("PutStart duration sum %v, want 0.003", got)
			}
		}
	}

	e := fs["mooncake_master_rpc_errors_total"]
	if e == nil || len(e.GetMetric()) != 1 {
		t.Fatalf("want one mooncake_master_rpc_errors_total series, got %v", e)
	}
	if got := labels(e.GetMetric()[0]); got != "code=OBJECT_NOT_FOUND,method=GetReplicaList" {
		t.Fatalf("error labels %q", got)
	}
	if got := e.GetMetric()[0].GetCounter().GetValue(); got != 2 {
		t.Fatalf("OBJECT_NOT_FOUND errors %v, want 2", got)
	}
}

func TestDFSGauges(t *testing.T) {
	snap := Snapshot{}
	m := NewMaster(func() Snapshot { return snap })
	value := func(name string) float64 {
		f := gather(t, m)[name]
		if f == nil || f.GetType() != dto.MetricType_GAUGE || len(f.GetMetric()) != 1 {
			t.Fatalf("%s: want one gauge series, got %v", name, f)
		}
		return f.GetMetric()[0].GetGauge().GetValue()
	}
	// Without the G3 tier both read 0 (and exist, so dashboards and alerts have a series).
	if c, u := value("mooncake_master_dfs_segment_capacity_bytes"), value("mooncake_master_dfs_segment_used_bytes"); c != 0 || u != 0 {
		t.Fatalf("without a G3 tier: capacity %v used %v, want 0 0", c, u)
	}
	snap = Snapshot{DFSCapacity: 1 << 30, DFSUsed: 3 << 20}
	if c, u := value("mooncake_master_dfs_segment_capacity_bytes"), value("mooncake_master_dfs_segment_used_bytes"); c != 1<<30 || u != 3<<20 {
		t.Fatalf("capacity %v used %v, want %d %d", c, u, 1<<30, 3<<20)
	}
}
