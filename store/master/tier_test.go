package master

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/store/api"
)

func tierHarness(t *testing.T, mutate ...func(*Config)) *harness {
	return newHarness(t, append([]func(*Config){func(c *Config) {
		c.RootFSDir = "/g3"
		c.EvictionRatio = 0.5
		c.EvictionHighWatermarkRatio = 0.9
	}}, mutate...)...)
}

// OffloadTasks lists the moves to a disk tier assigned to clientID, by key (the server lists
// them by generation, OffloadTasksAfter).
func (s *State) OffloadTasks(clientID string) []api.OffloadTask {
	tasks, _ := s.OffloadTasksAfter(clientID, 0)
	slices.SortFunc(tasks, func(a, b api.OffloadTask) int { return strings.Compare(a.Key, b.Key) })
	return tasks
}

// finishMoves completes every move to G3 handed out, as the clients would.
func (h *harness) finishMoves(client string) int {
	h.t.Helper()
	tasks := h.s.OffloadTasks(client)
	for i, task := range tasks {
		r := h.apply(Entry{Op: OpOffloadDone, ClientID: client, Key: task.Key, Path: task.Path, Checksum: uint32(100 + i)})
		expectCode(h.t, "offload_done "+task.Key, r, api.OK)
	}
	return len(tasks)
}

func TestEvictionMovesObjectsToG3(t *testing.T) {
	h := tierHarness(t)
	h.mount("c1", "s1", "host1", 1<<20, 4096)
	for i := range 4 {
		expectCode(t, "put", h.put("c1", string(rune('a'+i)), 1024, api.ReplicateConfig{}), api.OK)
	}
	// Memory is full: the fifth put is told to retry while the LRU objects move to G3.
	r := h.put("c1", "e", 1024, api.ReplicateConfig{})
	expectCode(t, "put into a full memory", r, api.NO_AVAILABLE_HANDLE)
	if !r.Retry {
		t.Fatalf("a put waiting on moves to G3 should be retryable: %+v", r)
	}
	tasks := h.s.OffloadTasks("c1")
	if len(tasks) != 2 || tasks[0].Key != "a" || tasks[1].Key != "b" || tasks[0].SegmentID != "s1" {
		t.Fatalf("tasks %+v, want a and b from s1", tasks)
	}
	// A second full put does not hand out more moves than the eviction quota.
	h.put("c1", "e", 1024, api.ReplicateConfig{})
	if n := len(h.s.OffloadTasks("c1")); n != 2 {
		t.Fatalf("%d moves in progress, want 2", n)
	}
	h.finishMoves("c1")
	st := h.s.Stats(h.now)
	if st.DFSUsed != 2048 || st.Used != 2048 || st.DiskOnly != 2 || st.Counters.OffloadedObjects != 2 {
		t.Fatalf("after the moves: %+v", st)
	}
	expectCode(t, "put after the moves", h.put("c1", "e", 1024, api.ReplicateConfig{}), api.OK)
	// A get of a G3-only object answers its disk replica with the recorded checksum.
	g := h.apply(Entry{Op: OpGrantLease, ClientID: "c2", Key: "a"})
	expectCode(t, "get a", g, api.OK)
	if len(g.Replicas) != 1 || !g.Replicas[0].IsDisk() || g.Replicas[0].Checksum != 100 || g.Replicas[0].Size != 1024 {
		t.Fatalf("replicas of a: %+v", g.Replicas)
	}
	// Removing it hands its file out as garbage.
	rm := h.apply(Entry{Op: OpRemove, Key: "a", Force: true})
	expectCode(t, "remove a", rm, api.OK)
	if len(rm.Garbage) != 1 || rm.Garbage[0] != g.Replicas[0].Path {
		t.Fatalf("garbage %v, want [%s]", rm.Garbage, g.Replicas[0].Path)
	}
	if st := h.s.Stats(h.now); st.DFSUsed != 1024 {
		t.Fatalf("dfs used %d after remove, want 1024", st.DFSUsed)
	}
	// The state round-trips through a snapshot, moves and files included.
	h.advance(1)
	h.put("c1", "f", 1024, api.ReplicateConfig{}) // starts more moves
	d := h.snapshot()
	if d.Digest() != h.s.Digest() || len(d.OffloadTasks("c1")) != len(h.s.OffloadTasks("c1")) {
		t.Fatalf("decoded state differs")
	}
	// ... and so do the moves' generations (a client's poll cursor stays valid on a standby).
	_, gen := h.s.OffloadTasksAfter("c1", 0)
	for after := range gen + 1 {
		a, ga := h.s.OffloadTasksAfter("c1", after)
		b, gb := d.OffloadTasksAfter("c1", after)
		if !slices.Equal(a, b) || ga != gb {
			t.Fatalf("moves after generation %d: %+v (gen %d) before the snapshot, %+v (gen %d) after", after, a, ga, b, gb)
		}
	}
}

