package master

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/store/api"
)

// putValue puts key with its bytes carried by the PutEnd (a client's small value).
func (h *harness) putValue(client, key string, v []byte, upsert bool) {
	h.t.Helper()
	cfg := api.ReplicateConfig{PreferredSegments: []string{"s1"}}
	if r := h.apply(Entry{Op: OpPutStart, ClientID: client, Key: key, Size: uint64(len(v)), Config: &cfg, Upsert: upsert}); r.Code != api.OK {
		h.t.Fatalf("put_start %s: %v", key, r.Err())
	}
	if r := h.apply(Entry{Op: OpPutEnd, ClientID: client, Key: key, Value: v}); r.Code != api.OK {
		h.t.Fatalf("put_end %s: %v", key, r.Err())
	}
}

func (h *harness) cached(key string) []byte {
	h.t.Helper()
	r := h.apply(Entry{Op: OpGrantLease, ClientID: "reader", Key: key})
	if r.Code != api.OK {
		h.t.Fatalf("grant_lease %s: %v", key, r.Err())
	}
	if len(r.Replicas) == 0 {
		h.t.Fatalf("grant_lease %s: no replica", key)
	}
	return r.Value
}

func val(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

// checkValues fails unless s's list of cached values holds exactly the objects with bytes, in
// the cache's order, with their bytes summing to CachedValueBytes.
func checkValues(t *testing.T, s *State) {
	t.Helper()
	var n, sum uint64
	var prev *object
	for o := s.values.head; o != nil; prev, o = o, o.valueNext {
		if o.valuePrev != prev || o.value == nil || (prev != nil && lruOrder(prev, o) >= 0) {
			t.Fatalf("value list broken at %q (after %v)", o.key, prev != nil)
		}
		n++
		sum += o.size
	}
	if s.values.tail != prev {
		t.Fatal("value list: tail is not the last object")
	}
	var held, pinned uint64
	for _, o := range s.objects {
		switch {
		case o.unconfirmed:
			if o.value == nil || s.unconfirmed[o.key] != o {
				t.Fatalf("unconfirmed %q: value %v, indexed %v", o.key, o.value != nil, s.unconfirmed[o.key] == o)
			}
			pinned += o.size
		case o.value != nil:
			held++
		}
	}
	if pinned != s.pinnedBytes || len(s.unconfirmed) != s.UnconfirmedPuts() {
		t.Fatalf("pinned values: %d bytes counted, %d held", s.pinnedBytes, pinned)
	}
	if n != held || sum+pinned != s.CachedValueBytes() {
		t.Fatalf("value list: %d objects, %d bytes; the state: %d objects with bytes, %d bytes (%d pinned)", n, sum, held, s.CachedValueBytes(), pinned)
	}
}

func TestValueCacheKeepsTheRecentlyUsedValuesWithinItsBudget(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.SmallValueCacheBytes = 3 * 4096 })
	h.mount("c1", "s1", "seg1", 1<<20, 64<<20)
	for _, k := range []string{"a", "b", "c"} {
		h.advance(time.Millisecond)
		h.putValue("c1", k, val(k[0], 4096), false)
	}
	h.advance(time.Millisecond)
	h.cached("a") // a read: b is now the least recently used
	h.advance(time.Millisecond)
	h.putValue("c1", "d", val('d', 4096), false) // over the budget: b's bytes make room
	h.putValue("c1", "big", val('x', maxCachedValue+1), false)
	cfg := api.ReplicateConfig{}
	h.apply(Entry{Op: OpPutStart, ClientID: "c1", Key: "wrong", Size: 100, Config: &cfg})
	h.apply(Entry{Op: OpPutEnd, ClientID: "c1", Key: "wrong", Value: val('w', 99)}) // not its size
	h.put("c1", "plain", 4096, cfg)                                                 // no bytes sent
	checkValues(t, h.s)
	if h.s.values.head.key != "c" || h.s.values.tail.key != "d" {
		t.Fatalf("least recently used %q, most %q; want c, d", h.s.values.head.key, h.s.values.tail.key)
	}
	for _, key := range []string{"a", "b", "c", "d", "big", "wrong", "plain"} {
		want := map[string][]byte{"a": val('a', 4096), "c": val('c', 4096), "d": val('d', 4096)}[key]
		if got := h.cached(key); !bytes.Equal(got, want) { // b, its bytes gone, still has its replica
			t.Fatalf("%s: cached %d bytes, want %d", key, len(got), len(want))
		}
	}
	if got := h.s.CachedValueBytes(); got != 3*4096 {
		t.Fatalf("cache holds %d bytes, want %d", got, 3*4096)
	}
	// Gets answered with bytes: a (twice), c, d; dropped to make room: b.
	if c := h.s.counters; c.ValueCacheHits != 4 || c.ValueCacheDrops != 1 {
		t.Fatalf("value cache hits %d, drops %d; want 4, 1", c.ValueCacheHits, c.ValueCacheDrops)
	}
	// A standby replaying the log and a restored snapshot hold the same bytes.
	replay := NewState(h.s.cfg)
	for _, e := range h.log {
		replay.Apply(e)
	}
	snap := h.snapshot()
	for _, s := range []*State{replay, snap} {
		checkValues(t, s)
		if s.Digest() != h.s.Digest() || s.CachedValueBytes() != 3*4096 {
			t.Fatalf("replica of the state: digest equal %v, %d cached bytes", s.Digest() == h.s.Digest(), s.CachedValueBytes())
		}
	}
	r := snap.Apply(Entry{Op: OpGrantLease, ClientID: "r", Key: "c", Now: h.now})
	if !bytes.Equal(r.Value, val('c', 4096)) {
		t.Fatalf("restored snapshot answers %d bytes for c", len(r.Value))
	}
	// Removal frees room; the next small put is kept and drops nothing.
	if r := h.apply(Entry{Op: OpRemove, ClientID: "c1", Key: "a", Force: true}); r.Code != api.OK {
		t.Fatal(r.Err())
	}
	h.advance(time.Millisecond)
	h.putValue("c1", "e", val('e', 4096), false)
	if got := h.cached("e"); !bytes.Equal(got, val('e', 4096)) || h.s.CachedValueBytes() != 3*4096 || h.cached("c") == nil {
		t.Fatalf("after a removal: e cached %d bytes, cache %d", len(got), h.s.CachedValueBytes())
	}
	checkValues(t, h.s)
}

