package master

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/store/api"
)

// statsByWalk is Stats computed the way it was before the counts were kept up: a walk over
// every object. The test below holds the two equal.
func statsByWalk(s *State, now int64) Stats {
	st := Stats{PendingPuts: len(s.pending), Segments: len(s.segments), Clients: len(s.clients),
		Capacity: s.capacity, Used: s.used, Counters: s.counters,
		DFSUsed: s.dfsUsed, DFSReserved: s.dfsReserved, Moving: len(s.moving), LocalDiskUsed: s.localUsed}
	for _, o := range s.objects {
		if !o.complete {
			continue
		}
		st.Objects++
		if o.disk != nil && !s.inMemory(o) {
			st.DiskOnly++
		}
		if s.softPinned(o, now) {
			st.SoftPinned++
		}
		if o.hardPin {
			st.HardPinned++
		}
		if o.leaseUntil > now {
			st.Leased++
		}
	}
	return st
}

// TestDerivedStateFollowsTheState: what the state derives and keeps up instead of walking every
// object holds after every step of a random mix of puts with and without pins (checked between
// start and end too, some left in progress), upserts (ended and revoked), reads that lease and promote, promotions
// that finish or fail, removes, copies cleared from a segment, finished and failed moves, G3
// full with oldest-first eviction, time passing over pins and leases, unmounts and snapshot
// round trips, with G3 and with SSD offload:
//   - Stats (objects, hard and soft pins, leases, disk-only objects) equals a walk over every
//     object;
//   - the resident index (what eviction and an unmount walk) holds every object with a memory
//     replica and nothing that left the state, and no replica outlives its segment;
//   - replaying the log on a state whose index is rebuilt exactly before every entry gives the
//     same encoded state: the victims of an eviction pass do not depend on what else the index
//     held or its order.
func TestDerivedStateFollowsTheState(t *testing.T) {
	for _, mode := range []string{"g3", "ssd offload"} {
		t.Run(mode, func(t *testing.T) {
			h := tierHarness(t, func(c *Config) {
				c.EvictionRatio = 0.3
				c.PromotionOnHit = true
				c.PromotionAdmissionThreshold = 1
				c.AllowEvictSoftPinnedObjects = true
				if mode == "g3" {
					c.GlobalFileSegmentSize = 96 << 10
					c.DFSFullPolicy = "evict_oldest"
				} else {
					c.EnableOffload = true
					c.QuotaBytes = 24 << 10 // small: moves to local disks make room there
				}
			})
			var seen Stats // the largest of each count, to see the mix reach every one of them
			check := func(s *State, step string) {
				t.Helper()
				got, want := s.Stats(h.now), statsByWalk(s, h.now)
				if got != want {
					t.Fatalf("%s: Stats %+v, a walk over every object %+v", step, got, want)
				}
				local := 0
				for _, o := range s.objects {
					if o.disk != nil && o.disk.client != "" {
						local++
					}
				}
				if local != s.stats.localDisk {
					t.Fatalf("%s: %d objects on local disks, counted %d", step, local, s.stats.localDisk)
				}
				copies := map[string]int{}
				for _, o := range s.objects {
					if o.disk != nil {
						copies[tierOf(o.disk)]++
					}
				}
				for tier, n := range copies {
					q := s.diskOrder[tier]
					if q == nil || q.live != n {
						t.Fatalf("%s: tier %q has %d disk copies, its queue %+v", step, tier, n, q)
					}
					var cur []diskItem
					for _, it := range q.items {
						if s.current(tier, it) {
							cur = append(cur, it)
						}
					}
					if len(cur) != n || !slices.IsSortedFunc(cur, itemBefore) {
						t.Fatalf("%s: tier %q queues %d of its %d copies (sorted: %v)", step, tier, len(cur), n, slices.IsSortedFunc(cur, itemBefore))
					}
				}
				for tier, q := range s.diskOrder {
					if copies[tier] == 0 && len(q.items) > 64 {
						t.Fatalf("%s: tier %q keeps %d entries and no copy", step, tier, len(q.items))
					}
				}
				use := map[string]diskUse{}
				for _, o := range s.objects {
					if o.disk != nil && o.disk.client != "" {
						u := use[o.disk.client]
						u.used += o.size
						use[o.disk.client] = u
					}
					if o.offload != nil && o.offload.local {
						u := use[o.offload.client]
						u.reserved += o.size
						use[o.offload.client] = u
					}
				}
				for tier, q := range s.diskOrder {
					if _, ok := use[tier]; !ok && tier != "" && (q.used != 0 || q.reserved != 0) {
						t.Fatalf("%s: %s's local disk use %+v kept, a walk finds none", step, tier, s.diskUse(tier))
					}
				}
				if g3 := s.diskUse(""); g3 != (diskUse{s.dfsUsed, s.dfsReserved}) {
					t.Fatalf("%s: G3's tier counts %+v, the state %d used, %d reserved", step, g3, s.dfsUsed, s.dfsReserved)
				}
				for c, u := range use {
					if got := s.diskUse(c); got != u {
						t.Fatalf("%s: %s's local disk use %+v, a walk %+v", step, c, got, u)
					}
					if q := s.localQuota(c); q > 0 && u.used+u.reserved > q {
						t.Fatalf("%s: %s's local disk holds %d bytes, quota %d", step, c, u.used+u.reserved, q)
					}
				}
				for k, o := range s.objects {
					if _, ok := s.resident[o]; len(o.replicas) > 0 && !ok {
						t.Fatalf("%s: %s has %d memory replicas but is not in the resident index", step, k, len(o.replicas))
					}
					for _, r := range o.replicas {
						if _, ok := s.segments[r.segID]; !ok {
							t.Fatalf("%s: %s keeps a replica on segment %s, which is gone", step, k, r.segID)
						}
					}
				}
				for o := range s.resident {
					if s.objects[o.key] != o {
						t.Fatalf("%s: the resident index holds %s, which is no longer the key's object", step, o.key)
					}
				}
				seen.Objects, seen.DiskOnly = max(seen.Objects, got.Objects), max(seen.DiskOnly, got.DiskOnly)
				seen.SoftPinned, seen.HardPinned = max(seen.SoftPinned, got.SoftPinned), max(seen.HardPinned, got.HardPinned)
				seen.Leased = max(seen.Leased, got.Leased)
			}
			rng := rand.New(rand.NewPCG(3, uint64(len(mode))))
			churn := newTierChurn(t, h, rng)
			for step := range 4000 {
				key := fmt.Sprintf("k%d", rng.IntN(60))
				client := fmt.Sprintf("c%d", rng.IntN(2))
				switch op := rng.IntN(100); {
				case op < 35:
					cfg := api.ReplicateConfig{}
					switch rng.IntN(6) {
					case 0:
						cfg.WithHardPin = true
					case 1, 2:
						ttl := uint64(rng.IntN(30_000))
						cfg.WithSoftPin, cfg.SoftPinTTLMs = true, &ttl
					}
					if r := h.apply(Entry{Op: OpPutStart, ClientID: client, Key: key, Size: uint64(1+rng.IntN(8)) * 1024, Config: &cfg}); r.Code == api.OK {
						check(h.s, fmt.Sprintf("step %d, put started", step))
						if rng.IntN(8) != 0 { // else left in progress: ended by a later put of the key, reclaimed as stale or dropped by an unmount
							h.apply(Entry{Op: OpPutEnd, ClientID: client, Key: key})
						}
					}
				case op < 42:
					if r := h.upsertStart(client, key, uint64(1+rng.IntN(8))*1024); r.Code == api.OK {
						end := OpPutEnd
						if rng.IntN(3) == 0 {
							end = OpPutRevoke
						}
						h.apply(Entry{Op: end, ClientID: client, Key: key})
					}
				case op < 55:
					if g := h.apply(Entry{Op: OpGrantLease, ClientID: client, Key: key}); g.Promote != nil {
						e := Entry{Op: OpPromoteDone, ClientID: client, Key: key}
						if rng.IntN(4) == 0 {
							e.Error = "copy failed"
						}
						h.apply(e)
					}
				case op < 60:
					h.apply(Entry{Op: OpRemove, Key: key, Force: rng.IntN(2) == 0})
				case op < 63:
					seg := ""
					if rng.IntN(2) == 0 {
						seg = fmt.Sprintf("s%d", churn.live[rng.IntN(len(churn.live))])
					}
					h.apply(Entry{Op: OpReplicaClear, ClientID: client, Key: key, SegName: seg})
				case op < 85:
					churn.finishMoves(5)
				case op < 93:
					churn.tick()
				case op < 96:
					churn.remount()
				default:
					check(h.snapshot(), fmt.Sprintf("step %d, decoded", step))
				}
				check(h.s, fmt.Sprintf("step %d", step))
				if step%97 == 0 { // also later on, when pins and leases have run out
					h.advance(time.Duration(rng.IntN(10)) * time.Second)
					check(h.s, fmt.Sprintf("step %d, later", step))
				}
			}
			st := h.s.Stats(h.now)
			if st.Counters.OffloadedObjects == 0 || st.Counters.Promotions == 0 || st.Counters.EvictedObjects == 0 {
				t.Fatalf("the mix never moved, evicted or promoted an object: %+v", st.Counters)
			}
			if seen.Objects == 0 || seen.DiskOnly == 0 || seen.SoftPinned == 0 || seen.HardPinned == 0 || seen.Leased == 0 {
				t.Fatalf("the mix never reached every count: largest %+v", seen)
			}
			if mode == "g3" && st.Counters.DFSEvictedObjects == 0 {
				t.Fatalf("G3 never filled up: %+v", st.Counters)
			}
			if mode != "g3" && st.Counters.LocalDiskEvicted == 0 {
				t.Fatalf("no local disk ever reached its quota: %+v", st.Counters)
			}
			ref := NewState(h.s.cfg)
			for _, e := range h.log {
				ref.resident = map[*object]struct{}{}
				for _, o := range ref.objects {
					ref.noteResident(o)
				}
				ref.Apply(e)
			}
			a, err := h.s.Encode()
			if err != nil {
				t.Fatal(err)
			}
			b, err := ref.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a, b) {
				t.Fatal("the state replayed with an exact resident index differs from the one kept incrementally")
			}
		})
	}
}