func TestG3PinsLeasesAndClientLoss(t *testing.T) {
	h := tierHarness(t, func(c *Config) { c.AllowEvictSoftPinnedObjects = false; c.EvictionRatio = 1 })
	h.mount("c1", "s1", "host1", 1<<20, 4096)
	h.put("c1", "hard", 1024, api.ReplicateConfig{WithHardPin: true})
	h.put("c1", "soft", 1024, api.ReplicateConfig{WithSoftPin: true})
	h.put("c1", "plain", 1024, api.ReplicateConfig{})
	h.put("c1", "plain2", 1024, api.ReplicateConfig{})
	h.apply(Entry{Op: OpTick})
	keys := map[string]bool{}
	for _, task := range h.s.OffloadTasks("c1") {
		keys[task.Key] = true
	}
	if len(keys) != 2 || !keys["plain"] || !keys["plain2"] {
		t.Fatalf("moves %v: pinned objects must stay in memory", keys)
	}
	// A lease taken during the move keeps the memory copy after it.
	h.apply(Entry{Op: OpGrantLease, ClientID: "c2", Key: "plain"})
	h.finishMoves("c1")
	if g := h.apply(Entry{Op: OpGrantLease, ClientID: "c2", Key: "plain"}); len(g.Replicas) != 2 {
		t.Fatalf("leased object: replicas %+v, want memory and disk", g.Replicas)
	}
	// The client dies: objects with a G3 file survive, the others go with its memory.
	h.apply(Entry{Op: OpExpireClient, ClientID: "c1"})
	for key, want := range map[string]api.ErrorCode{"plain": api.OK, "plain2": api.OK, "hard": api.OBJECT_NOT_FOUND, "soft": api.OBJECT_NOT_FOUND} {
		expectCode(t, "get "+key, h.apply(Entry{Op: OpGrantLease, ClientID: "c2", Key: key}), want)
	}
}

// TestMoveAheadOfNeed: the put that takes memory above the high watermark starts moves to G3
// itself (no tick, memory not full yet), least recently used first, so that the client writes
// while later puts use the room left; without a disk tier a put evicts nothing by itself.
func TestMoveAheadOfNeed(t *testing.T) {
	h := tierHarness(t) // eviction ratio 0.5, high watermark 0.9
	h.mount("c1", "s1", "host1", 1<<20, 8192)
	for i := range 7 { // 7 of 8 KiB: below the watermark (7.2 KiB)
		h.put("c1", string(rune('a'+i)), 1024, api.ReplicateConfig{})
	}
	if tasks := h.s.OffloadTasks("c1"); len(tasks) != 0 {
		t.Fatalf("below the watermark: moves %+v", tasks)
	}
	h.put("c1", "h", 1024, api.ReplicateConfig{}) // 8 of 8: above; "h" is still being written
	var keys []string
	for _, task := range h.s.OffloadTasks("c1") {
		keys = append(keys, task.Key)
	}
	// Half of the 7 complete objects (ceil 3.5 = 4), oldest first.
	if !slices.Equal(keys, []string{"a", "b", "c", "d"}) {
		t.Fatalf("moves after the put that crossed the watermark: %v, want [a b c d]", keys)
	}
	// Once they are in G3, memory (4 of 8 KiB) is still above the drain's target (0.9-0.5 of
	// it): the last report starts the next moves (refillMoves); once those are in G3, memory is
	// below the target and the next put moves nothing.
	h.finishMoves("c1")
	if st := h.s.Stats(h.now); st.DiskOnly != 4 || st.Moving != 2 {
		t.Fatalf("after the first moves: %+v", st)
	}
	h.finishMoves("c1")
	h.put("c1", "i", 1024, api.ReplicateConfig{})
	if st := h.s.Stats(h.now); st.DiskOnly != 6 || st.Moving != 0 {
		t.Fatalf("after the moves: %+v", st)
	}

	plain := newHarness(t, func(c *Config) { c.EvictionRatio = 0.5; c.EvictionHighWatermarkRatio = 0.9 })
	plain.mount("c1", "s1", "host1", 1<<20, 8192)
	for i := range 8 {
		plain.put("c1", string(rune('a'+i)), 1024, api.ReplicateConfig{})
	}
	if st := plain.s.Stats(plain.now); st.Objects != 8 || st.Counters.EvictedObjects != 0 {
		t.Fatalf("without a disk tier a put above the watermark evicted: %+v", st)
	}
}

