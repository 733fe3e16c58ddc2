package master

import (
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/store/api"
)

// g3Order runs, under policy, with room for one object in memory and two in G3
// (--dfs_full_policy=evict_oldest): p, q, c|q (q's child), then q removed (c|q, still in
// memory, is left without its parent), then r (c|q moves to G3 as an orphan) and s, whose move
// finds G3 full. It returns which of p and c|q G3 still holds.
func g3Order(t *testing.T, policy string) (p, cq bool) {
	const size = 4096
	h := newHarness(t, func(c *Config) {
		c.EvictionPolicy = policy
		c.RootFSDir = "/g3"
		c.GlobalFileSegmentSize = 2 * size
		c.DFSFullPolicy = "evict_oldest"
	})
	h.mount("c1", "s1", "h:1", 1<<20, size)
	put := func(key string) {
		t.Helper()
		for range 3 {
			h.advance(time.Millisecond)
			if h.put("c1", key, size, api.ReplicateConfig{}).Code == api.OK {
				return
			}
			for _, task := range h.s.OffloadTasks("c1") { // memory full: finish the moves, as the client would
				expectCode(t, "offload "+task.Key, h.apply(Entry{Op: OpOffloadDone, ClientID: "c1", Key: task.Key, Path: task.Path, Checksum: 1}), api.OK)
			}
		}
		t.Fatalf("%s: put %s failed", policy, key)
	}
	put("p")
	put("q")
	put("c|q")
	expectCode(t, "remove q", h.apply(Entry{Op: OpRemove, Key: "q"}), api.OK)
	put("r")
	put("s")
	for _, task := range h.s.OffloadTasks("c1") {
		h.apply(Entry{Op: OpOffloadDone, ClientID: "c1", Key: task.Key, Path: task.Path, Checksum: 1})
	}
	if h.s.counters.DFSEvictedObjects != 1 {
		t.Fatalf("%s: G3 dropped %d objects, want 1", policy, h.s.counters.DFSEvictedObjects)
	}
	p, _ = h.s.Exists("p")
	cq, _ = h.s.Exists("c|q")
	if policy == EvictionPrefix {
		checkChains(t, 0, h.s)
	}
	return p, cq
}

// TestG3DropsOrphansFirst: when G3 is full, lru's G3 drops its oldest file (p); the prefix
// policy's drops first the file no request can use, a block whose parent is cached nowhere
// (c|q), though it is newer.
func TestG3DropsOrphansFirst(t *testing.T) {
	if p, cq := g3Order(t, EvictionLRU); p || !cq {
		t.Fatalf("lru: G3 holds p %v, c|q %v; want the oldest, p, dropped", p, cq)
	}
	if p, cq := g3Order(t, EvictionPrefix); !p || cq {
		t.Fatalf("prefix: G3 holds p %v, c|q %v; want the orphan c|q dropped", p, cq)
	}
}
