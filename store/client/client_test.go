package client

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/internal/memview"
	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/master"
)

func startMaster(t testing.TB, mutate ...func(*master.Config)) (*master.Server, string) {
	t.Helper()
	cfg := master.DefaultConfig()
	cfg.EnableMetricReporting = false
	for _, m := range mutate {
		m(&cfg)
	}
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
	return srv, lis.Addr().String()
}

func newClient(t testing.TB, addr string, segSize uint64) *Client {
	return newClientWith(t, addr, segSize, Config{})
}

// newClientWith is newClient with the knob-fed settings of base (GRPC, Engine.ForceTCP, ...).
func newClientWith(t testing.TB, addr string, segSize uint64, base Config) *Client {
	t.Helper()
	ctx := context.Background()
	ecfg := base.Engine
	ecfg.LocalServerName, ecfg.MetadataServer = "127.0.0.1", engine.P2PHandshake
	eng, err := engine.New(ctx, ecfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := base
	cfg.MasterServerAddress, cfg.GlobalSegmentSize, cfg.LocalBufferSize, cfg.RPCTimeout = addr, segSize, 1<<20, 3*time.Second
	c, err := NewWithEngine(ctx, eng, cfg)
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); eng.Close() })
	return c
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

func TestPutGetAcrossClients(t *testing.T) {
	testPutGetAcrossRPCs(t, false)
}

func testPutGetAcrossRPCs(t *testing.T, forceTCP bool) {
	for _, rpc := range []string{"framed", "grpc"} {
		t.Run(rpc, func(t *testing.T) {
			// MC_STORE_RPC: the framed RPC is the default; gRPC must work the same.
			c := testPutGetAcrossClients(t, Config{GRPC: rpc == "grpc", Engine: engine.Config{ForceTCP: forceTCP}})
			c.cc.mu.Lock()
			_, framed := c.cc.cc.(*api.FramedConn)
			c.cc.mu.Unlock()
			if framed != (rpc == "framed") {
				t.Fatalf("rpc %s but the client's connection is %T", rpc, c.cc.cc)
			}
		})
	}
}

func testPutGetAcrossClients(t *testing.T, base Config) *Client {
	_, addr := startMaster(t)
	a := newClientWith(t, addr, 16<<20, base)
	b := newClientWith(t, addr, 16<<20, base)
	ctx := context.Background()
	for _, n := range []int{1, 4096, 3<<20 + 17} {
		key := fmt.Sprintf("k%d", n)
		val := pattern(n, byte(n))
		if err := a.PutValue(ctx, key, val, PutOptions{Config: api.ReplicateConfig{ReplicaNum: 2}}); err != nil {
			t.Fatalf("put %d: %v", n, err)
		}
		for _, c := range []*Client{a, b} {
			got, err := c.GetValue(ctx, key)
			if err != nil || !bytes.Equal(got, val) {
				t.Fatalf("get %d: err %v equal %v", n, err, bytes.Equal(got, val))
			}
		}
	}
	// write-once
	if err := b.PutValue(ctx, "k1", []byte("other"), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.GetValue(ctx, "k1"); !bytes.Equal(got, pattern(1, 1)) {
		t.Fatal("existing key rewritten")
	}
	// parts, batch
	if err := a.Put(ctx, []Item{{Key: "parts", Parts: [][]byte{[]byte("ab"), nil, []byte("cde")}}}, PutOptions{})[0]; err != nil {
		t.Fatal(err)
	}
	if got, _ := b.GetValue(ctx, "parts"); string(got) != "abcde" {
		t.Fatalf("parts got %q", got)
	}
	errs := b.Put(ctx, []Item{value("b1", "one"), value("b2", "two"), value("", "x")}, PutOptions{})
	if errs[0] != nil || errs[1] != nil || !api.Is(errs[2], api.INVALID_KEY) {
		t.Fatalf("batch put %v", errs)
	}
	vals, gerrs := getValues(ctx, a, []string{"b1", "missing", "b2"})
	if string(vals[0]) != "one" || string(vals[2]) != "two" || !api.Is(gerrs[1], api.OBJECT_NOT_FOUND) {
		t.Fatalf("batch get %q %v", vals, gerrs)
	}
	// zero copy with registered buffers
	user := make([]byte, 1<<20)
	copy(user, pattern(1<<20, 9))
	addr0 := memview.Addr(user)
	if err := a.RegisterBuffer(addr0, uint64(len(user))); err != nil {
		t.Fatal(err)
	}
	if err := a.PutValue(ctx, "zc", user, PutOptions{Config: api.ReplicateConfig{PreferredSegments: []string{b.Hostname()}}}); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, 1<<20)
	n, gerrs := a.Get(ctx, []Item{{Key: "zc", Parts: [][]byte{out}}}, GetOptions{})
	if gerrs[0] != nil || n[0] != 1<<20 || !bytes.Equal(out, user) {
		t.Fatalf("get_into %d %v", n[0], gerrs[0])
	}
	if _, gerrs := a.Get(ctx, []Item{{Key: "zc", Parts: [][]byte{out[:10]}}}, GetOptions{}); !api.Is(gerrs[0], api.BUFFER_OVERFLOW) {
		t.Fatalf("small buffer: %v", gerrs[0])
	}
	if err := a.UnregisterBuffer(addr0); err != nil {
		t.Fatal(err)
	}
	if sz, errs := b.Exists(ctx, []string{"zc"}); errs[0] != nil || sz[0] != 1<<20 {
		t.Fatalf("size %d %v", sz[0], errs[0])
	}
	if err := b.Remove(ctx, []string{"zc"}, false)[0]; !api.Is(err, api.OBJECT_HAS_LEASE) {
		t.Fatalf("remove leased: %v", err)
	}
	if err := b.Remove(ctx, []string{"zc"}, true)[0]; err != nil {
		t.Fatal(err)
	}
	if n, err := a.RemoveByRegex(ctx, "^b[0-9]$", true); err != nil || n != 2 {
		t.Fatalf("regex removed %d %v", n, err)
	}
	if n, err := a.RemoveAll(ctx, false); err != nil || n < 3 {
		t.Fatalf("remove all %d %v", n, err)
	}
	if _, err := a.GetValue(ctx, "k1"); !api.Is(err, api.OBJECT_NOT_FOUND) {
		t.Fatalf("get after remove_all: %v", err)
	}
	if err := a.PutValue(ctx, "huge", make([]byte, 17<<20), PutOptions{}); !api.Is(err, api.NO_AVAILABLE_HANDLE) {
		t.Fatalf("value larger than any segment: %v", err)
	}
	return a
}