// TestRefillMovesUntilTarget: when a bucket's moves end (one batch report) and memory is still
// above the eviction's target (high watermark less eviction_ratio), the next moves start in
// that same entry; once the target is reached, none do.
func TestRefillMovesUntilTarget(t *testing.T) {
	h := tierHarness(t, func(c *Config) { c.EvictionRatio = 0.25 }) // target (0.9-0.25) x 1 MiB
	h.mount("c1", "s1", "host1", 1<<20, 1<<20)
	for i := range 16 { // the 15th crosses the watermark: a quarter of the 15 complete objects move
		h.put("c1", fmt.Sprintf("k%02d", i), 64<<10, api.ReplicateConfig{})
	}
	report := func() int {
		tasks := h.s.OffloadTasks("c1")
		e := Entry{Op: OpBatch, ClientID: "c1"}
		for i, task := range tasks {
			e.Batch = append(e.Batch, Entry{Op: OpOffloadDone, ClientID: "c1", Key: task.Key, Path: task.Path, File: "bucket", Offset: int64(i) << 20, Checksum: 1})
		}
		expectCode(t, "batch offload_done", h.apply(e), api.OK)
		return len(tasks)
	}
	if n := report(); n != 4 {
		t.Fatalf("%d moves after the watermark was crossed, want 4", n)
	}
	// 12 objects (768 KiB) left, above the 665.6 KiB target: a quarter of them start at once.
	var keys []string
	for _, task := range h.s.OffloadTasks("c1") {
		keys = append(keys, task.Key)
	}
	if !slices.Equal(keys, []string{"k04", "k05", "k06"}) {
		t.Fatalf("moves started by the report: %v, want [k04 k05 k06]", keys)
	}
	// 9 objects (576 KiB) left, below the target: the drain stops.
	if n := report(); n != 3 {
		t.Fatalf("reported %d moves, want 3", n)
	}
	if st := h.s.Stats(h.now); st.Moving != 0 || st.DiskOnly != 7 {
		t.Fatalf("after reaching the target: %+v", st)
	}
}

func TestMoveCancelledWhenClientDiesOrTimesOut(t *testing.T) {
	h := tierHarness(t, func(c *Config) { c.EvictionRatio = 1 })
	h.mount("c1", "s1", "host1", 1<<20, 4096)
	h.putAll("c1", 1024, 1024, 2048)
	h.apply(Entry{Op: OpTick})
	tasks := h.s.OffloadTasks("c1")
	if len(tasks) != 3 {
		t.Fatalf("tasks %+v", tasks)
	}
	// A stale move times out: nothing lost, the reservation released.
	h.advance(h.s.cfg.PutStartDiscardTimeout)
	if !h.s.NeedsTick(h.now) {
		t.Fatal("a stale move needs a tick")
	}
	h.apply(Entry{Op: OpTick}) // cancels, then hands out fresh moves
	late := h.apply(Entry{Op: OpOffloadDone, ClientID: "c1", Key: tasks[0].Key, Path: tasks[0].Path})
	expectCode(t, "done of a cancelled move", late, api.INVALID_WRITE)
	// The client dies mid-move: the moves end, the objects go with its memory.
	h.apply(Entry{Op: OpExpireClient, ClientID: "c1"})
	st := h.s.Stats(h.now)
	if st.Moving != 0 || st.DFSReserved != 0 || st.Objects != 0 || st.Counters.OffloadFailures != 6 {
		t.Fatalf("after the client died: %+v", st)
	}
}

