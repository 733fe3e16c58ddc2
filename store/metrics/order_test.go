package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestExpositionOrder: /metrics starts with the metrics Mooncake's monitoring page lists, in
// its order (the object count first, a gauge with the page's help text), then the master's
// other metrics, and the Go runtime's last.
func TestExpositionOrder(t *testing.T) {
	m := NewMaster(func() Snapshot {
		return Snapshot{Objects: 4096, Segments: []SegmentUsage{{Label: "h:1", Capacity: 10, Used: 4}}}
	})
	m.ObserveRPC("PutStart", false)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	lines := strings.Split(string(body), "\n")
	want := []string{
		"# HELP mooncake_master_kv_object_count Total number of KV objects in the store",
		"# TYPE mooncake_master_kv_object_count gauge",
		"mooncake_master_kv_object_count 4096",
		"# HELP mooncake_master_segment_free_bytes Free bytes per segment",
		"# TYPE mooncake_master_segment_free_bytes gauge",
		`mooncake_master_segment_free_bytes{segment="h:1"} 6`,
	}
	for i, w := range want {
		if lines[i] != w {
			t.Fatalf("line %d = %q, want %q\n%s", i, lines[i], w, body)
		}
	}
	var names []string
	for _, ln := range lines {
		if strings.HasPrefix(ln, "# TYPE ") {
			names = append(names, strings.Fields(ln)[2])
		}
	}
	for i, n := range names[:len(PageMetrics)] {
		if n != PageMetrics[i] {
			t.Fatalf("family %d = %s, want %s (%v)", i, n, PageMetrics[i], names)
		}
	}
	seenOther := false
	for _, n := range names {
		other := !strings.HasPrefix(n, "mooncake_")
		if seenOther && !other {
			t.Fatalf("%s after the Go runtime's metrics: %v", n, names)
		}
		seenOther = seenOther || other
	}
	if !seenOther {
		t.Fatalf("no go_/process_ metrics: %v", names)
	}
}

// TestValueCacheMetrics: the value cache's bytes, hits and drops are exported as a gauge and
// two counters, and the summary shows them.
func TestValueCacheMetrics(t *testing.T) {
	m := NewMaster(func() Snapshot { return Snapshot{ValueCacheBytes: 8192, ValueCacheHits: 3, ValueCacheDrops: 2} })
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	for _, want := range []string{"# TYPE mooncake_master_value_cache_bytes gauge\nmooncake_master_value_cache_bytes 8192\n",
		"# TYPE mooncake_master_value_cache_hits_total counter\nmooncake_master_value_cache_hits_total 3\n",
		"# TYPE mooncake_master_value_cache_drops_total counter\nmooncake_master_value_cache_drops_total 2\n"} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("no %q in\n%s", want, body)
		}
	}
	if s := m.Summary(); !strings.Contains(s, "value_cache=8.0 KiB value_cache_hits=3 value_cache_drops=2\n") {
		t.Fatalf("summary: %s", s)
	}
}
