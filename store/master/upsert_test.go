package master

import (
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/store/api"
)

func (h *harness) upsertStart(client, key string, size uint64) Result {
	cfg := api.ReplicateConfig{ReplicaNum: 1}
	return h.apply(Entry{Op: OpPutStart, ClientID: client, Key: key, Size: size, Config: &cfg, Upsert: true})
}

// replicaAddr is the address of key's only readable replica.
func replicaAddr(t *testing.T, s *State, key string) uint64 {
	t.Helper()
	info, ok := s.Query(key)
	if !ok || !info.Complete || len(info.Replicas) != 1 {
		t.Fatalf("%s: %+v ok=%v", key, info, ok)
	}
	return info.Replicas[0].Addr
}

func TestUpsertReplacesAtPutEndOnly(t *testing.T) {
	h := newHarness(t)
	h.mount("c1", "s1", "host:1", 1<<20, 1<<20)
	expectCode(t, "put", h.put("c1", "k", 100, api.ReplicateConfig{ReplicaNum: 1}), api.OK)
	oldAddr := replicaAddr(t, h.s, "k")
	used := h.s.used

	// a plain put of an existing key is refused; an upsert is not
	expectCode(t, "put again", h.apply(Entry{Op: OpPutStart, ClientID: "c1", Key: "k", Size: 300}), api.OBJECT_ALREADY_EXISTS)
	r := h.upsertStart("c1", "k", 300)
	expectCode(t, "upsert start", r, api.OK)
	if len(r.Replicas) != 1 || r.Replicas[0].Addr == oldAddr {
		t.Fatalf("upsert got %+v, want one new replica away from %#x", r.Replicas, oldAddr)
	}
	// until PutEnd readers get the old version
	if ok, size := h.s.Exists("k"); !ok || size != 100 {
		t.Fatalf("during the upsert: exists=%v size=%d, want the old 100 bytes", ok, size)
	}
	g := h.apply(Entry{Op: OpGrantLease, ClientID: "c2", Key: "k"})
	expectCode(t, "get during upsert", g, api.OK)
	if g.Size != 100 || g.Replicas[0].Addr != oldAddr {
		t.Fatalf("get during upsert: %+v", g)
	}
	// another client's put or upsert of the key waits
	expectCode(t, "second upsert", h.upsertStart("c2", "k", 300), api.OBJECT_REPLICA_BUSY)

	expectCode(t, "upsert end", h.apply(Entry{Op: OpPutEnd, ClientID: "c1", Key: "k"}), api.OK)
	if ok, size := h.s.Exists("k"); !ok || size != 300 {
		t.Fatalf("after the upsert: exists=%v size=%d", ok, size)
	}
	if a := replicaAddr(t, h.s, "k"); a != r.Replicas[0].Addr {
		t.Fatalf("readers see %#x, want the new replica %#x", a, r.Replicas[0].Addr)
	}
	// the old copy was leased by c2's read: still allocated until the lease is over
	if h.s.used != used+alignUp(300) || len(h.s.retired) != 1 {
		t.Fatalf("used %d retired %v, want the old copy kept while leased", h.s.used, h.s.retired)
	}
	if !h.s.NeedsTick(h.now + int64(h.s.cfg.DefaultKVLeaseTTL)) {
		t.Fatal("no tick wanted once the lease is over")
	}
	h.advance(h.s.cfg.DefaultKVLeaseTTL)
	h.apply(Entry{Op: OpTick})
	if h.s.used != alignUp(300) || len(h.s.retired) != 0 {
		t.Fatalf("after the lease: used %d retired %v", h.s.used, h.s.retired)
	}
}

func TestUpsertOfNewKeyAndUnleasedOldFreedAtOnce(t *testing.T) {
	h := newHarness(t)
	h.mount("c1", "s1", "host:1", 1<<20, 1<<20)
	expectCode(t, "upsert new", h.upsertStart("c1", "n", 64), api.OK)
	expectCode(t, "end", h.apply(Entry{Op: OpPutEnd, ClientID: "c1", Key: "n"}), api.OK)
	if ok, size := h.s.Exists("n"); !ok || size != 64 {
		t.Fatalf("exists=%v size=%d", ok, size)
	}
	expectCode(t, "upsert", h.upsertStart("c1", "n", 128), api.OK)
	expectCode(t, "end", h.apply(Entry{Op: OpPutEnd, ClientID: "c1", Key: "n"}), api.OK)
	if h.s.used != alignUp(128) || len(h.s.retired) != 0 || len(h.s.pending) != 0 {
		t.Fatalf("used %d retired %v pending %d", h.s.used, h.s.retired, len(h.s.pending))
	}
	// a repeated PutEnd (lost reply) is fine
	expectCode(t, "end again", h.apply(Entry{Op: OpPutEnd, ClientID: "c1", Key: "n"}), api.OK)
}