func TestG3CapacityRefuseOrEvictOldest(t *testing.T) {
	for _, policy := range []string{"refuse", "evict_oldest"} {
		t.Run(policy, func(t *testing.T) {
			h := tierHarness(t, func(c *Config) { c.GlobalFileSegmentSize = 2048; c.DFSFullPolicy = policy; c.EvictionRatio = 0.25 })
			h.mount("c1", "s1", "host1", 1<<20, 4096)
			var last Result
			for i := range 8 {
				h.advance(1)
				key := string(rune('a' + i))
				for attempt := 0; attempt < 4; attempt++ {
					if last = h.put("c1", key, 1024, api.ReplicateConfig{}); last.Code == api.OK {
						break
					}
					h.finishMoves("c1")
					h.advance(1)
				}
			}
			st := h.s.Stats(h.now)
			if st.DFSUsed > 2048 {
				t.Fatalf("G3 holds %d bytes, over its 2048", st.DFSUsed)
			}
			// Memory holds 4 objects and G3 2, so at most 6 live at once; which ones and how many
			// moves it took depends on when moves start (at the tick, or ahead of need when a
			// put crosses the watermark), so the counts are bounds.
			if st.Objects > 6 {
				t.Fatalf("%s: %d objects live, more than memory and G3 hold: %+v", policy, st.Objects, st)
			}
			switch policy {
			case "refuse":
				expectCode(t, "put into full memory and full G3", last, api.NO_AVAILABLE_HANDLE)
				if st.Counters.DFSRefused == 0 || st.Counters.DFSEvictedObjects != 0 || st.Objects != 6 {
					t.Fatalf("refuse: %+v", st)
				}
			case "evict_oldest":
				expectCode(t, "last put", last, api.OK)
				if st.Counters.DFSEvictedObjects < 2 || st.Counters.DFSRefused != 0 {
					t.Fatalf("evict_oldest: %+v", st)
				}
				expectCode(t, "oldest is gone", h.apply(Entry{Op: OpGrantLease, ClientID: "c2", Key: "a"}), api.OBJECT_NOT_FOUND)
				expectCode(t, "newest is there", h.apply(Entry{Op: OpGrantLease, ClientID: "c2", Key: "h"}), api.OK)
			}
		})
	}
}

func TestPromotionOnHit(t *testing.T) {
	h := tierHarness(t, func(c *Config) { c.PromotionOnHit = true; c.PromotionAdmissionThreshold = 2; c.EvictionRatio = 0.25 })
	h.mount("c1", "s1", "host1", 1<<20, 8192)
	for i := range 8 {
		h.put("c1", string(rune('a'+i)), 1024, api.ReplicateConfig{})
	}
	h.apply(Entry{Op: OpTick})
	h.finishMoves("c1")
	if g := h.apply(Entry{Op: OpGrantLease, ClientID: "c2", Key: "a"}); g.Promote != nil || !g.Replicas[0].IsDisk() {
		t.Fatalf("first disk hit: %+v", g)
	}
	g := h.apply(Entry{Op: OpGrantLease, ClientID: "c2", Key: "a"})
	if g.Promote == nil || len(g.Replicas) != 1 {
		t.Fatalf("second disk hit should promote: %+v", g)
	}
	expectCode(t, "promote_done", h.apply(Entry{Op: OpPromoteDone, ClientID: "c2", Key: "a"}), api.OK)
	g = h.apply(Entry{Op: OpGrantLease, ClientID: "c2", Key: "a"})
	if len(g.Replicas) != 2 || g.Replicas[0].IsDisk() || !g.Replicas[1].IsDisk() || g.Promote != nil {
		t.Fatalf("after promotion: %+v", g.Replicas)
	}
	if st := h.s.Stats(h.now); st.Counters.Promotions != 1 || st.Counters.DiskReads != 2 {
		t.Fatalf("counters %+v", st.Counters)
	}
}