// TestTimedSetsStayBounded: where nothing asks for Stats, the sets of leased and soft-pinned
// objects keep within twice what is live (or the minimum bound) however many objects are read
// or pinned over time, and Stats still counts right.
func TestTimedSetsStayBounded(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.DefaultKVLeaseTTL = time.Second })
	h.mount("c1", "s1", "h:1", 1<<30, 64<<20)
	ttl := uint64(1000)
	for i := range 10050 {
		key := fmt.Sprintf("k%d", i)
		cfg := api.ReplicateConfig{WithSoftPin: true, SoftPinTTLMs: &ttl}
		expectCode(t, "put "+key, h.put("c1", key, 1024, cfg), api.OK)
		h.apply(Entry{Op: OpGrantLease, ClientID: "c2", Key: key})
		if i%100 == 99 {
			h.advance(2 * time.Second) // every pin and lease so far runs out
		}
		if n := len(h.s.stats.leased); n > 2*minTimedBound {
			t.Fatalf("after %d reads the leased set holds %d objects, at most 100 of them live", i+1, n)
		}
		if n := len(h.s.stats.softPinned); n > 2*minTimedBound {
			t.Fatalf("after %d pins the pinned set holds %d objects, at most 100 of them live", i+1, n)
		}
	}
	if got, want := h.s.Stats(h.now), statsByWalk(h.s, h.now); got != want || got.Leased != 50 || got.SoftPinned != 50 {
		t.Fatalf("Stats %+v, a walk %+v (50 leased and pinned)", got, want)
	}
}