func TestUpsertRevokeKeepsOldValue(t *testing.T) {
	h := newHarness(t)
	h.mount("c1", "s1", "host:1", 1<<20, 1<<20)
	h.put("c1", "k", 100, api.ReplicateConfig{ReplicaNum: 1})
	oldAddr := replicaAddr(t, h.s, "k")
	used := h.s.used
	expectCode(t, "upsert", h.upsertStart("c1", "k", 200), api.OK)
	expectCode(t, "revoke", h.apply(Entry{Op: OpPutRevoke, ClientID: "c1", Key: "k"}), api.OK)
	if a := replicaAddr(t, h.s, "k"); a != oldAddr || h.s.used != used {
		t.Fatalf("after a revoked upsert: addr %#x used %d, want %#x %d", a, h.s.used, oldAddr, used)
	}
	// the old value is still write-once for plain puts, and removable
	expectCode(t, "revoke again", h.apply(Entry{Op: OpPutRevoke, ClientID: "c1", Key: "k"}), api.INVALID_WRITE)
	expectCode(t, "remove", h.apply(Entry{Op: OpRemove, ClientID: "c1", Key: "k"}), api.OK)
	if h.s.used != 0 {
		t.Fatalf("used %d after remove", h.s.used)
	}
}

func TestUpsertSurvivesRemoveOfOldAndIsReclaimed(t *testing.T) {
	h := newHarness(t)
	h.mount("c1", "s1", "host:1", 1<<20, 1<<20)
	h.put("c1", "k", 100, api.ReplicateConfig{ReplicaNum: 1})
	expectCode(t, "upsert", h.upsertStart("c1", "k", 200), api.OK)
	expectCode(t, "remove old", h.apply(Entry{Op: OpRemove, ClientID: "c2", Key: "k"}), api.OK)
	if ok, _ := h.s.Exists("k"); ok {
		t.Fatal("removed key still exists")
	}
	// a plain put of the key now waits for the upsert in progress
	expectCode(t, "put", h.apply(Entry{Op: OpPutStart, ClientID: "c2", Key: "k", Size: 8}), api.OBJECT_REPLICA_BUSY)
	expectCode(t, "end", h.apply(Entry{Op: OpPutEnd, ClientID: "c1", Key: "k"}), api.OK)
	if ok, size := h.s.Exists("k"); !ok || size != 200 {
		t.Fatalf("exists=%v size=%d", ok, size)
	}

	// an upsert left open is reclaimed by the tick, and the old value is untouched
	expectCode(t, "stale upsert", h.upsertStart("c1", "k", 300), api.OK)
	h.advance(h.s.cfg.PutStartReleaseTimeout + time.Second)
	h.apply(Entry{Op: OpTick})
	if ok, size := h.s.Exists("k"); !ok || size != 200 || len(h.s.pending) != 0 || h.s.used != alignUp(200) {
		t.Fatalf("exists=%v size=%d pending=%d used=%d", ok, size, len(h.s.pending), h.s.used)
	}
}