// TestPutGetOverTCP runs the same paths with shared memory disabled (MC_FORCE_TCP), so every
// transfer goes through the staging buffer or registered memory over the engine's tcp transport.
func TestPutGetOverTCP(t *testing.T) {
	testPutGetAcrossRPCs(t, true)
}

func TestReplicaSurvivesClose(t *testing.T) {
	_, addr := startMaster(t)
	a := newClient(t, addr, 8<<20)
	b := newClient(t, addr, 8<<20)
	ctx := context.Background()
	a.PutValue(ctx, "two", []byte("replicated"), PutOptions{Config: api.ReplicateConfig{ReplicaNum: 2}})
	a.PutValue(ctx, "onA", []byte("local"), PutOptions{Config: api.ReplicateConfig{PreferredSegments: []string{a.Hostname()}}})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := b.GetValue(ctx, "two"); err != nil || string(got) != "replicated" {
		t.Fatalf("replica lost with the other client: %q %v", got, err)
	}
	if _, err := b.GetValue(ctx, "onA"); !api.Is(err, api.OBJECT_NOT_FOUND) {
		t.Fatalf("object only on a closed client still listed: %v", err)
	}
}

func TestMasterDownGivesClearError(t *testing.T) {
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := lis.Addr().String()
	lis.Close()
	eng, err := engine.New(context.Background(), engine.Config{LocalServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	start := time.Now()
	_, err = NewWithEngine(context.Background(), eng, Config{MasterServerAddress: addr, RPCTimeout: 2 * time.Second})
	if err == nil || !(api.Is(err, api.RPC_FAIL) || api.Is(err, api.RPC_TIMEOUT)) || time.Since(start) > 5*time.Second {
		t.Fatalf("err %v after %v", err, time.Since(start))
	}
	t.Log(err)
}

func TestRemountAfterExpiry(t *testing.T) {
	srv, addr := startMaster(t, func(c *master.Config) { c.ClientTTL = time.Second })
	a := newClient(t, addr, 4<<20)
	ctx := context.Background()
	// simulate the master losing the client: expire it by hand
	srv.Propose(ctx, master.Entry{Op: master.OpExpireClient, ClientID: a.ID()})
	deadline := time.Now().Add(5 * time.Second)
	for {
		var segs []string
		srv.View(func(s *master.State) { segs = s.ClientSegments(a.ID()) })
		if len(segs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("client did not re-mount")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := a.PutValue(ctx, "after", []byte("x"), PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// value is an item of one part.
func value(key, v string) Item { return Item{Key: key, Parts: [][]byte{[]byte(v)}} }

// getValues reads keys into new Go memory with one Get; nil where a key failed.
func getValues(ctx context.Context, c *Client, keys []string) ([][]byte, []error) {
	items := make([]Item, len(keys))
	for i, k := range keys {
		items[i].Key = k
	}
	vals := make([][]byte, len(keys))
	_, errs := c.Get(ctx, items, GetOptions{Alloc: func(i int, n uint64) ([]byte, error) {
		vals[i] = make([]byte, n)
		return vals[i], nil
	}})
	for i, err := range errs {
		if err != nil {
			vals[i] = nil
		}
	}
	return vals, errs
}

func startMasterB(b *testing.B) (*master.Server, string)       { return startMaster(b) }
func newClientB(b *testing.B, addr string, seg uint64) *Client { return newClient(b, addr, seg) }