func TestBucketFileDeletedWithItsLastObject(t *testing.T) {
	h := tierHarness(t, func(c *Config) { c.EvictionRatio = 1 })
	h.mount("c1", "s1", "host1", 1<<20, 4096)
	h.putAll("c1", 1024, 1024, 1024, 1024)
	h.apply(Entry{Op: OpTick})
	for i, task := range h.s.OffloadTasks("c1") {
		r := h.apply(Entry{Op: OpOffloadDone, ClientID: "c1", Key: task.Key, Path: task.Path, File: "bucket", Offset: int64(i) * 8192, Checksum: 7})
		expectCode(t, "done "+task.Key, r, api.OK)
		// a repeated report of the same placement is a no-op
		expectCode(t, "repeat "+task.Key, h.apply(Entry{Op: OpOffloadDone, ClientID: "c1", Key: task.Key, Path: task.Path, File: "bucket", Offset: int64(i) * 8192}), api.OK)
	}
	g := h.apply(Entry{Op: OpGrantLease, ClientID: "c2", Key: "b"})
	if len(g.Replicas) != 1 || g.Replicas[0].Path != "bucket" || g.Replicas[0].Offset != 8192 {
		t.Fatalf("replicas of b: %+v", g.Replicas)
	}
	for _, key := range []string{"a", "b", "c"} {
		if r := h.apply(Entry{Op: OpRemove, Key: key, Force: true}); len(r.Garbage) != 0 {
			t.Fatalf("remove %s freed %v while d is still in the bucket", key, r.Garbage)
		}
	}
	if r := h.apply(Entry{Op: OpRemove, Key: "d", Force: true}); len(r.Garbage) != 1 || r.Garbage[0] != "bucket" {
		t.Fatalf("remove of the last object: garbage %v, want [bucket]", r.Garbage)
	}
}

// tierChurn is the random background the randomized tier tests share: segments of 64 KiB
// mounted in turn for clients c0 and c1 (remount unmounts the oldest and mounts a new one),
// moves finished (one in failOneIn failing), and time passing with a tick.
type tierChurn struct {
	t    *testing.T
	h    *harness
	rng  *rand.Rand
	n    int
	live []int // mounted segments, oldest first
}

func newTierChurn(t *testing.T, h *harness, rng *rand.Rand) *tierChurn {
	c := &tierChurn{t: t, h: h, rng: rng}
	c.mount()
	c.mount()
	return c
}

func (c *tierChurn) mount() {
	c.n++
	c.live = append(c.live, c.n)
	c.h.apply(Entry{Op: OpMountSegment, ClientID: fmt.Sprintf("c%d", c.n%2), Segment: &api.Segment{ID: fmt.Sprintf("s%d", c.n), Name: "h:1",
		Base: uint64(c.n) << 32, Size: 64 << 10, OffloadEndpoint: "127.0.0.1:1"}})
}

func (c *tierChurn) remount() {
	c.t.Helper()
	old := c.live[0]
	c.live = c.live[1:]
	if r := c.h.apply(Entry{Op: OpUnmountSegment, ClientID: fmt.Sprintf("c%d", old%2), SegmentID: fmt.Sprintf("s%d", old)}); r.Code != api.OK {
		c.t.Fatalf("unmount s%d: %v", old, r.Err())
	}
	c.mount()
}

func (c *tierChurn) finishMoves(failOneIn int) {
	for _, client := range []string{"c0", "c1"} {
		for _, task := range c.h.s.OffloadTasks(client) {
			e := Entry{Op: OpOffloadDone, ClientID: client, Key: task.Key, Path: task.Path, Checksum: 1}
			if c.rng.IntN(failOneIn) == 0 {
				e.Error = "disk full"
			}
			c.h.apply(e)
		}
	}
}

func (c *tierChurn) tick() {
	c.h.advance(time.Duration(c.rng.IntN(40)) * time.Second) // some moves time out
	c.h.apply(Entry{Op: OpTick})
}