// Values used at the same time go in key order, on the leader and in a restored snapshot
// alike, so both make room by dropping the same bytes.
func TestValueCacheDropsTheSameValuesOnEveryReplica(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.SmallValueCacheBytes = 3 * 1000 })
	h.mount("c1", "s1", "seg1", 1<<20, 64<<20)
	for _, k := range []string{"x3", "x1", "x2"} { // one time for all three
		h.putValue("c1", k, val(k[1], 1000), false)
	}
	snap := h.snapshot()
	checkValues(t, snap)
	order := func(s *State) string {
		var keys []string
		for o := s.values.head; o != nil; o = o.valueNext {
			keys = append(keys, o.key)
		}
		return fmt.Sprint(keys)
	}
	for _, step := range []struct{ key, want string }{{"y", "[x2 x3 y]"}, {"z", "[x3 y z]"}} {
		from := len(h.log)
		h.advance(time.Millisecond)
		h.putValue("c1", step.key, val(step.key[0], 1000), false)
		for _, e := range h.log[from:] {
			snap.Apply(e)
		}
		for _, s := range []*State{h.s, snap} {
			checkValues(t, s)
			if got := order(s); got != step.want || s.CachedValueBytes() != 3000 {
				t.Fatalf("after %s: cached %v (%d bytes), want %v", step.key, got, s.CachedValueBytes(), step.want)
			}
		}
		if snap.Digest() != h.s.Digest() {
			t.Fatalf("after %s: the restored snapshot and the leader differ", step.key)
		}
	}
	// A value larger than the whole budget drops nothing.
	h.advance(time.Millisecond)
	h.putValue("c1", "huge", val('h', 3001), false)
	if h.s.CachedValueBytes() != 3000 || h.cached("huge") != nil {
		t.Fatalf("a value over the budget: cache %d bytes", h.s.CachedValueBytes())
	}
}

func TestValueCacheFollowsUpsertsEvictionAndUnmount(t *testing.T) {
	h := newHarness(t)
	h.mount("c1", "s1", "seg1", 1<<20, 64<<20)
	h.mount("c2", "s2", "seg2", 1<<30, 64<<20)
	h.putValue("c1", "k", val('1', 1000), false)
	// An upsert's new bytes replace the old ones, also while a reader holds the old version.
	h.cached("k")
	h.putValue("c1", "k", val('2', 2000), true)
	if got := h.cached("k"); !bytes.Equal(got, val('2', 2000)) || h.s.CachedValueBytes() != 2000 {
		t.Fatalf("after the upsert: %d bytes cached (%d in all)", len(got), h.s.CachedValueBytes())
	}
	// A value whose only memory copy goes (its segment unmounted) is no longer answered from
	// the cache, and the cache forgets it.
	cfg := api.ReplicateConfig{PreferredSegments: []string{"s2"}}
	if r := h.apply(Entry{Op: OpPutStart, ClientID: "c2", Key: "on2", Size: 500, Config: &cfg}); r.Code != api.OK || r.Replicas[0].SegmentID != "s2" {
		t.Fatalf("put_start on s2: %v %v", r.Err(), r.Replicas)
	}
	h.apply(Entry{Op: OpPutEnd, ClientID: "c2", Key: "on2", Value: val('z', 500)})
	if h.s.CachedValueBytes() != 2500 {
		t.Fatalf("cache holds %d bytes, want 2500", h.s.CachedValueBytes())
	}
	h.apply(Entry{Op: OpUnmountSegment, ClientID: "c2", SegmentID: "s2"})
	if r := h.apply(Entry{Op: OpGrantLease, ClientID: "r", Key: "on2"}); r.Code != api.OBJECT_NOT_FOUND || r.Value != nil {
		t.Fatalf("after the unmount: %v, %d bytes", r.Code, len(r.Value))
	}
	if h.s.CachedValueBytes() != 2000 {
		t.Fatalf("cache holds %d bytes after the unmount, want 2000", h.s.CachedValueBytes())
	}
	// Eviction takes cached objects like any other.
	h.advance(h.s.cfg.DefaultKVLeaseTTL * 2)
	for h.s.CachedValueBytes() > 0 {
		before := h.s.counters.EvictedObjects
		if freed, _ := h.s.evictPass(h.now); freed == 0 || h.s.counters.EvictedObjects == before {
			t.Fatal("eviction freed nothing")
		}
	}
	if _, ok := h.s.objects["k"]; ok {
		t.Fatal("k survived the eviction passes")
	}
}