func TestUpsertUnmountAndSnapshot(t *testing.T) {
	h := newHarness(t)
	h.mount("c1", "s1", "host:1", 1<<20, 1<<20)
	h.mount("c2", "s2", "host:2", 1<<30, 1<<20)
	h.put("c1", "k", 100, api.ReplicateConfig{ReplicaNum: 1, PreferredSegments: []string{"s1"}})
	h.put("c1", "l", 100, api.ReplicateConfig{ReplicaNum: 1, PreferredSegments: []string{"s1"}})
	h.apply(Entry{Op: OpGrantLease, ClientID: "c2", Key: "l"})
	cfg := api.ReplicateConfig{ReplicaNum: 1, PreferredSegments: []string{"s2"}}
	expectCode(t, "upsert k", h.apply(Entry{Op: OpPutStart, ClientID: "c1", Key: "k", Size: 50, Config: &cfg, Upsert: true}), api.OK)
	expectCode(t, "upsert l", h.apply(Entry{Op: OpPutStart, ClientID: "c1", Key: "l", Size: 50, Config: &cfg, Upsert: true}), api.OK)
	expectCode(t, "end l", h.apply(Entry{Op: OpPutEnd, ClientID: "c1", Key: "l"}), api.OK) // old l retired (leased)

	// the snapshot keeps the upsert in progress and the retired copy
	s2 := h.snapshot()
	if s2.Digest() != h.s.Digest() || len(s2.retired) != 1 || len(s2.pendingUpserts()) != 1 {
		t.Fatalf("decoded state differs: retired %v upserts %d", s2.retired, len(s2.pendingUpserts()))
	}

	// unmounting s2 revokes the upsert in progress there; k keeps its old value on s1
	expectCode(t, "unmount s2", h.apply(Entry{Op: OpUnmountSegment, ClientID: "c2", SegmentID: "s2"}), api.OK)
	if ok, size := h.s.Exists("k"); !ok || size != 100 || len(h.s.pending) != 0 {
		t.Fatalf("k: exists=%v size=%d pending=%d", ok, size, len(h.s.pending))
	}
	if ok, _ := h.s.Exists("l"); ok {
		t.Fatal("l's only (new) replica was on s2")
	}
	// unmounting s1 forgets the retired copy of l
	expectCode(t, "unmount s1", h.apply(Entry{Op: OpUnmountSegment, ClientID: "c1", SegmentID: "s1"}), api.OK)
	if h.s.used != 0 || len(h.s.retired) != 0 {
		t.Fatalf("used %d retired %v", h.s.used, h.s.retired)
	}
}

func TestSoftPinActionAndTTL(t *testing.T) {
	h := newHarness(t)
	h.mount("c1", "s1", "host:1", 1<<20, 1<<20)
	ttl := uint64(5000)
	put := func(key string, upsert bool, cfg api.ReplicateConfig) Result {
		r := h.apply(Entry{Op: OpPutStart, ClientID: "c1", Key: key, Size: 10, Config: &cfg, Upsert: upsert})
		if r.Code == api.OK {
			expectCode(t, "end "+key, h.apply(Entry{Op: OpPutEnd, ClientID: "c1", Key: key}), api.OK)
		}
		return r
	}
	pinUntil := func(key string) (bool, int64) {
		info, _ := h.s.Query(key)
		if !info.SoftPinned {
			return false, 0
		}
		return true, info.SoftPinUntil.UnixNano() - h.now
	}
	expectCode(t, "ttl without pin", put("a", false, api.ReplicateConfig{ReplicaNum: 1, SoftPinTTLMs: &ttl}), api.INVALID_PARAMS)
	expectCode(t, "bad action", put("a", false, api.ReplicateConfig{ReplicaNum: 1, SoftPinAction: 7}), api.INVALID_PARAMS)
	expectCode(t, "pin with ttl", put("a", false, api.ReplicateConfig{ReplicaNum: 1, SoftPinAction: api.SoftPinEnable, SoftPinTTLMs: &ttl}), api.OK)
	if ok, d := pinUntil("a"); !ok || d != int64(5*time.Second) {
		t.Fatalf("a: pinned=%v for %v, want 5s", ok, time.Duration(d))
	}
	expectCode(t, "legacy pin", put("b", false, api.ReplicateConfig{ReplicaNum: 1, WithSoftPin: true}), api.OK)
	if ok, d := pinUntil("b"); !ok || d != int64(h.s.cfg.DefaultKVSoftPinTTL) {
		t.Fatalf("b: pinned=%v for %v", ok, time.Duration(d))
	}
	huge := uint64(1<<64 - 1)
	expectCode(t, "capped", put("c", false, api.ReplicateConfig{ReplicaNum: 1, SoftPinAction: api.SoftPinEnable, SoftPinTTLMs: &huge}), api.OK)
	if ok, d := pinUntil("c"); !ok || d != int64(h.s.cfg.MaxKVSoftPinTTL) {
		t.Fatalf("c: pinned=%v for %v, want the max", ok, time.Duration(d))
	}
	zero := uint64(0)
	expectCode(t, "zero ttl", put("d", false, api.ReplicateConfig{ReplicaNum: 1, SoftPinAction: api.SoftPinEnable, SoftPinTTLMs: &zero}), api.OK)
	if ok, _ := pinUntil("d"); ok {
		t.Fatal("d: a zero TTL pins nothing")
	}
	// upserts: PRESERVE keeps a's pin (and its deadline), DISABLE drops it, ENABLE renews it
	h.advance(time.Second)
	expectCode(t, "upsert preserve", put("a", true, api.ReplicateConfig{ReplicaNum: 1}), api.OK)
	if ok, d := pinUntil("a"); !ok || d != int64(4*time.Second) {
		t.Fatalf("a after PRESERVE: pinned=%v for %v, want the old 4s left", ok, time.Duration(d))
	}
	expectCode(t, "upsert enable", put("a", true, api.ReplicateConfig{ReplicaNum: 1, SoftPinAction: api.SoftPinEnable, SoftPinTTLMs: &ttl}), api.OK)
	if ok, d := pinUntil("a"); !ok || d != int64(5*time.Second) {
		t.Fatalf("a after ENABLE: pinned=%v for %v", ok, time.Duration(d))
	}
	expectCode(t, "upsert disable", put("a", true, api.ReplicateConfig{ReplicaNum: 1, SoftPinAction: api.SoftPinDisable}), api.OK)
	if ok, _ := pinUntil("a"); ok {
		t.Fatal("a after DISABLE is still pinned")
	}
}

