package main

import (
	"context"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/engine/metadata"
	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/client"
	"github.com/mooncake-go/mooncake/store/master"
)

// testLease is the read lease of the test master: long enough that a get on a loaded machine
// under -race finishes inside it (a get that outlives its lease fails LEASE_EXPIRED), short
// enough to wait out.
const testLease = time.Second

func startTestMaster(t *testing.T) string {
	t.Helper()
	cfg := master.DefaultConfig()
	cfg.EnableMetricReporting = false
	cfg.DefaultKVLeaseTTL = testLease
	srv := master.NewServer(cfg)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(ctx, lis); close(done) }()
	go srv.Run(ctx)
	t.Cleanup(func() { cancel(); <-done })
	return lis.Addr().String()
}

// Two stores set up at once in one process are two segments: each has its own segment name,
// and clearing the copy on one store's segment keeps the other store's copy (upstream
// test_batch_replica_clear's test_clear_specific_segment_replica lost the key when both shared
// the process engine's name).
func TestTwoStoresInOneProcessAreTwoSegments(t *testing.T) {
	addr := startTestMaster(t)
	ctx := context.Background()
	cfg := client.Config{LocalHostname: "127.0.0.1", MetadataServer: engine.P2PHandshake, MasterServerAddress: addr,
		GlobalSegmentSize: 4 << 20, LocalBufferSize: 1 << 20, RPCTimeout: 3 * time.Second}
	var cs [2]*client.Client
	for i := range cs {
		eng, release, err := storeEngineFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.NewWithEngine(ctx, eng, cfg)
		if err != nil {
			release()
			t.Fatal(err)
		}
		cs[i] = c
		t.Cleanup(func() { c.Close(); release() })
	}
	a, b := cs[0], cs[1]
	if a.Hostname() == b.Hostname() {
		t.Fatalf("both stores report segment name %q", a.Hostname())
	}
	if a.Segment().Name != a.Hostname() || b.Segment().Name != b.Hostname() {
		t.Fatalf("segment names %q, %q; hostnames %q, %q", a.Segment().Name, b.Segment().Name, a.Hostname(), b.Hostname())
	}
	const key = "two-stores"
	val := []byte("one copy on each store")
	if err := a.PutValue(ctx, key, val, client.PutOptions{Config: api.ReplicateConfig{ReplicaNum: 2}}); err != nil {
		t.Fatal(err)
	}
	// a put takes no lease: its copies are clearable at once
	cleared, err := a.BatchReplicaClear(ctx, []string{key}, a.Hostname())
	if err != nil || len(cleared) != 1 || cleared[0] != key {
		t.Fatalf("batch_replica_clear on %s: %v %v", a.Hostname(), cleared, err)
	}
	for _, c := range cs {
		got, err := c.GetValue(ctx, key)
		if err != nil || string(got) != string(val) {
			t.Fatalf("get from %s after clearing %s's copy: %q %v", c.Hostname(), a.Hostname(), got, err)
		}
	}
	// what is left is the copy on b's segment: clearing it there takes the object
	time.Sleep(testLease + 100*time.Millisecond) // past the leases of the gets
	if cleared, err := a.BatchReplicaClear(ctx, []string{key}, b.Hostname()); err != nil || len(cleared) != 1 {
		t.Fatalf("batch_replica_clear on %s: %v %v", b.Hostname(), cleared, err)
	}
	if _, err := b.GetValue(ctx, key); !api.Is(err, api.OBJECT_NOT_FOUND) {
		t.Fatalf("get after clearing both copies: %v", err)
	}
}

// The first store runs on the process-wide engine, a second one set up meanwhile on its own;
// once the first closes, the next store takes the process engine again.
func TestStoreEngineForSharesTheProcessEngineOnce(t *testing.T) {
	cfg := client.Config{LocalHostname: "127.0.0.1", MetadataServer: engine.P2PHandshake}
	e1, r1, err := storeEngineFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e2, r2, err := storeEngineFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	procMu.Lock()
	pe := procEngine
	procMu.Unlock()
	if e1 != pe || e2 == pe || e1.SegmentName() == e2.SegmentName() {
		t.Fatalf("engines %s, %s; process engine %s", e1.SegmentName(), e2.SegmentName(), pe.SegmentName())
	}
	r2()
	r1()
	e3, r3, err := storeEngineFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r3()
	if e3 != pe {
		t.Fatalf("after both closed, a store got %s, not the process engine %s", e3.SegmentName(), pe.SegmentName())
	}
}

// A store runs on the process engine only when that engine publishes segments where the store
// was told to: a P2PHANDSHAKE store on an engine registered in an HTTP metadata server (made
// first by a TransferEngine of the same process) would name a segment its peers look up by
// address and the engine's own lookups search the metadata server for (puts to a P2PHANDSHAKE
// peer failed "not registered in the metadata store", depending on which test made the process
// engine); and the other way round.
func TestStoreEngineForNeedsTheSameDirectory(t *testing.T) {
	pe, err := processEngine()
	if err != nil {
		t.Fatal(err)
	}
	md := httptest.NewServer(metadata.NewHTTPServer(metadata.HTTPServerConfig{}))
	defer md.Close()
	httpMeta := md.URL + metadata.DefaultHTTPPath
	same := client.Config{LocalHostname: "127.0.0.1", MetadataServer: engine.P2PHandshake}
	other := client.Config{LocalHostname: "127.0.0.1", MetadataServer: httpMeta}
	if meta, _ := pe.Directory(); meta == httpMeta {
		same, other = other, same
	}
	e, release, err := storeEngineFor(other)
	if err != nil {
		t.Fatal(err)
	}
	meta, _ := e.Directory()
	if e == pe || meta != other.MetadataServer {
		t.Fatalf("a store told %q ran on an engine publishing to %q (the process engine: %v)", other.MetadataServer, meta, e == pe)
	}
	release()
	e, release, err = storeEngineFor(same)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if e != pe {
		t.Fatalf("a store told %q did not get the process engine, which publishes there", same.MetadataServer)
	}
}