// TestMoveCountsFollowMoves: the counts of moves in progress that puts consult (movesDown,
// offloadingAny) are kept up as moves start and end rather than recounted per put; through a
// random mix of puts, gets, removes, finished and failed moves, timeouts, unmounts and a
// snapshot round trip, they always equal a count over the moves themselves.
func TestMoveCountsFollowMoves(t *testing.T) {
	for _, mode := range []string{"g3", "ssd offload with copies after puts"} {
		t.Run(mode, func(t *testing.T) {
			h := tierHarness(t, func(c *Config) {
				c.EvictionRatio = 0.3
				if mode != "g3" {
					c.EnableOffload = true
				}
			})
			check := func(s *State, step string) {
				t.Helper()
				var all, down int
				var bytes uint64
				for _, o := range s.moving {
					if o.offload != nil {
						all++
						if !o.offload.keep {
							down++
							bytes += o.size
						}
					}
				}
				if n, b := s.movesDown(); n != down || b != bytes || s.offloadingAny() != all {
					t.Fatalf("%s: counted %d moves down (%d bytes), %d in all; the moves say %d (%d bytes), %d", step, n, b, s.offloadingAny(), down, bytes, all)
				}
			}
			rng := rand.New(rand.NewPCG(7, 9))
			churn := newTierChurn(t, h, rng)
			for step := range 3000 {
				key := fmt.Sprintf("k%d", rng.IntN(60))
				switch op := rng.IntN(100); {
				case op < 45:
					h.put(fmt.Sprintf("c%d", rng.IntN(2)), key, uint64(1+rng.IntN(8))*1024, api.ReplicateConfig{})
				case op < 55:
					h.apply(Entry{Op: OpGrantLease, ClientID: "c0", Key: key})
				case op < 62:
					h.apply(Entry{Op: OpRemove, Key: key, Force: rng.IntN(2) == 0})
				case op < 85:
					churn.finishMoves(4)
				case op < 92:
					churn.tick()
				case op < 95:
					churn.remount()
				default:
					d := h.snapshot()
					check(d, fmt.Sprintf("step %d, decoded", step))
				}
				check(h.s, fmt.Sprintf("step %d", step))
			}
			if st := h.s.Stats(h.now); st.Counters.OffloadedObjects == 0 || st.Counters.OffloadFailures == 0 {
				t.Fatalf("the mix never finished or failed a move: %+v", st.Counters)
			}
		})
	}
}

// Promotion's watermark gate is upstream's: memory below the high watermark now, even when the
// promoted copy takes usage past it; at or above the watermark no promotion.
func TestPromotionGateIsTheCurrentUsage(t *testing.T) {
	h := tierHarness(t, func(c *Config) { c.PromotionOnHit = true; c.PromotionAdmissionThreshold = 1; c.EvictionRatio = 0.01 })
	h.mount("c1", "s1", "host1", 1<<20, 20*1024) // watermark: 18432 bytes
	expectCode(t, "put big", h.put("c1", "big", 2048, api.ReplicateConfig{}), api.OK)
	for i := range 17 { // the last one takes usage past the watermark: big, the oldest, moves
		expectCode(t, "put", h.put("c1", fmt.Sprintf("f%d", i), 1024, api.ReplicateConfig{}), api.OK)
	}
	if n := h.finishMoves("c1"); n != 1 {
		t.Fatalf("%d moves, want big's", n)
	}
	if info, _ := h.s.Query("big"); len(info.Replicas) != 1 || !info.Replicas[0].IsDisk() {
		t.Fatalf("big is not on disk only: %+v", info.Replicas)
	}
	// usage 17408 + one more object: exactly the watermark, no promotion
	expectCode(t, "put at the watermark", h.put("c1", "w", 1024, api.ReplicateConfig{}), api.OK)
	if g := h.apply(Entry{Op: OpGrantLease, ClientID: "c2", Key: "big"}); g.Promote != nil {
		t.Fatalf("promotion at the watermark: %+v", g.Promote)
	}
	// 17408 bytes used: below the watermark, though 17408 + 2048 is above it
	expectCode(t, "remove w", h.apply(Entry{Op: OpRemove, Key: "w", Force: true}), api.OK)
	g := h.apply(Entry{Op: OpGrantLease, ClientID: "c2", Key: "big"})
	if g.Promote == nil {
		t.Fatalf("no promotion below the watermark: %+v", g)
	}
	expectCode(t, "promote_done", h.apply(Entry{Op: OpPromoteDone, ClientID: "c2", Key: "big"}), api.OK)
}
