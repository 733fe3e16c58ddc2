package master

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/testsvc"
	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/ha"
	"github.com/mooncake-go/mooncake/store/snapshot"
)

// TestStateEncodeRoundTrip: a decoded snapshot behaves exactly like the original under the
// same further entries (allocators included).
func TestStateEncodeRoundTrip(t *testing.T) {
	cfg := DefaultConfig()
	a := NewState(cfg)
	now := int64(1e18)
	mk := func(i int) []Entry {
		k := fmt.Sprintf("k%d", i)
		return []Entry{
			{Op: OpPutStart, ClientID: "c1", Key: k, Size: uint64(100 + i*37), Now: now, Seed: uint64(i)},
			{Op: OpPutEnd, ClientID: "c1", Key: k, Now: now},
		}
	}
	a.Apply(Entry{Op: OpMountSegment, ClientID: "c1", Segment: &api.Segment{ID: "s1", Name: "h:1", Base: 4096, Size: 1 << 20}, Now: now})
	a.Apply(Entry{Op: OpMountSegment, ClientID: "c2", Segment: &api.Segment{ID: "s2", Name: "h:2", Base: 4096, Size: 1 << 20}, Now: now})
	for i := range 50 {
		for _, e := range mk(i) {
			a.Apply(e)
		}
	}
	a.Apply(Entry{Op: OpRemove, Key: "k3", Now: now})
	a.Apply(Entry{Op: OpPutStart, ClientID: "c2", Key: "open", Size: 999, Now: now, Seed: 7})
	enc, err := a.Encode()
	if err != nil {
		t.Fatal(err)
	}
	b, err := DecodeState(cfg, enc)
	if err != nil {
		t.Fatal(err)
	}
	if b.Applied() != a.Applied() {
		t.Fatalf("applied %d vs %d", b.Applied(), a.Applied())
	}
	for i := 50; i < 80; i++ {
		for _, e := range mk(i) {
			ra, rb := a.Apply(e), b.Apply(e)
			if fmt.Sprint(ra) != fmt.Sprint(rb) {
				t.Fatalf("entry %+v: %+v vs %+v", e, ra, rb)
			}
		}
	}
	ea, _ := a.Encode()
	eb, _ := b.Encode()
	if !bytes.Equal(ea, eb) {
		t.Fatal("states diverged after the same entries")
	}
	if _, err := DecodeState(cfg, []byte(`{"format":99}`)); err == nil {
		t.Fatal("bad format accepted")
	}
}

// haNode is one in-process master with HA on a real store.
type haNode struct {
	srv    *Server
	addr   string
	cancel context.CancelFunc
	done   chan struct{}
	mc     *api.MasterClient
}