func TestUpstreamFlagNames(t *testing.T) {
	cfg, err := ParseFlags("m", []string{"--port=7001", "--max_threads=3"})
	if err != nil || cfg.RPCPort != 7001 || cfg.RPCThreads != 3 {
		t.Fatalf("--port/--max_threads: %v %+v", err, cfg)
	}
	cfg, err = ParseFlags("m", []string{"--rpc_port=7002", "--rpc_thread_num=5"})
	if err != nil || cfg.RPCPort != 7002 || cfg.RPCThreads != 5 {
		t.Fatalf("--rpc_port/--rpc_thread_num: %v %+v", err, cfg)
	}
	if _, err := ParseFlags("m", []string{"--port=70000"}); err == nil || !strings.Contains(err.Error(), "--port") {
		t.Fatalf("bad --port: %v", err)
	}
}

func TestReplicaClear(t *testing.T) {
	h := newHarness(t)
	h.mount("c1", "s1", "host:1", 1<<20, 1<<20)
	h.mount("c2", "s2", "host:2", 1<<30, 1<<20)
	h.put("c1", "two", 100, api.ReplicateConfig{ReplicaNum: 2})
	h.put("c1", "one", 100, api.ReplicateConfig{ReplicaNum: 1})
	h.put("c1", "leased", 100, api.ReplicateConfig{ReplicaNum: 1})
	h.apply(Entry{Op: OpGrantLease, ClientID: "c2", Key: "leased"})
	clear := func(client, key, seg string) Result {
		return h.apply(Entry{Op: OpReplicaClear, ClientID: client, Key: key, SegName: seg})
	}
	expectCode(t, "other client", clear("c2", "two", ""), api.ILLEGAL_CLIENT)
	expectCode(t, "leased", clear("c1", "leased", ""), api.OBJECT_HAS_LEASE)
	expectCode(t, "missing", clear("c1", "nope", ""), api.OBJECT_NOT_FOUND)
	expectCode(t, "no copy there", clear("c1", "one", "host:9"), api.REPLICA_NOT_FOUND)
	expectCode(t, "one segment", clear("c1", "two", "host:2"), api.OK)
	if info, ok := h.s.Query("two"); !ok || len(info.Replicas) != 1 || info.Replicas[0].SegmentName != "host:1" {
		t.Fatalf("two after clearing host:2: %+v", info)
	}
	expectCode(t, "last copy", clear("c1", "two", "s1"), api.OK)
	if ok, _ := h.s.Exists("two"); ok {
		t.Fatal("two survives losing its last copy")
	}
	expectCode(t, "whole", clear("c1", "one", ""), api.OK)
	if ok, _ := h.s.Exists("one"); ok || h.s.used != alignUp(100) {
		t.Fatalf("one still there or used %d", h.s.used)
	}
}
