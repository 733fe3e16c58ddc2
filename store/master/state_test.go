package master

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/store/api"
)

// harness applies entries at a hand-driven time and records them for replay checks.
type harness struct {
	t   *testing.T
	s   *State
	now int64
	log []Entry
}

func newHarness(t *testing.T, mutate ...func(*Config)) *harness {
	cfg := DefaultConfig()
	for _, m := range mutate {
		m(&cfg)
	}
	return &harness{t: t, s: NewState(cfg), now: int64(time.Hour)}
}

func (h *harness) apply(e Entry) Result {
	e.Now = h.now
	e.Seed = uint64(len(h.log)) + 1
	h.log = append(h.log, e)
	return h.s.Apply(e)
}

func (h *harness) advance(d time.Duration) { h.now += int64(d) }

// snapshot is the state as a standby restoring h's snapshot would have it.
func (h *harness) snapshot() *State {
	h.t.Helper()
	b, err := h.s.Encode()
	if err != nil {
		h.t.Fatal(err)
	}
	d, err := DecodeState(h.s.cfg, b)
	if err != nil {
		h.t.Fatal(err)
	}
	return d
}

// replayed is the state a standby builds by applying h's log, sent as JSON.
func (h *harness) replayed() *State {
	h.t.Helper()
	data, err := json.Marshal(h.log)
	if err != nil {
		h.t.Fatal(err)
	}
	var log []Entry
	if err := json.Unmarshal(data, &log); err != nil {
		h.t.Fatal(err)
	}
	s := NewState(h.s.cfg)
	for _, e := range log {
		s.Apply(e)
	}
	return s
}

func (h *harness) mount(client, id, name string, base, size uint64) {
	h.t.Helper()
	r := h.apply(Entry{Op: OpMountSegment, ClientID: client, Segment: &api.Segment{ID: id, Name: name, Base: base, Size: size}})
	if r.Code != api.OK {
		h.t.Fatalf("mount %s: %v", id, r.Err())
	}
}

func (h *harness) put(client, key string, size uint64, cfg api.ReplicateConfig) Result {
	h.t.Helper()
	r := h.apply(Entry{Op: OpPutStart, ClientID: client, Key: key, Size: size, Config: &cfg})
	if r.Code != api.OK {
		return r
	}
	if e := h.apply(Entry{Op: OpPutEnd, ClientID: client, Key: key}); e.Code != api.OK {
		h.t.Fatalf("put_end %s: %v", key, e.Err())
	}
	return r
}

// putAll puts objects of the given sizes under keys "a", "b", ... : every put_start before
// any put_end, so that none of them is evictable (a put in progress) until all are in memory,
// and a move ahead of need (moveAhead) starts none of them.
func (h *harness) putAll(client string, sizes ...uint64) {
	h.t.Helper()
	for i, size := range sizes {
		cfg := api.ReplicateConfig{}
		if r := h.apply(Entry{Op: OpPutStart, ClientID: client, Key: string(rune('a' + i)), Size: size, Config: &cfg}); r.Code != api.OK {
			h.t.Fatalf("put_start %c: %v", 'a'+i, r.Err())
		}
	}
	for i := range sizes {
		if r := h.apply(Entry{Op: OpPutEnd, ClientID: client, Key: string(rune('a' + i))}); r.Code != api.OK {
			h.t.Fatalf("put_end %c: %v", 'a'+i, r.Err())
		}
	}
}

func expectCode(t *testing.T, what string, r Result, want api.ErrorCode) {
	t.Helper()
	if r.Code != want {
		t.Fatalf("%s: got %v (%s), want %v", what, r.Code, r.Message, want)
	}
}

func TestAllocatorFirstFitAndCoalesce(t *testing.T) {
	a := newRangeAllocator(1024)
	x, _ := a.alloc(100) // 128
	y, _ := a.alloc(64)
	z, _ := a.alloc(64)
	if x != 0 || y != 128 || z != 192 || a.used != 256 {
		t.Fatalf("offsets %d %d %d used %d", x, y, z, a.used)
	}
	a.release(y, 64)
	a.release(x, 100)
	if len(a.free) != 2 || a.free[0] != (span{0, 192}) {
		t.Fatalf("free list %v", a.free)
	}
	a.release(z, 64)
	if len(a.free) != 1 || a.free[0] != (span{0, 1024}) || a.used != 0 {
		t.Fatalf("not coalesced: %v used %d", a.free, a.used)
	}
	if _, ok := a.alloc(2048); ok {
		t.Fatal("allocated more than the segment")
	}
}