func startHANode(t *testing.T, endpoints, cluster string, mod func(*Config), snaps *snapshot.Manager) *haNode {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.RPCAddress = "127.0.0.1"
	cfg.RPCPort = lis.Addr().(*net.TCPAddr).Port
	cfg.ClusterID = cluster
	cfg.EnableHA = true
	cfg.EtcdEndpoints = endpoints
	cfg.HALeaseTTL = 2 * time.Second
	cfg.ClientTTL = 2 * time.Second
	cfg.HotStandby.OplogPollInterval = 100 * time.Millisecond
	cfg.HotStandby.VerificationInterval = time.Second
	if mod != nil {
		mod(&cfg)
	}
	srv := NewServer(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := ha.Dial(ctx, endpoints)
	if err != nil {
		t.Fatal(err)
	}
	el, err := conn.NewElector(ha.ElectorConfig{ClusterID: cluster, Address: srv.AdvertiseAddress(), TTL: cfg.HALeaseTTL})
	if err != nil {
		t.Fatal(err)
	}
	ol, err := conn.NewOpLog(ha.OpLogConfig{ClusterID: cluster})
	if err != nil {
		t.Fatal(err)
	}
	n := &haNode{srv: srv, addr: srv.AdvertiseAddress(), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(n.done)
		go srv.Run(ctx)
		go srv.Serve(ctx, lis)
		srv.RunHA(ctx, HA{Elector: el, Log: ol, Snapshots: snaps})
		el.Close()
		conn.Close()
	}()
	cc, err := api.Dial(n.addr)
	if err != nil {
		t.Fatal(err)
	}
	n.mc = api.NewMasterClient(cc)
	t.Cleanup(func() { n.stop(); cc.Close() })
	return n
}

func (n *haNode) stop() {
	n.cancel()
	<-n.done
}

func waitFor(t *testing.T, what string, d time.Duration, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func put(t *testing.T, mc *api.MasterClient, client, key string, size uint64) api.ErrorCode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ps, err := mc.PutStart(ctx, &api.PutStartRequest{ClientID: client, Key: key, Size: size, Config: api.ReplicateConfig{ReplicaNum: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if ps.Code != api.OK {
		return ps.Code
	}
	st, err := mc.PutEnd(ctx, &api.KeyRequest{ClientID: client, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return st.Code
}

func mount(t *testing.T, mc *api.MasterClient, client, seg string) {
	t.Helper()
	st, err := mc.MountSegment(context.Background(), &api.MountSegmentRequest{ClientID: client,
		Segment: api.Segment{ID: seg, Name: "127.0.0.1:" + seg, Base: 1 << 20, Size: 64 << 20}})
	if err != nil || st.Code != api.OK {
		t.Fatalf("mount %s: %v %+v", seg, err, st)
	}
}

func stateBytes(t *testing.T, s *Server) []byte {
	var b []byte
	s.View(func(st *State) {
		var err error
		if b, err = st.Encode(); err != nil {
			t.Fatal(err)
		}
	})
	return b
}

// TestHAFollowPromoteSnapshot: a standby follows the leader's oplog entry for entry, serves
// nothing while standby, takes over with every acknowledged put when the leader goes, drops
// the objects of a client that does not come back within client_ttl, and a snapshot taken by
// the leader (which truncates the oplog) bootstraps a third master.
func TestHAFollowPromoteSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	for _, store := range []string{"etcd", "redis"} {
		t.Run(store, func(t *testing.T) {
			var eps string
			if store == "etcd" {
				eps = "etcd://" + testsvc.StartEtcd(t)
			} else {
				eps = "redis://" + testsvc.StartRedis(t)
			}
			testHAFollowPromoteSnapshot(t, eps)
		})
	}
}

func testHAFollowPromoteSnapshot(t *testing.T, eps string) {
	be, err := snapshot.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := snapshot.NewManager(snapshot.Config{Backend: be, ClusterID: "c1", Retention: 2})
	if err != nil {
		t.Fatal(err)
	}
	longTTL := func(c *Config) { c.ClientTTL = time.Minute }
	a := startHANode(t, eps, "c1", longTTL, snaps)
	waitFor(t, "a leads", 15*time.Second, a.srv.Serving)
	b := startHANode(t, eps, "c1", nil, snaps)

	// The standby refuses service with UNAVAILABLE_IN_CURRENT_STATUS.
	if code := put(t, b.mc, "x", "nope", 10); code != api.UNAVAILABLE_IN_CURRENT_STATUS {
		t.Fatalf("standby put: %v", code)
	}
	ctx := context.Background()
	if pr, _ := b.mc.Ping(ctx, &api.PingRequest{ClientID: "x"}); pr.Code != api.UNAVAILABLE_IN_CURRENT_STATUS {
		t.Fatalf("standby ping: %+v", pr)
	}

	mount(t, a.mc, "live", "seg-live")
	mount(t, a.mc, "dead", "seg-dead")
	for i := range 200 {
		if code := put(t, a.mc, "live", "k"+strconv.Itoa(i), uint64(64+i)); code != api.OK {
			t.Fatalf("put %d: %v", i, code)
		}
	}
	// a snapshot in the middle: the oplog is truncated before it, the standby keeps going.
	// The leader's own timers (the first verification entry, ticks) may append an entry while
	// it saves, so the snapshot's position is checked against what was applied just before
	// and just after.
	before := a.srv.applied()
	man, err := a.srv.SaveSnapshot(ctx, snaps)
	if err != nil {
		t.Fatal(err)
	}
	if after := a.srv.applied(); man.LastAppliedSeq < before || man.LastAppliedSeq > after {
		t.Fatalf("snapshot at %d, applied %d before and %d after saving it", man.LastAppliedSeq, before, after)
	}
	for i := 200; i < 300; i++ {
		if code := put(t, a.mc, "live", "k"+strconv.Itoa(i), uint64(64+i)); code != api.OK {
			t.Fatalf("put %d: %v", i, code)
		}
	}
	waitFor(t, "standby caught up", 10*time.Second, func() bool { return b.srv.applied() == a.srv.applied() })
	if !bytes.Equal(stateBytes(t, a.srv), stateBytes(t, b.srv)) {
		t.Fatal("standby state differs from the leader's")
	}
	// Verification through the log: the leader's digest entry matches the standby's state.
	a.srv.VerifyOnce(context.Background())
	waitFor(t, "standby verified", 10*time.Second, func() bool { return b.srv.ha.verifyOK.Load() >= 1 })
	if bad := b.srv.ha.verifyBad.Load(); bad != 0 {
		t.Fatalf("standby reported %d verification mismatches", bad)
	}
	// A third master bootstraps from the snapshot plus the (truncated) oplog.
	c := startHANode(t, eps, "c1", func(c *Config) { c.EnableSnapshotRestore = true; c.ClientTTL = time.Minute }, snaps)
	waitFor(t, "third caught up", 10*time.Second, func() bool { return c.srv.applied() == a.srv.applied() })
	if !bytes.Equal(stateBytes(t, a.srv), stateBytes(t, c.srv)) {
		t.Fatal("snapshot-bootstrapped standby differs from the leader")
	}
	c.stop()

	// Leader goes away (clean stop); b takes over.
	want := stateBytes(t, a.srv)
	start := time.Now()
	a.stop()
	waitFor(t, "b leads", 15*time.Second, b.srv.Serving)
	t.Logf("standby serving %v after the leader stopped", time.Since(start).Round(time.Millisecond))
	if got := stateBytes(t, b.srv); !bytes.Equal(got, want) {
		t.Fatal("new leader's state differs from the old leader's")
	}
	// "live" heartbeats the new leader, "dead" never does: after the discovery allowance and
	// client_ttl its segment goes, and not before the allowance.
	var segs []SegmentInfo
	b.srv.CheckClients(ctx)
	b.srv.View(func(st *State) { segs = st.Segments() })
	if len(segs) != 2 {
		t.Fatalf("segments right after the takeover: %+v", segs)
	}
	deadline := time.Now().Add(discoveryAllowance(b.srv.cfg) + b.srv.cfg.ClientTTL + 2*time.Second)
	for time.Now().Before(deadline) {
		if pr, err := b.mc.Ping(ctx, &api.PingRequest{ClientID: "live"}); err != nil || pr.Code != api.OK {
			t.Fatalf("ping: %v %+v", err, pr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	pr, _ := b.mc.Ping(ctx, &api.PingRequest{ClientID: "live"})
	if len(pr.MountedSegments) != 1 {
		t.Fatalf("live client lost its segment: %+v", pr)
	}
	b.srv.View(func(st *State) { segs = st.Segments() })
	if len(segs) != 1 || segs[0].ID != "seg-live" {
		t.Fatalf("segments after client_ttl: %+v", segs)
	}
	// The new leader keeps appending after the old leader's entries.
	if code := put(t, b.mc, "live", "after", 77); code != api.OK {
		t.Fatalf("put on the new leader: %v", code)
	}
}

// TestMasterSnapshotRoundTrip saves a master's state and restores it into a fresh master, on
// the local backend and on S3 (MinIO).
func TestMasterSnapshotRoundTrip(t *testing.T) {
	backends := map[string]func(t *testing.T) snapshot.Backend{
		"local": func(t *testing.T) snapshot.Backend {
			be, err := snapshot.OpenBackend(context.Background(), "local", snapshot.BackendOptions{LocalRoot: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			return be
		},
		"s3": func(t *testing.T) snapshot.Backend {
			if testing.Short() {
				t.Skip("starts MinIO")
			}
			if os.Getenv("MOONCAKE_MINIO_BIN") == "" {
				home, _ := os.UserHomeDir()
				if p := filepath.Join(home, "go", "bin", "minio"); fileExists(p) {
					t.Setenv("MOONCAKE_MINIO_BIN", p)
				}
			}
			srv := testsvc.StartMinIO(t)
			cfg := snapshot.S3Config{AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Region: srv.Region,
				Endpoint: "http://" + srv.Endpoint, Bucket: "snaps", CreateBucket: true}
			be, err := snapshot.NewS3(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			return be
		},
	}
	for _, name := range []string{"local", "s3"} {
		t.Run(name, func(t *testing.T) {
			be := backends[name](t)
			m, err := snapshot.NewManager(snapshot.Config{Backend: be, ClusterID: "rt", Retention: 2})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			src := NewServer(DefaultConfig())
			seg := api.Segment{ID: "s", Name: "h:1", Base: 4096, Size: 1 << 20}
			if _, err := src.Propose(ctx, Entry{Op: OpMountSegment, ClientID: "c", Segment: &seg}); err != nil {
				t.Fatal(err)
			}
			var mans []snapshot.Manifest
			for round := range 3 {
				for i := range 20 {
					k := fmt.Sprintf("r%d-%d", round, i)
					src.Propose(ctx, Entry{Op: OpPutStart, ClientID: "c", Key: k, Size: 100})
					src.Propose(ctx, Entry{Op: OpPutEnd, ClientID: "c", Key: k})
				}
				man, err := src.SaveSnapshot(ctx, m)
				if err != nil {
					t.Fatal(err)
				}
				mans = append(mans, man)
			}
			dst := NewServer(DefaultConfig())
			if ok, err := dst.RestoreSnapshot(ctx, m); !ok || err != nil {
				t.Fatalf("restore: %v %v", ok, err)
			}
			if !bytes.Equal(stateBytes(t, src), stateBytes(t, dst)) {
				t.Fatal("restored state differs")
			}
			// retention: two kept
			if l, _ := m.List(ctx); len(l) != 2 {
				t.Fatalf("%d snapshots kept, want 2", len(l))
			}
			// corrupt the newest payload: restore falls back to the previous snapshot
			newest := mans[2]
			if err := be.Put(ctx, snapshot.RootDir+"/rt/"+newest.ID+"/data", []byte("garbage")); err != nil {
				t.Fatal(err)
			}
			dst2 := NewServer(DefaultConfig())
			if ok, err := dst2.RestoreSnapshot(ctx, m); !ok || err != nil {
				t.Fatalf("restore after corruption: %v %v", ok, err)
			}
			if got := dst2.applied(); got != mans[1].LastAppliedSeq {
				t.Fatalf("fallback restored seq %d, want %d", got, mans[1].LastAppliedSeq)
			}
		})
	}
}

func fileExists(p string) bool { st, err := os.Stat(p); return err == nil && !st.IsDir() }
