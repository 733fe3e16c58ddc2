package master

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
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
	srv, addr := serveMaster(t, DefaultConfig(), opts...)
	cc, err := api.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return srv, api.NewMasterClient(cc), addr
}

// serveMaster serves a master with cfg on a free local port until the test ends.
func serveMaster(t *testing.T, cfg Config, opts ...Option) (*Server, string) {
	t.Helper()
	srv := NewServer(cfg, opts...)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(ctx, lis); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return srv, lis.Addr().String()
}

func TestServerRPCRoundTripAndClientExpiry(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	ml := &memLog{}
	var expired []string
	srv, c, addr := startServer(t, WithClock(clk.now), WithLog(ml),
		WithClientExpired(func(id string, engines []string) { expired = append(append(expired, id), engines...) }))
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
	if expired != nil {
		t.Fatalf("expiry hook called early: %v", expired)
	}
	clk.add(11 * time.Second)
	srv.CheckClients(ctx)
	if !slices.Equal(expired, []string{"c1", "h1:1"}) {
		t.Fatalf("expiry hook got %v, want c1 with its engine h1:1", expired)
	}
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
	writeFile(js, `{"eviction_ratio": "lots"}`)
	for _, args := range [][]string{{"--config_path", js}, {"--nope=1"}, {"--eviction_ratio=1.5"}, {"--rpc_port=x"},
		{"--allocation_strategy=best"}, {"--client_ttl=0"}, {"--config_path=/does/not/exist"}, {"stray"}} {
		if _, err := ParseFlags("m", args); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// TestUpstreamConfigFilesAndFlags: upstream's config-file keys and newer flag names start this
// master; settings it does not have are refused with their reason or (in files) skipped.
func TestUpstreamConfigFilesAndFlags(t *testing.T) {
	dir := t.TempDir()
	js := dir + "/master.json" // the keys of upstream's conf/master.json, and a few of its newer ones
	writeFile(js, `{"enable_metric_reporting": true, "metrics_port": 9004, "rpc_port": 50052, "rpc_thread_num": 8,
		"rpc_address": "127.0.0.1", "rpc_conn_timeout_seconds": 30, "rpc_enable_tcp_no_delay": false,
		"default_kv_lease_ttl": 5000, "default_kv_soft_pin_ttl": 1800000, "allow_evict_soft_pinned_objects": true,
		"eviction_ratio": 0.1, "eviction_high_watermark_ratio": 0.9, "enable_ha": false, "etcd_endpoints": "",
		"root_fs_dir": "", "cluster_id": "up", "memory_allocator": "offset", "client_live_ttl_sec": 7,
		"enable_http_metadata_server": false, "http_metadata_server_host": "0.0.0.0", "http_metadata_server_port": 8081,
		"global_file_segment_size": 9223372036854775807, "kv_events_enabled": true, "dynamic_replication_mode": "off"}`)
	cfg, err := ParseFlags("m", []string{"--config_path", js})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ClientTTL != 7*time.Second || cfg.RPCConnTimeout != 30*time.Second || cfg.RPCTCPNoDelay || cfg.RPCThreads != 8 ||
		cfg.GlobalFileSegmentSize != 1<<63-1 || cfg.DefaultKVLeaseTTL != 5*time.Second || cfg.ClusterID != "up" || cfg.RPCPort != 50052 {
		t.Fatalf("upstream json config: %+v", cfg)
	}
	yml := dir + "/master.yaml"
	writeFile(yml, "default_kv_lease_ttl: 5s\ndefault_kv_soft_pin_ttl: 30m\nclient_active_ttl_sec: 4\n"+
		"snapshot_object_store_type: s3\nha_backend_type: redis\nha_backend_connstring: h:6379\n")
	if cfg, err = ParseFlags("m", []string{"--config_path", yml}); err != nil {
		t.Fatal(err)
	}
	if cfg.DefaultKVLeaseTTL != 5*time.Second || cfg.DefaultKVSoftPinTTL != 30*time.Minute || cfg.ClientTTL != 4*time.Second ||
		cfg.SnapshotBackendType != "s3" || cfg.EtcdEndpoints != "redis://h:6379" {
		t.Fatalf("upstream yaml config: %+v", cfg)
	}
	// the command line still wins over the file, under either name
	if cfg, err = ParseFlags("m", []string{"--config_path", js, "--client_ttl=9", "--default_kv_lease_ttl=1500ms"}); err != nil ||
		cfg.ClientTTL != 9*time.Second || cfg.DefaultKVLeaseTTL != 1500*time.Millisecond {
		t.Fatalf("flags over file: %v %+v", err, cfg)
	}
	if cfg, err = ParseFlags("m", []string{"--memory_allocator=cachelib", "--max_total_pending_tasks=5",
		"--pending_task_timeout_sec=0", "--cxl_size=16GB", "--quota_bytes=1GB", "--enable_disk_eviction=false",
		"--rpc_interface=lo", "--ha_backend_connstring=etcd://a:2379"}); err != nil || cfg.EtcdEndpoints != "etcd://a:2379" || cfg.CXLSize != 16<<30 {
		t.Fatalf("accepted upstream flags: %v %+v", err, cfg)
	}
	for args, want := range map[string]string{
		"--enable_cxl":                         "CXL memory",
		"--allocation_strategy=cxl":            "CXL memory",
		"--memory_allocator=slab":              "want offset or cachelib",
		"--ha_backend_type=k8s":                "Kubernetes",
		"--rpc_conn_timeout_seconds=-1":        "rpc_conn_timeout_seconds",
		"--enable_metadata_cleanup_on_timeout": "needs --enable_http_metadata_server",
		"--default_kv_lease_ttl=5 parsecs":     "duration such as",
	} {
		if _, err := ParseFlags("m", []string{args}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want it to say %q", args, err, want)
		}
	}
}

// TestIdleConnectionsClosed: --rpc_conn_timeout_seconds closes idle RPC connections, framed and
// gRPC, and both kinds of client call on afterwards without an error.
func TestIdleConnectionsClosed(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RPCConnTimeout = 300 * time.Millisecond
	_, addr := serveMaster(t, cfg)
	ctx := t.Context()

	raw, err := net.Dial("tcp", addr) // a framed connection that never sends a request
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.Write([]byte("MCLANE1\n"))
	raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if n, err := raw.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("idle framed connection: read %d, %v; want EOF from the master", n, err)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 3*time.Second {
		t.Fatalf("closed after %v, want about 300ms", d)
	}

	fc, err := api.DialFramed(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	gc, err := api.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	for _, c := range []*api.MasterClient{api.NewMasterClient(fc), api.NewMasterClient(gc)} {
		for i := 0; i < 3; i++ {
			if i > 0 {
				time.Sleep(700 * time.Millisecond) // longer than the timeout: the pooled socket is gone
			}
			if _, err := c.Ping(ctx, &api.PingRequest{ClientID: "idle"}); err != nil {
				t.Fatalf("call %d after an idle period: %v", i, err)
			}
		}
	}
}

// TestNoDelayListener: --rpc_enable_tcp_no_delay decides TCP_NODELAY on accepted connections.
func TestNoDelayListener(t *testing.T) {
	for _, on := range []bool{false, true} {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l := noDelayListener{lis, on}
		go func() {
			if c, err := net.Dial("tcp", lis.Addr().String()); err == nil {
				defer c.Close()
				time.Sleep(200 * time.Millisecond)
			}
		}()
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		rc, _ := c.(*net.TCPConn).SyscallConn()
		var v int
		rc.Control(func(fd uintptr) { v, err = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_NODELAY) })
		c.Close()
		lis.Close()
		if err != nil || (v != 0) != on {
			t.Fatalf("no_delay %v: TCP_NODELAY=%d (%v)", on, v, err)
		}
	}
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o644) }
