package master

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/store/api"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type memLog struct {
	mu      sync.Mutex
	entries []Entry
}

func (l *memLog) Append(_ context.Context, e Entry) error {
	l.mu.Lock()
	l.entries = append(l.entries, e)
	l.mu.Unlock()
	return nil
}

func startServer(t *testing.T, opts ...Option) (*Server, *api.MasterClient, string) {
	t.Helper()
	cfg := DefaultConfig()
	srv := NewServer(cfg, opts...)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(ctx, lis); close(done) }()
	cc, err := api.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close(); cancel(); <-done })
	return srv, api.NewMasterClient(cc), lis.Addr().String()
}

func TestServerRPCRoundTripAndClientExpiry(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	ml := &memLog{}
	srv, c, addr := startServer(t, WithClock(clk.now), WithLog(ml))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	st, err := c.MountSegment(ctx, &api.MountSegmentRequest{ClientID: "c1", Segment: api.Segment{ID: "s1", Name: "h1:1", Base: 4096, Size: 1 << 20}})
	if err != nil || st.Code != api.OK {
		t.Fatalf("mount: %v %+v", err, st)
	}
	ps, err := c.PutStart(ctx, &api.PutStartRequest{ClientID: "c1", Key: "k", Size: 10, Config: api.ReplicateConfig{ReplicaNum: 1}})
	if err != nil || ps.Code != api.OK || len(ps.Replicas) != 1 {
		t.Fatalf("put start: %v %+v", err, ps)
	}
	if st, _ := c.PutEnd(ctx, &api.KeyRequest{ClientID: "c1", Key: "k"}); st.Code != api.OK {
		t.Fatalf("put end %+v", st)
	}
	g, err := c.GetReplicaList(ctx, &api.KeyRequest{Key: "k"})
	if err != nil || g.Code != api.OK || g.Size != 10 || g.LeaseTTLMs != 10000 {
		t.Fatalf("get: %v %+v", err, g)
	}
	ex, _ := c.BatchExistKey(ctx, &api.BatchKeysRequest{Keys: []string{"k", "nope", ""}})
	if !ex.Results[0].Exists || ex.Results[1].Exists || ex.Results[2].Code != api.INVALID_KEY {
		t.Fatalf("batch exist %+v", ex)
	}
	rm, _ := c.Remove(ctx, &api.RemoveRequest{Key: "k"})
	if rm.Code != api.OBJECT_HAS_LEASE {
		t.Fatalf("remove of a leased key: %+v", rm)
	}
	if len(ml.entries) != 5 {
		t.Fatalf("log has %d entries, want 5", len(ml.entries))
	}

	// client_ttl: silence expires c1 and drops its replicas
	pr, _ := c.Ping(ctx, &api.PingRequest{ClientID: "c1"})
	if len(pr.MountedSegments) != 1 {
		t.Fatalf("ping %+v", pr)
	}
	clk.add(5 * time.Second)
	srv.CheckClients(ctx)
	if pr, _ := c.Ping(ctx, &api.PingRequest{ClientID: "c1"}); len(pr.MountedSegments) != 1 {
		t.Fatal("client expired before client_ttl")
	}
	clk.add(11 * time.Second)
	srv.CheckClients(ctx)
	pr, _ = c.Ping(ctx, &api.PingRequest{ClientID: "c1"})
	if len(pr.MountedSegments) != 0 {
		t.Fatalf("client not expired after client_ttl: %+v", pr)
	}
	if ex, _ := c.ExistKey(ctx, &api.KeyRequest{Key: "k"}); ex.Exists {
		t.Fatal("replica on an expired client still visible")
	}

	// metrics and admin endpoints
	h := srv.AdminHandler()
	body := get(t, h, "/metrics")
	for _, name := range []string{"mooncake_master_kv_object_count", "mooncake_master_rpc_requests_total{method=\"PutStart\"}",
		"mooncake_master_put_start_requests_total 1", "mooncake_master_remove_failures_total 1",
		"mooncake_master_eviction_total", "mooncake_master_pending_tasks", "mooncake_master_active_clients",
		"mooncake_master_allocated_bytes", "mooncake_master_capacity_bytes"} {
		if !strings.Contains(body, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if s := get(t, h, "/health"); !strings.Contains(s, `"status": "ok"`) {
		t.Errorf("/health: %s", s)
	}
	get(t, h, "/metrics/summary")
	_ = addr
}

func TestGarbageOnRPCPort(t *testing.T) {
	_, c, addr := startServer(t)
	for _, junk := range []string{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "\x00\x01\x02garbage\xff\xfe", strings.Repeat("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 3)} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(3 * time.Second))
		conn.Write([]byte(junk))
		io.ReadAll(conn)
		conn.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.ServiceStatus(ctx, &api.ServiceStatusRequest{}); err != nil {
		t.Fatalf("master unusable after garbage: %v", err)
	}
}

func get(t *testing.T, h http.Handler, path string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	if rec.Code != 200 {
		t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
	return rec.Body.String()
}

func TestParseFlagsAndConfigFile(t *testing.T) {
	dir := t.TempDir()
	yml := dir + "/m.yaml"
	if err := writeFile(yml, "rpc_port: 6000\neviction_ratio: 0.2\nclient_ttl: 3\ncluster_id: from_file\n"); err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseFlags("m", []string{"--config_path=" + yml, "--rpc_port=7000", "--default_kv_lease_ttl=500"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RPCPort != 7000 || cfg.EvictionRatio != 0.2 || cfg.ClientTTL != 3*time.Second || cfg.ClusterID != "from_file" || cfg.DefaultKVLeaseTTL != 500*time.Millisecond {
		t.Fatalf("config %+v", cfg)
	}
	js := dir + "/m.json"
	writeFile(js, `{"metrics_port": 9100, "allow_evict_soft_pinned_objects": false}`)
	if cfg, err = ParseFlags("m", []string{"--config_path", js}); err != nil || cfg.MetricsPort != 9100 || cfg.AllowEvictSoftPinnedObjects {
		t.Fatalf("json config: %v %+v", err, cfg)
	}
	writeFile(js, `{"no_such_flag": 1}`)
	for _, args := range [][]string{{"--config_path", js}, {"--nope=1"}, {"--eviction_ratio=1.5"}, {"--rpc_port=x"},
		{"--allocation_strategy=best"}, {"--client_ttl=0"}, {"--config_path=/does/not/exist"}, {"stray"}} {
		if _, err := ParseFlags("m", args); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o644) }