func TestPutStartDistinctSegmentsAllOrNothing(t *testing.T) {
	h := newHarness(t)
	h.mount("c1", "s1", "host1:1", 1<<20, 4096)
	h.mount("c2", "s2", "host2:1", 1<<30, 4096)
	r := h.put("c1", "k", 1000, api.ReplicateConfig{ReplicaNum: 2})
	expectCode(t, "put", r, api.OK)
	if len(r.Replicas) != 2 || r.Replicas[0].SegmentID == r.Replicas[1].SegmentID {
		t.Fatalf("replicas not on distinct segments: %+v", r.Replicas)
	}
	for _, rep := range r.Replicas {
		seg := h.s.segments[rep.SegmentID]
		if rep.Addr < seg.Base || rep.Addr+rep.Size > seg.Base+seg.Size || rep.SegmentName != seg.Name {
			t.Fatalf("replica outside its segment: %+v", rep)
		}
	}
	// three replicas with two segments: refused, nothing allocated
	used := h.s.used
	expectCode(t, "3 replicas", h.apply(Entry{Op: OpPutStart, ClientID: "c1", Key: "k3", Size: 10, Config: &api.ReplicateConfig{ReplicaNum: 3}}), api.NO_AVAILABLE_HANDLE)
	if h.s.used != used {
		t.Fatalf("failed put leaked %d bytes", h.s.used-used)
	}
	// larger than any segment: refused without evicting anything
	expectCode(t, "too big", h.apply(Entry{Op: OpPutStart, Key: "big", Size: 1 << 20}), api.NO_AVAILABLE_HANDLE)
	if _, ok := h.s.objects["k"]; !ok {
		t.Fatal("an impossible put evicted data")
	}
}

func TestWriteOnceRevokeAndValidation(t *testing.T) {
	h := newHarness(t)
	h.mount("c1", "s1", "h:1", 4096, 1<<16)
	expectCode(t, "put", h.put("c1", "k", 100, api.ReplicateConfig{}), api.OK)
	expectCode(t, "again", h.apply(Entry{Op: OpPutStart, ClientID: "c1", Key: "k", Size: 100}), api.OBJECT_ALREADY_EXISTS)
	expectCode(t, "empty key", h.apply(Entry{Op: OpPutStart, Key: "", Size: 1}), api.INVALID_KEY)
	long := string(make([]byte, api.MaxKeyLength+1))
	expectCode(t, "long key", h.apply(Entry{Op: OpPutStart, Key: long, Size: 1}), api.INVALID_KEY)
	expectCode(t, "bad utf8", h.apply(Entry{Op: OpPutStart, Key: "\xff", Size: 1}), api.INVALID_KEY)
	expectCode(t, "zero size", h.apply(Entry{Op: OpPutStart, Key: "z", Size: 0}), api.INVALID_PARAMS)
	expectCode(t, "neg replicas", h.apply(Entry{Op: OpPutStart, Key: "z", Size: 1, Config: &api.ReplicateConfig{ReplicaNum: -1}}), api.INVALID_PARAMS)

	expectCode(t, "start p", h.apply(Entry{Op: OpPutStart, ClientID: "c1", Key: "p", Size: 100}), api.OK)
	if ok, _ := h.s.Exists("p"); ok {
		t.Fatal("a started put is visible")
	}
	expectCode(t, "get p", h.apply(Entry{Op: OpGrantLease, Key: "p"}), api.REPLICA_IS_NOT_READY)
	expectCode(t, "busy", h.apply(Entry{Op: OpPutStart, ClientID: "c2", Key: "p", Size: 100}), api.OBJECT_REPLICA_BUSY)
	expectCode(t, "revoke other", h.apply(Entry{Op: OpPutRevoke, ClientID: "c2", Key: "p"}), api.ILLEGAL_CLIENT)
	expectCode(t, "revoke", h.apply(Entry{Op: OpPutRevoke, ClientID: "c1", Key: "p"}), api.OK)
	expectCode(t, "revoke twice", h.apply(Entry{Op: OpPutRevoke, ClientID: "c1", Key: "p"}), api.OBJECT_NOT_FOUND)
	if h.s.used != alignUp(100) {
		t.Fatalf("used %d after revoke", h.s.used)
	}
	expectCode(t, "revoke complete", h.apply(Entry{Op: OpPutRevoke, ClientID: "c1", Key: "k"}), api.INVALID_WRITE)
}

