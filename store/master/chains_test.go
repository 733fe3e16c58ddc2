package master

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/store/api"
)

// rebuiltParents is the prefix policy's first implementation, kept as the reference the chain
// index (chains.go) is checked against: the set of parent names of every object in memory,
// rebuilt from scratch.
func rebuiltParents(s *State) map[string]bool {
	parents := map[string]bool{}
	for _, o := range s.objects {
		if len(o.replicas) == 0 {
			continue
		}
		if p, ok := keyParent(o.key); ok {
			parents[p] = true
		}
	}
	return parents
}

// checkChains asserts that the chain index orders every object in memory exactly as the
// rebuilt set of parents does (so any pass picks the same victims from any candidates), and
// that the index holds no node nobody refers to.
func checkChains(t *testing.T, step int, s *State) {
	t.Helper()
	var mem []*object
	s.eachResident(func(o *object) { mem = append(mem, o) }) // as evictPass walks it
	want := 0
	for _, o := range s.objects {
		if len(o.replicas) > 0 {
			want++
		}
	}
	if len(mem) != want {
		t.Fatalf("step %d: resident index holds %d objects, %d have memory copies", step, len(mem), want)
	}
	parents := rebuiltParents(s)
	oldOrder := func(a, b *object) int {
		ca, cb := parents[keyName(a.key)], parents[keyName(b.key)]
		if ca != cb {
			if ca {
				return 1
			}
			return -1
		}
		return lruOrder(a, b)
	}
	byOld := slices.SortedFunc(slices.Values(mem), oldOrder)
	byNew := slices.SortedFunc(slices.Values(mem), prefixOrder)
	for i := range byOld {
		if byOld[i] != byNew[i] {
			t.Fatalf("step %d: victim %d is %q by the rebuilt parents, %q by the chain index", step, i, byOld[i].key, byNew[i].key)
		}
	}
	refs, held, files := map[string]int{}, map[string]int{}, map[string]int{}
	for _, o := range mem {
		refs[keyName(o.key)]++
		if p, ok := keyParent(o.key); ok {
			refs[p]++
		}
	}
	names := map[string]bool{}
	for name := range refs {
		names[name] = true
	}
	for _, o := range s.objects {
		if !s.orphanIndex {
			break
		}
		held[keyName(o.key)]++
		names[keyName(o.key)] = true
		if p, ok := keyParent(o.key); ok && o.disk != nil && tierOf(o.disk) == "" {
			files[p]++
			names[p] = true
		}
	}
	if len(names) != len(s.chains) {
		t.Fatalf("step %d: %d chain nodes, %d names in memory, objects or G3 parents", step, len(s.chains), len(names))
	}
	for name, n := range s.chains {
		if n.refs != refs[name] || (n.kids > 0) != parents[name] || n.held != held[name] || len(n.files) != files[name] {
			t.Fatalf("step %d: node %q refs %d kids %d held %d files %d, want refs %d parent %v held %d files %d",
				step, name, n.refs, n.kids, n.held, len(n.files), refs[name], parents[name], held[name], files[name])
		}
	}
	// Every G3 copy whose parent no object holds is queued among the orphans, in disk order.
	queued := map[*object]bool{}
	for i, it := range s.orphans {
		if i > 0 && itemBefore(s.orphans[i-1], it) >= 0 {
			t.Fatalf("step %d: orphans out of order at %d", step, i)
		}
		if s.orphanCopy(it) {
			queued[it.o] = true
		}
	}
	for _, o := range s.objects {
		if p, ok := keyParent(o.key); ok && o.disk != nil && tierOf(o.disk) == "" && held[p] == 0 && !queued[o] {
			t.Fatalf("step %d: G3 orphan %q not queued", step, o.key)
		}
	}
}

