package master

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/store/api"
)

// evictionOrder puts a chain a <- b <- c (keys "a", "b|a", "c|b") and a lone block x, in that
// order, then runs one-victim passes and returns the keys in the order they went.
func evictionOrder(t *testing.T, policy string) []string {
	h := newHarness(t, func(c *Config) { c.EvictionPolicy = policy; c.EvictionRatio = 0.01 })
	h.mount("c1", "s1", "h:1", 4096, 64*8)
	keys := []string{"a", "b|a", "c|b", "x"}
	for _, k := range keys {
		expectCode(t, "put "+k, h.put("c1", k, 64, api.ReplicateConfig{}), api.OK)
		h.advance(time.Millisecond)
	}
	var gone []string
	for range keys {
		if freed, _ := h.s.evictPass(h.now); freed != 1 {
			t.Fatalf("%s: a pass freed %d objects, want 1", policy, freed)
		}
		for _, k := range keys {
			if ok, _ := h.s.Exists(k); !ok && !slices.Contains(gone, k) {
				gone = append(gone, k)
			}
		}
	}
	return gone
}

func TestEvictionPolicyVictimOrder(t *testing.T) {
	if got, want := evictionOrder(t, EvictionLRU), []string{"a", "b|a", "c|b", "x"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("lru: evicted %v, want %v", got, want)
	}
	// prefix: tails first (c, older than x), then the new tail b, then a (older than x)
	if got, want := evictionOrder(t, EvictionPrefix), []string{"c|b", "b|a", "a", "x"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("prefix: evicted %v, want %v", got, want)
	}
}

func TestEvictionPolicyFlag(t *testing.T) {
	if DefaultConfig().EvictionPolicy != EvictionLRU {
		t.Fatalf("default policy %q", DefaultConfig().EvictionPolicy)
	}
	c := DefaultConfig()
	c.EvictionPolicy = "fifo"
	if err := c.Validate(); err == nil {
		t.Fatal("--eviction_policy=fifo accepted")
	}
}

// TestPrefixEvictionReplaysTheSame: a standby replaying the oplog (and one restoring a snapshot
// half-way) under the prefix policy keeps exactly the objects the leader kept.
func TestPrefixEvictionReplaysTheSame(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.EvictionPolicy = EvictionPrefix; c.EvictionRatio = 0.1 })
	h.mount("c1", "s1", "h:1", 4096, 64*40)
	var snap *State
	var rest []Entry
	for i := range 300 {
		chain, depth := i%13, i%7
		key := fmt.Sprintf("b%d.%d", chain, depth)
		if depth > 0 {
			key += fmt.Sprintf("|b%d.%d", chain, depth-1)
		}
		h.advance(time.Duration(i%3) * time.Millisecond)
		if i == 150 {
			snap = h.snapshot()
		}
		n := len(h.log)
		if ok, _ := h.s.Exists(key); ok {
			h.apply(Entry{Op: OpGrantLease, Key: key})
		} else {
			h.put("c1", key, 64, api.ReplicateConfig{})
		}
		if i%5 == 0 {
			h.apply(Entry{Op: OpTick})
		}
		if i >= 150 {
			rest = append(rest, h.log[n:]...)
		}
	}
	if h.s.counters.EvictedObjects == 0 {
		t.Fatal("no eviction: the test puts too little")
	}
	replay := h.replayed()
	for _, e := range rest {
		snap.Apply(e)
	}
	for name, s2 := range map[string]*State{"replay": replay, "snapshot": snap} {
		if !reflect.DeepEqual(h.s.Keys(), s2.Keys()) || h.s.used != s2.used || h.s.counters != s2.counters {
			t.Fatalf("%s: state differs from the leader's: %v vs %v", name, s2.Keys(), h.s.Keys())
		}
	}
}