func TestLeaseBlocksRemoveUnlessForced(t *testing.T) {
	h := newHarness(t)
	h.mount("c1", "s1", "h:1", 4096, 1<<16)
	h.put("c1", "k", 100, api.ReplicateConfig{})
	r := h.apply(Entry{Op: OpGrantLease, Key: "k"})
	expectCode(t, "get", r, api.OK)
	if r.Size != 100 || len(r.Replicas) != 1 || r.Replicas[0].Status != api.ReplicaComplete {
		t.Fatalf("bad get result %+v", r)
	}
	expectCode(t, "remove leased", h.apply(Entry{Op: OpRemove, Key: "k"}), api.OBJECT_HAS_LEASE)
	h.advance(DefaultConfig().DefaultKVLeaseTTL + time.Millisecond)
	expectCode(t, "remove expired lease", h.apply(Entry{Op: OpRemove, Key: "k"}), api.OK)
	expectCode(t, "remove missing", h.apply(Entry{Op: OpRemove, Key: "k"}), api.OBJECT_NOT_FOUND)

	h.put("c1", "k2", 100, api.ReplicateConfig{})
	h.apply(Entry{Op: OpGrantLease, Key: "k2"})
	expectCode(t, "force", h.apply(Entry{Op: OpRemove, Key: "k2", Force: true}), api.OK)

	h.put("c1", "hp", 100, api.ReplicateConfig{WithHardPin: true})
	expectCode(t, "remove hard pin", h.apply(Entry{Op: OpRemove, Key: "hp"}), api.OBJECT_HAS_LEASE)
	expectCode(t, "force hard pin", h.apply(Entry{Op: OpRemove, Key: "hp", Force: true}), api.OK)
}

func TestRemoveByRegexAndRemoveAll(t *testing.T) {
	h := newHarness(t)
	h.mount("c1", "s1", "h:1", 4096, 1<<16)
	for i := range 5 {
		h.put("c1", fmt.Sprintf("a/%d", i), 64, api.ReplicateConfig{})
	}
	h.put("c1", "b/0", 64, api.ReplicateConfig{WithHardPin: true})
	h.apply(Entry{Op: OpGrantLease, Key: "a/0"})
	expectCode(t, "bad regex", h.apply(Entry{Op: OpRemoveByRegex, Pattern: "("}), api.INVALID_PARAMS)
	r := h.apply(Entry{Op: OpRemoveByRegex, Pattern: "^a/"})
	if r.Count != 4 { // a/0 is leased
		t.Fatalf("removed %d, want 4", r.Count)
	}
	h.apply(Entry{Op: OpPutStart, Key: "pending", Size: 64})
	h.put("c1", "c/0", 64, api.ReplicateConfig{})
	r = h.apply(Entry{Op: OpRemoveAll, KeepHeld: true}) // remove_all(force=False): the leased a/0 and pinned b/0 stay
	if r.Count != 1 || !slices.Equal(h.s.Keys(), []string{"a/0", "b/0"}) {
		t.Fatalf("remove_all keeping held keys removed %d, keys left %v", r.Count, h.s.Keys())
	}
	r = h.apply(Entry{Op: OpRemoveAll})
	if r.Count != 2 || len(h.s.Keys()) != 0 {
		t.Fatalf("remove_all removed %d, keys left %v", r.Count, h.s.Keys())
	}
	if _, ok := h.s.pending["pending"]; !ok {
		t.Fatal("remove_all removed a put in progress")
	}
}