// TestChainIndexMatchesRebuiltParents drives a generated workload (chained puts, reads,
// removes, upserts, a client that leaves and comes back, ticks, with and without the G3 tier's
// moves and promotions) under the prefix policy and checks after every entry that the
// incremental chain index gives the victims the rebuilt set of parents gave; a snapshot
// restored on the way and a replay of the log end with the leader's keys.
func TestChainIndexMatchesRebuiltParents(t *testing.T) {
	for _, g3 := range []bool{false, true} {
		t.Run(fmt.Sprintf("g3=%v", g3), func(t *testing.T) {
			h := newHarness(t, func(c *Config) {
				c.EvictionPolicy = EvictionPrefix
				c.EvictionRatio = 0.05
				c.EvictionHighWatermarkRatio = 0.9
				if g3 {
					c.RootFSDir = "/g3"
					c.GlobalFileSegmentSize = 64 * 60
					c.DFSFullPolicy = "evict_oldest"
					c.PromotionOnHit = true
				}
			})
			rng := rand.New(rand.NewPCG(7, uint64(len(t.Name()))))
			h.mount("c1", "s1", "h:1", 1<<20, 64*50)
			h.mount("c2", "s2", "h:2", 2<<20, 64*30)
			c2Up := true
			key := func(chain, depth int) string {
				k := fmt.Sprintf("b%d.%d", chain, depth)
				if depth > 0 {
					k += fmt.Sprintf("|b%d.%d", chain, depth-1)
				}
				return k
			}
			var mid *State
			var rest []Entry
			const steps = 4000
			for step := range steps {
				h.advance(time.Duration(rng.IntN(3)) * time.Millisecond)
				n := len(h.log)
				if step == steps/2 {
					mid = h.snapshot()
					checkChains(t, step, mid)
				}
				k := key(rng.IntN(25), rng.IntN(8))
				client := "c1"
				if c2Up && rng.IntN(3) == 0 {
					client = "c2"
				}
				switch r := rng.IntN(100); {
				case r < 45:
					h.put(client, k, 64, api.ReplicateConfig{ReplicaNum: 1 + rng.IntN(2)})
				case r < 75:
					if g := h.apply(Entry{Op: OpGrantLease, ClientID: client, Key: k}); g.Promote != nil {
						ok := rng.IntN(4) > 0
						e := Entry{Op: OpPromoteDone, ClientID: client, Key: k}
						if !ok {
							e.Error = "copy failed"
						}
						h.apply(e)
					}
				case r < 80:
					h.apply(Entry{Op: OpRemove, Key: k, Force: rng.IntN(2) == 0})
				case r < 85:
					cfg := api.ReplicateConfig{}
					if h.apply(Entry{Op: OpPutStart, ClientID: client, Key: k, Size: 64, Config: &cfg, Upsert: true}).Code == api.OK {
						if rng.IntN(5) == 0 {
							h.apply(Entry{Op: OpPutRevoke, ClientID: client, Key: k})
						} else {
							h.apply(Entry{Op: OpPutEnd, ClientID: client, Key: k})
						}
					}
				case r < 87:
					if c2Up {
						h.apply(Entry{Op: OpExpireClient, ClientID: "c2"})
					} else {
						h.mount("c2", "s2", "h:2", 2<<20, 64*30)
					}
					c2Up = !c2Up
				case r < 95:
					for _, c := range []string{"c1", "c2"} {
						for _, task := range h.s.OffloadTasks(c) {
							h.apply(Entry{Op: OpOffloadDone, ClientID: c, Key: task.Key, Path: task.Path, Checksum: 1})
						}
					}
				default:
					h.advance(time.Duration(rng.IntN(10)) * time.Second)
					h.apply(Entry{Op: OpTick})
				}
				checkChains(t, step, h.s)
				if mid != nil {
					rest = append(rest, h.log[n:]...)
				}
			}
			if h.s.counters.EvictedObjects+h.s.counters.OffloadedObjects == 0 || h.s.counters.EvictionPasses < 20 {
				t.Fatalf("too little eviction to test: %+v", h.s.counters)
			}
			for _, e := range rest {
				mid.Apply(e)
			}
			replay := NewState(h.s.cfg)
			for _, e := range h.log {
				replay.Apply(e)
			}
			for name, s2 := range map[string]*State{"snapshot": mid, "replay": replay} {
				checkChains(t, steps, s2)
				if !slices.Equal(h.s.Keys(), s2.Keys()) || h.s.counters != s2.counters {
					t.Fatalf("%s: keys or counters differ from the leader's", name)
				}
			}
		})
	}
}