func TestEvictionOnAllocationFailureKeepsHardPins(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.EvictionRatio = 0.1 })
	h.mount("c1", "s1", "h:1", 4096, 64*20)
	for i := range 10 {
		cfg := api.ReplicateConfig{WithHardPin: i%2 == 0}
		expectCode(t, "fill", h.put("c1", fmt.Sprintf("k%d", i), 128, cfg), api.OK)
		h.advance(time.Millisecond)
	}
	// full: each new put must evict unpinned objects, oldest first
	for i := 10; i < 15; i++ {
		expectCode(t, "pressure put", h.put("c1", fmt.Sprintf("k%d", i), 128, api.ReplicateConfig{}), api.OK)
		h.advance(time.Millisecond)
	}
	for i := 0; i < 10; i += 2 {
		if ok, _ := h.s.Exists(fmt.Sprintf("k%d", i)); !ok {
			t.Fatalf("hard-pinned k%d evicted", i)
		}
	}
	if ok, _ := h.s.Exists("k1"); ok {
		t.Fatal("the least recently used object survived")
	}
	// nothing evictable left but hard pins and the newest puts: a put needing everything fails
	h.apply(Entry{Op: OpGrantLease, Key: "k14"})
	expectCode(t, "no room", h.apply(Entry{Op: OpPutStart, Key: "huge", Size: 64 * 20}), api.NO_AVAILABLE_HANDLE)
	if ok, _ := h.s.Exists("k14"); !ok {
		t.Fatal("a leased object was evicted")
	}
	if h.s.counters.EvictedObjects == 0 {
		t.Fatal("eviction counter not updated")
	}
}

func TestSoftPinsEvictedLastAndOnlyIfAllowed(t *testing.T) {
	for _, allow := range []bool{true, false} {
		t.Run(fmt.Sprint("allow=", allow), func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.AllowEvictSoftPinnedObjects = allow; c.EvictionRatio = 0.01 })
			h.mount("c1", "s1", "h:1", 4096, 64*4)
			h.put("c1", "soft", 64, api.ReplicateConfig{WithSoftPin: true}) // oldest
			h.advance(time.Millisecond)
			h.put("c1", "plain", 64, api.ReplicateConfig{})
			h.advance(time.Millisecond)
			h.put("c1", "x", 128, api.ReplicateConfig{WithHardPin: true})
			h.advance(time.Millisecond)
			expectCode(t, "put 1", h.put("c1", "y", 64, api.ReplicateConfig{WithHardPin: true}), api.OK)
			if ok, _ := h.s.Exists("plain"); ok {
				t.Fatal("plain object should have been evicted before the soft-pinned one")
			}
			if ok, _ := h.s.Exists("soft"); !ok {
				t.Fatal("soft-pinned object evicted before a plain one")
			}
			r := h.apply(Entry{Op: OpPutStart, Key: "z", Size: 64})
			if allow {
				expectCode(t, "put 2", r, api.OK)
			} else {
				expectCode(t, "put 2", r, api.NO_AVAILABLE_HANDLE)
			}
			// once the soft pin expires the object is a plain one
			h.advance(DefaultConfig().DefaultKVSoftPinTTL + time.Second)
			if !allow {
				expectCode(t, "after soft ttl", h.apply(Entry{Op: OpPutStart, Key: "z", Size: 64}), api.OK)
			}
		})
	}
}

func TestWatermarkTickEvicts(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.EvictionHighWatermarkRatio = 0.5; c.EvictionRatio = 0.25 })
	h.mount("c1", "s1", "h:1", 4096, 64*8)
	for i := range 6 {
		h.put("c1", fmt.Sprintf("k%d", i), 64, api.ReplicateConfig{})
		h.advance(time.Millisecond)
	}
	if !h.s.NeedsTick(h.now) {
		t.Fatal("75% full above a 50% watermark but no tick needed")
	}
	for h.s.NeedsTick(h.now) {
		h.apply(Entry{Op: OpTick})
	}
	if st := h.s.Stats(h.now); st.Objects != 4 || st.Counters.EvictionPasses != 1 {
		t.Fatalf("after ticks: %+v", st)
	}
	if ok, _ := h.s.Exists("k0"); ok {
		t.Fatal("oldest object kept")
	}
}

func TestStalePutsPreemptedAndReclaimed(t *testing.T) {
	h := newHarness(t)
	h.mount("c1", "s1", "h:1", 4096, 1<<16)
	h.apply(Entry{Op: OpPutStart, ClientID: "dead", Key: "k", Size: 100})
	h.advance(31 * time.Second)
	expectCode(t, "pre-empt", h.apply(Entry{Op: OpPutStart, ClientID: "c1", Key: "k", Size: 100}), api.OK)
	expectCode(t, "old client's end", h.apply(Entry{Op: OpPutEnd, ClientID: "dead", Key: "k"}), api.ILLEGAL_CLIENT)
	h.apply(Entry{Op: OpPutStart, ClientID: "dead", Key: "k2", Size: 100})
	if h.s.NeedsTick(h.now) {
		t.Fatal("tick needed too early")
	}
	h.advance(601 * time.Second)
	if !h.s.NeedsTick(h.now) {
		t.Fatal("stale put not noticed")
	}
	h.apply(Entry{Op: OpTick})
	if len(h.s.pending) != 0 || h.s.used != 0 {
		t.Fatalf("stale puts not reclaimed: pending=%d used=%d", len(h.s.pending), h.s.used)
	}
}

func TestClientExpiryDropsReplicas(t *testing.T) {
	h := newHarness(t)
	h.mount("c1", "s1", "h1:1", 4096, 1<<16)
	h.mount("c2", "s2", "h2:1", 1<<30, 1<<16)
	h.put("c1", "both", 100, api.ReplicateConfig{ReplicaNum: 2})
	h.put("c1", "only2", 100, api.ReplicateConfig{PreferredSegments: []string{"h2:1"}})
	h.put("c1", "only1", 100, api.ReplicateConfig{PreferredSegments: []string{"s1"}})
	if r := h.apply(Entry{Op: OpGrantLease, Key: "only2"}); r.Replicas[0].SegmentID != "s2" {
		t.Fatalf("preferred segment ignored: %+v", r.Replicas)
	}
	h.apply(Entry{Op: OpPutStart, ClientID: "c1", Key: "inflight", Size: 100, Config: &api.ReplicateConfig{PreferredSegments: []string{"s1"}}})
	h.apply(Entry{Op: OpPutStart, ClientID: "c2", Key: "inflight2", Size: 100, Config: &api.ReplicateConfig{PreferredSegments: []string{"s1"}}})
	expectCode(t, "expire", h.apply(Entry{Op: OpExpireClient, ClientID: "c2"}), api.OK)
	if ok, _ := h.s.Exists("only2"); ok {
		t.Fatal("object whose only replica was on the expired client survived")
	}
	r := h.apply(Entry{Op: OpGrantLease, Key: "both"})
	if r.Code != api.OK || len(r.Replicas) != 1 || r.Replicas[0].SegmentID != "s1" {
		t.Fatalf("surviving replica wrong: %+v", r)
	}
	if _, ok := h.s.pending["inflight2"]; ok {
		t.Fatal("expired client's put not revoked")
	}
	if _, ok := h.s.pending["inflight"]; !ok {
		t.Fatal("another client's put was revoked")
	}
	if len(h.s.ClientSegments("c2")) != 0 || len(h.s.segments) != 1 {
		t.Fatal("expired client's segment still mounted")
	}
	// a returning client re-mounts
	h.mount("c2", "s2", "h2:1", 1<<30, 1<<16)
	expectCode(t, "remount twice", h.apply(Entry{Op: OpMountSegment, ClientID: "c2", Segment: &api.Segment{ID: "s2", Name: "h2:1", Base: 1 << 30, Size: 1 << 16}}), api.OK)
	expectCode(t, "steal", h.apply(Entry{Op: OpMountSegment, ClientID: "c3", Segment: &api.Segment{ID: "s2", Name: "x", Base: 1, Size: 1 << 16}}), api.SEGMENT_ALREADY_EXISTS)
	expectCode(t, "unmount other", h.apply(Entry{Op: OpUnmountSegment, ClientID: "c1", SegmentID: "s2"}), api.ILLEGAL_CLIENT)
	expectCode(t, "unmount", h.apply(Entry{Op: OpUnmountSegment, ClientID: "c1", SegmentID: "s1"}), api.OK)
	if ok, _ := h.s.Exists("both"); ok {
		t.Fatal("object without replicas still visible")
	}
	if h.s.used != 0 || h.s.capacity != 1<<16 {
		t.Fatalf("accounting off: used %d capacity %d", h.s.used, h.s.capacity)
	}
}

func TestBatchEntry(t *testing.T) {
	h := newHarness(t)
	h.mount("c1", "s1", "h:1", 4096, 1<<16)
	r := h.apply(Entry{Op: OpBatch, Batch: []Entry{
		{Op: OpPutStart, ClientID: "c1", Key: "a", Size: 10},
		{Op: OpPutStart, ClientID: "c1", Key: "", Size: 10},
		{Op: OpBatch},
	}})
	if len(r.Batch) != 3 || r.Batch[0].Code != api.OK || r.Batch[1].Code != api.INVALID_KEY || r.Batch[2].Code != api.INVALID_PARAMS {
		t.Fatalf("batch results %+v", r.Batch)
	}
}

// TestReplayIsDeterministic is the property the HA standby relies on: replaying the log (after a
// JSON round trip, as the oplog stores it) rebuilds an identical state with identical results.
func TestReplayIsDeterministic(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.EvictionRatio = 0.2 })
	for i := range 4 {
		h.mount(fmt.Sprintf("c%d", i), fmt.Sprintf("s%d", i), fmt.Sprintf("h%d:1", i), uint64(i+1)<<32, 64*50)
	}
	var results []Result
	for i := range 200 {
		var e Entry
		key := fmt.Sprintf("k%d", i%37)
		switch i % 7 {
		case 0, 1, 2:
			e = Entry{Op: OpPutStart, ClientID: "c1", Key: key, Size: uint64(64 + i%5*64), Config: &api.ReplicateConfig{ReplicaNum: 1 + i%3}}
		case 3:
			e = Entry{Op: OpPutEnd, ClientID: "c1", Key: fmt.Sprintf("k%d", (i-3)%37)}
		case 4:
			e = Entry{Op: OpGrantLease, Key: key}
		case 5:
			e = Entry{Op: OpRemove, Key: key}
		case 6:
			e = Entry{Op: OpTick}
		}
		if i == 150 {
			e = Entry{Op: OpExpireClient, ClientID: "c2"}
		}
		h.advance(time.Duration(i%3) * time.Second)
		results = append(results, h.apply(e))
	}
	data, err := json.Marshal(h.log)
	if err != nil {
		t.Fatal(err)
	}
	var replayLog []Entry
	if err := json.Unmarshal(data, &replayLog); err != nil {
		t.Fatal(err)
	}
	s2 := NewState(h.s.cfg)
	for i, e := range replayLog {
		got := s2.Apply(e)
		if i >= 4 && !reflect.DeepEqual(got, results[i-4]) {
			t.Fatalf("entry %d (%s): replay result %+v, original %+v", i, e.Op, got, results[i-4])
		}
	}
	if !reflect.DeepEqual(h.s.Segments(), s2.Segments()) || !reflect.DeepEqual(h.s.Keys(), s2.Keys()) ||
		h.s.used != s2.used || h.s.counters != s2.counters {
		t.Fatal("replayed state differs from the original")
	}
	for _, k := range h.s.Keys() {
		a, _ := h.s.Query(k)
		b, _ := s2.Query(k)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("object %s differs after replay: %+v vs %+v", k, a, b)
		}
	}
}

// TestDrainedSegmentTakesNoNewObjects: a drain (an unmount's grace period) keeps a segment's
// objects readable and places nothing new there; only its owner may drain it; a snapshot and a
// replay keep the state; the final unmount drops the objects; a re-mount reopens it.
func TestDrainedSegmentTakesNoNewObjects(t *testing.T) {
	h := newHarness(t)
	h.mount("c1", "s1", "h1:1", 4096, 1<<16)
	h.mount("c2", "s2", "h2:1", 1<<30, 1<<16)
	h.put("c1", "old", 100, api.ReplicateConfig{PreferredSegments: []string{"s1"}})
	expectCode(t, "drain by another", h.apply(Entry{Op: OpDrainSegment, ClientID: "c2", SegmentID: "s1"}), api.ILLEGAL_CLIENT)
	expectCode(t, "drain unknown", h.apply(Entry{Op: OpDrainSegment, ClientID: "c1", SegmentID: "nope"}), api.SEGMENT_NOT_FOUND)
	expectCode(t, "drain", h.apply(Entry{Op: OpDrainSegment, ClientID: "c1", SegmentID: "s1"}), api.OK)
	for i := range 20 {
		r := h.put("c1", fmt.Sprintf("new%d", i), 100, api.ReplicateConfig{PreferredSegments: []string{"s1"}})
		if r.Code != api.OK || r.Replicas[0].SegmentID != "s2" {
			t.Fatalf("put %d after the drain: %+v", i, r)
		}
	}
	expectCode(t, "two replicas with one open segment", h.put("c1", "two", 100, api.ReplicateConfig{ReplicaNum: 2}), api.NO_AVAILABLE_HANDLE)
	if r := h.apply(Entry{Op: OpGrantLease, Key: "old"}); r.Code != api.OK || r.Replicas[0].SegmentID != "s1" {
		t.Fatalf("the drained segment's object is not readable: %+v", r)
	}
	restored := h.snapshot()
	if restored.Digest() != h.s.Digest() || !restored.segments["s1"].Draining {
		t.Fatal("a snapshot lost the drain")
	}
	replay := NewState(h.s.cfg)
	for _, e := range h.log {
		replay.Apply(e)
	}
	if replay.Digest() != h.s.Digest() {
		t.Fatal("replaying the log does not give the same state")
	}
	expectCode(t, "unmount", h.apply(Entry{Op: OpUnmountSegment, ClientID: "c1", SegmentID: "s1"}), api.OK)
	if ok, _ := h.s.Exists("old"); ok {
		t.Fatal("the drained segment's object outlived its unmount")
	}
	h.mount("c1", "s1", "h1:1", 4096, 1<<16)
	if h.s.segments["s1"].Draining {
		t.Fatal("a re-mounted segment is still draining")
	}
	if r := h.put("c1", "back", 100, api.ReplicateConfig{PreferredSegments: []string{"s1"}}); r.Replicas[0].SegmentID != "s1" {
		t.Fatalf("a re-mounted segment takes no objects: %+v", r)
	}
}

// TestScopedRemovalStaysInItsTenant: a client's remove_by_regex and remove_all see only the keys
// of its tenant (the pattern matched against the user part); unscoped entries (older oplogs,
// admin) still see every key.
func TestScopedRemovalStaysInItsTenant(t *testing.T) {
	h := newHarness(t)
	h.mount("c1", "s1", "h1:1", 4096, 1<<20)
	keys := []string{"k1", "k2", "x", api.TenantKey("alpha", "k1"), api.TenantKey("alpha", "k2"), api.TenantKey("beta", "k1")}
	for _, k := range keys {
		h.put("c1", k, 100, api.ReplicateConfig{})
	}
	exists := func(k string) bool { ok, _ := h.s.Exists(k); return ok }
	r := h.apply(Entry{Op: OpRemoveByRegex, Pattern: "^k", Scoped: true, Tenant: "alpha"})
	if r.Count != 2 || exists(api.TenantKey("alpha", "k1")) || !exists("k1") || !exists(api.TenantKey("beta", "k1")) {
		t.Fatalf("alpha's ^k removed %d; left %v %v", r.Count, exists("k1"), exists(api.TenantKey("beta", "k1")))
	}
	if r := h.apply(Entry{Op: OpRemoveAll, Scoped: true}); r.Count != 3 || !exists(api.TenantKey("beta", "k1")) {
		t.Fatalf("the default tenant's remove_all removed %d", r.Count)
	}
	if r := h.apply(Entry{Op: OpRemoveAll}); r.Count != 1 || exists(api.TenantKey("beta", "k1")) {
		t.Fatalf("an unscoped remove_all removed %d", r.Count)
	}
}
