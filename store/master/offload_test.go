package master

import (
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/store/api"
)

func offloadHarness(t *testing.T, mutate ...func(*Config)) *harness {
	return newHarness(t, append([]func(*Config){func(c *Config) {
		c.EnableOffload = true
		c.EvictionRatio = 0.5
		c.EvictionHighWatermarkRatio = 0.9
	}}, mutate...)...)
}

func (h *harness) mountOffload(client, id, name, endpoint string, base, size uint64) {
	h.t.Helper()
	r := h.apply(Entry{Op: OpMountSegment, ClientID: client, Segment: &api.Segment{ID: id, Name: name, Base: base, Size: size, OffloadEndpoint: endpoint}})
	expectCode(h.t, "mount "+id, r, api.OK)
}

func TestOffloadOnEvictMovesToTheHoldersDisk(t *testing.T) {
	h := offloadHarness(t, func(c *Config) { c.OffloadOnEvict = true })
	h.mountOffload("c1", "s1", "host1", "host1:9000", 1<<20, 4096)
	h.putAll("c1", 1024, 1024, 1024, 1024) // full, and no put crossed the watermark with an evictable object
	if n := len(h.s.OffloadTasks("c1")); n != 0 {
		t.Fatalf("%d moves with --offload_on_evict before any eviction", n)
	}
	r := h.put("c1", "e", 1024, api.ReplicateConfig{})
	expectCode(t, "put into a full memory", r, api.NO_AVAILABLE_HANDLE)
	if !r.Retry {
		t.Fatalf("a put waiting on moves to local disk should be retryable: %+v", r)
	}
	tasks := h.s.OffloadTasks("c1")
	if len(tasks) != 2 || !tasks[0].Local || !tasks[1].Local {
		t.Fatalf("tasks %+v, want two local moves", tasks)
	}
	h.finishMoves("c1")
	st := h.s.Stats(h.now)
	if st.LocalDiskUsed != 2048 || st.DFSUsed != 0 || st.DiskOnly != 2 || st.Counters.LocalOffloadedObjects != 2 {
		t.Fatalf("after the moves: %+v", st)
	}
	g := h.apply(Entry{Op: OpGrantLease, ClientID: "c2", Key: "a"})
	expectCode(t, "get a", g, api.OK)
	if len(g.Replicas) != 1 || !g.Replicas[0].IsLocalDisk() || g.Replicas[0].Endpoint != "host1:9000" ||
		g.Replicas[0].SegmentName != "host1" || g.Replicas[0].Checksum != 100 {
		t.Fatalf("replicas of a: %+v", g.Replicas)
	}
	// Removing it hands its file to its client, not to the master's G3 cleanup.
	rm := h.apply(Entry{Op: OpRemove, Key: "a", Force: true})
	if len(rm.Garbage) != 0 || len(rm.LocalGarbage) != 1 || rm.LocalGarbage[0] != (LocalFile{Client: "c1", Path: g.Replicas[0].Path}) {
		t.Fatalf("garbage %v / %v", rm.Garbage, rm.LocalGarbage)
	}
	// The state round-trips through a snapshot with its local-disk replicas.
	d := h.snapshot()
	if d.Digest() != h.s.Digest() {
		t.Fatal("decoded state differs")
	}
	if info, _ := d.Query("b"); len(info.Replicas) != 1 || !info.Replicas[0].IsLocalDisk() {
		t.Fatalf("restored replicas of b: %+v", info.Replicas)
	}
	// The holder goes: its local-disk objects go with it.
	expectCode(t, "expire c1", h.apply(Entry{Op: OpExpireClient, ClientID: "c1"}), api.OK)
	expectCode(t, "get b", h.apply(Entry{Op: OpGrantLease, ClientID: "c2", Key: "b"}), api.OBJECT_NOT_FOUND)
	if st := h.s.Stats(h.now); st.LocalDiskUsed != 0 || st.Objects != 0 || st.Counters.LocalDiskLost != 1 {
		t.Fatalf("after the holder expired: %+v", st)
	}
}

func TestOffloadAfterPutKeepsMemory(t *testing.T) {
	h := offloadHarness(t)
	h.mountOffload("c1", "s1", "host1", "host1:9000", 1<<20, 8192)
	h.mount("c2", "s2", "host2", 1<<30, 8192) // no SSD offload
	expectCode(t, "put", h.put("c1", "a", 1024, api.ReplicateConfig{PreferredSegments: []string{"s1"}}), api.OK)
	expectCode(t, "put", h.put("c2", "b", 1024, api.ReplicateConfig{PreferredSegments: []string{"s2"}}), api.OK)
	tasks := h.s.OffloadTasks("c1")
	if len(tasks) != 1 || tasks[0].Key != "a" || !tasks[0].Local {
		t.Fatalf("tasks %+v, want a copy of a", tasks)
	}
	if n := len(h.s.OffloadTasks("c2")); n != 0 {
		t.Fatalf("a client without SSD offload got %d moves", n)
	}
	h.finishMoves("c1")
	info, _ := h.s.Query("a")
	if len(info.Replicas) != 2 || info.Replicas[0].TierName() != api.KindMemory || !info.Replicas[1].IsLocalDisk() {
		t.Fatalf("replicas of a after the copy: %+v", info.Replicas)
	}
	// Eviction drops a's memory copy (it has its file), then b (no tier takes it).
	h.advance(1)
	if freed, sched := h.s.evictPass(h.now); freed != 1 || sched != 0 {
		t.Fatalf("first pass freed %d, scheduled %d", freed, sched)
	}
	if info, _ := h.s.Query("a"); len(info.Replicas) != 1 || !info.Replicas[0].IsLocalDisk() {
		t.Fatalf("replicas of a after eviction: %+v", info.Replicas)
	}
	if freed, sched := h.s.evictPass(h.now); freed != 1 || sched != 0 {
		t.Fatalf("second pass freed %d, scheduled %d", freed, sched)
	}
	if ok, _ := h.s.Exists("b"); ok {
		t.Fatal("b survived eviction without a tier to move to")
	}
}

func TestHolderGoneDuringPromotionRemovesTheObject(t *testing.T) {
	h := offloadHarness(t, func(c *Config) { c.OffloadOnEvict, c.PromotionOnHit, c.PromotionAdmissionThreshold = true, true, 1 })
	h.mountOffload("c1", "s1", "host1", "host1:9000", 1<<20, 8192)
	h.mount("c2", "s2", "host2", 1<<30, 8192)
	expectCode(t, "put", h.put("c1", "a", 1024, api.ReplicateConfig{PreferredSegments: []string{"s1"}}), api.OK)
	if !h.s.startOffload(h.s.objects["a"], h.now, false) {
		t.Fatal("no move to local disk")
	}
	h.finishMoves("c1")
	// A reader on c2 hits the local-only object and is handed a promotion replica.
	g := h.apply(Entry{Op: OpGrantLease, ClientID: "c2", Key: "a"})
	if g.Promote == nil {
		t.Fatalf("no promotion: %+v", g)
	}
	// The holder dies before the reader reports: the object has no source any more.
	expectCode(t, "expire c1", h.apply(Entry{Op: OpExpireClient, ClientID: "c1"}), api.OK)
	if ok, _ := h.s.Exists("a"); ok {
		t.Fatal("a survived its holder with only an unfilled promotion replica")
	}
	if st := h.s.Stats(h.now); st.Used != 0 || st.Moving != 0 {
		t.Fatalf("after the holder expired: %+v", st)
	}
}

// TestLocalDiskQuota: a client's local disk stays within its quota. With --enable_disk_eviction
// a move makes room by dropping the oldest local copies (not leased ones) to 90% of the quota;
// an object with no other copy goes with its copy. Without it the move is refused, and an
// eviction victim with nowhere to go is evicted as without SSD offload.
func TestLocalDiskQuota(t *testing.T) {
	setup := func(evict bool) *harness {
		h := offloadHarness(t, func(c *Config) { c.OffloadOnEvict, c.QuotaBytes, c.EnableDiskEviction = true, 2048, evict })
		h.mountOffload("c1", "s1", "host1", "host1:9000", 1<<20, 8192)
		h.mount("c2", "s2", "host2", 1<<30, 8192)
		for _, k := range []string{"a", "b", "c"} {
			expectCode(t, "put "+k, h.put("c1", k, 1024, api.ReplicateConfig{PreferredSegments: []string{"s1"}}), api.OK)
		}
		for _, k := range []string{"a", "b"} { // a and b move to c1's disk, a first: 2048 of 2048 bytes
			h.advance(time.Second)
			if !h.s.startOffload(h.s.objects[k], h.now, false) {
				t.Fatalf("no move of %s to local disk", k)
			}
			h.finishMoves("c1")
		}
		if st := h.s.Stats(h.now); st.LocalDiskUsed != 2048 || st.DiskOnly != 2 {
			t.Fatalf("after two moves: %+v", st)
		}
		return h
	}

	// Eviction on: c's move drops a and b (both only on disk) to get under 90% of the quota.
	h := setup(true)
	if !h.s.startOffload(h.s.objects["c"], h.now, false) {
		t.Fatal("c's move refused with disk eviction on")
	}
	if ok, _ := h.s.Exists("a"); ok {
		t.Fatal("a (only on c1's disk) survived the disk eviction")
	}
	if ok, _ := h.s.Exists("b"); ok {
		t.Fatal("b survived")
	}
	if n := len(h.s.localGarbage); n != 2 || h.s.localGarbage[0].Client != "c1" {
		t.Fatalf("files handed to c1 to delete: %v", h.s.localGarbage)
	}
	if st := h.s.Stats(h.now); st.LocalDiskUsed != 0 || st.Counters.LocalDiskEvicted != 2 || h.s.diskUse("c1") != (diskUse{reserved: 1024}) {
		t.Fatalf("after the disk eviction: %+v, use %+v", st, h.s.diskUse("c1"))
	}
	h.finishMoves("c1")
	if u := h.s.diskUse("c1"); u != (diskUse{used: 1024}) {
		t.Fatalf("c1's disk after c's move: %+v", u)
	}

	// A leased copy stays: a reader holds a, so only b goes, which is room enough.
	h = setup(true)
	expectCode(t, "get a", h.apply(Entry{Op: OpGrantLease, ClientID: "c2", Key: "a"}), api.OK)
	if !h.s.startOffload(h.s.objects["c"], h.now, false) {
		t.Fatal("c's move refused")
	}
	if ok, _ := h.s.Exists("a"); !ok {
		t.Fatal("the leased a was dropped")
	}
	if ok, _ := h.s.Exists("b"); ok {
		t.Fatal("b survived")
	}
	// the state as a restored snapshot has it counts the same disk use
	if d := h.snapshot(); d.diskUse("c1") != h.s.diskUse("c1") || d.diskUse("c1") != (diskUse{used: 1024, reserved: 1024}) {
		t.Fatalf("restored disk use %+v, want %+v", d.diskUse("c1"), h.s.diskUse("c1"))
	}

	// Eviction off: the move is refused and counted; nothing on the disk goes.
	h = setup(false)
	if h.s.startOffload(h.s.objects["c"], h.now, false) {
		t.Fatal("a move past the quota started without disk eviction")
	}
	if st := h.s.Stats(h.now); st.LocalDiskUsed != 2048 || st.Objects != 3 || st.Counters.LocalDiskRefused != 1 {
		t.Fatalf("after the refusal: %+v", st)
	}
	// and memory eviction drops c (no tier can take it) rather than waiting on the full disk
	h.advance(time.Second)
	if freed, sched := h.s.evictPass(h.now); freed != 1 || sched != 0 {
		t.Fatalf("eviction with a full local disk freed %d, scheduled %d", freed, sched)
	}
	if ok, _ := h.s.Exists("c"); ok {
		t.Fatal("c was not evicted")
	}

	// The quota is 90% of the capacity the client reports, --quota_bytes capping it.
	h = offloadHarness(t)
	expectCode(t, "mount", h.apply(Entry{Op: OpMountSegment, ClientID: "c3", Segment: &api.Segment{ID: "s3", Name: "h3", Base: 1 << 20,
		Size: 8192, OffloadEndpoint: "h3:1", OffloadCapacity: 10000}}), api.OK)
	if q := h.s.localQuota("c3"); q != 9000 {
		t.Fatalf("quota %d, want 9000", q)
	}
	h.s.cfg.QuotaBytes = 4096
	if q := h.s.localQuota("c3"); q != 4096 {
		t.Fatalf("quota with --quota_bytes %d, want 4096", q)
	}
	if q := h.s.localQuota("nobody"); q != 4096 {
		t.Fatalf("quota of a client without a reported capacity %d, want --quota_bytes", q)
	}
	h.s.cfg.QuotaBytes = 0
	if q := h.s.localQuota("nobody"); q != 0 {
		t.Fatalf("quota %d, want 0 (no limit) without a capacity or --quota_bytes", q)
	}
}

// diskUse is tier t's bytes: of its copies, and of the moves to it in progress.
type diskUse struct{ used, reserved uint64 }

func (s *State) diskUse(t string) diskUse {
	if q := s.diskOrder[t]; q != nil {
		return diskUse{q.used, q.reserved}
	}
	return diskUse{}
}

// unmount_local_disk (upstream's unmount_local_disk_segment): the client's disk leaves the
// store, its memory segment stays. Objects only on the disk go, moves to it in progress are
// cancelled (the objects stay in memory), and eviction then drops objects instead of moving them.
func TestUnmountLocalDisk(t *testing.T) {
	h := offloadHarness(t, func(c *Config) { c.OffloadOnEvict = true })
	h.mountOffload("c1", "s1", "host1", "host1:9000", 1<<20, 4096)
	h.putAll("c1", 1024, 1024, 1024, 1024)
	expectCode(t, "put e into a full memory", h.put("c1", "e", 1024, api.ReplicateConfig{}), api.NO_AVAILABLE_HANDLE)
	if n := h.finishMoves("c1"); n != 2 {
		t.Fatalf("%d moves, want 2", n)
	}
	for _, k := range []string{"e", "f"} {
		expectCode(t, "put "+k, h.put("c1", k, 1024, api.ReplicateConfig{}), api.OK)
	}
	expectCode(t, "put g into a full memory", h.put("c1", "g", 1024, api.ReplicateConfig{}), api.NO_AVAILABLE_HANDLE)
	moving := h.s.OffloadTasks("c1")
	if len(moving) == 0 {
		t.Fatal("no move in progress")
	}
	if st := h.s.Stats(h.now); st.DiskOnly != 2 || st.LocalDiskUsed != 2048 {
		t.Fatalf("before the unmount: %+v", st)
	}

	expectCode(t, "unmount_local_disk", h.apply(Entry{Op: OpUnmountLocalDisk, ClientID: "c1"}), api.OK)
	if tasks := h.s.OffloadTasks("c1"); len(tasks) != 0 {
		t.Fatalf("moves left after the unmount: %+v", tasks)
	}
	for _, k := range []string{"a", "b"} {
		expectCode(t, "get "+k+" (only on the disk)", h.apply(Entry{Op: OpGrantLease, ClientID: "c2", Key: k}), api.OBJECT_NOT_FOUND)
	}
	for _, k := range []string{"c", "d", "e", "f"} {
		g := h.apply(Entry{Op: OpGrantLease, ClientID: "c2", Key: k})
		expectCode(t, "get "+k, g, api.OK)
		if len(g.Replicas) != 1 || g.Replicas[0].IsDisk() || g.Replicas[0].SegmentName != "host1" {
			t.Fatalf("replicas of %s: %+v", k, g.Replicas)
		}
	}
	if st := h.s.Stats(h.now); st.LocalDiskUsed != 0 || st.DiskOnly != 0 || st.Objects != 4 || st.Counters.LocalDiskLost != 2 {
		t.Fatalf("after the unmount: %+v", st)
	}
	if seg := h.s.segments["s1"]; seg.OffloadEndpoint != "" || seg.OffloadCapacity != 0 {
		t.Fatalf("segment still offers its disk: %+v", seg.Segment)
	}
	// Full memory now evicts: the put goes through and nothing moves to the disk.
	h.advance(time.Minute) // past the leases of the gets
	expectCode(t, "put g after the unmount", h.put("c1", "g", 1024, api.ReplicateConfig{}), api.OK)
	if tasks := h.s.OffloadTasks("c1"); len(tasks) != 0 {
		t.Fatalf("moves after the unmount: %+v", tasks)
	}
	if d := h.snapshot(); d.Digest() != h.s.Digest() {
		t.Fatal("decoded state differs")
	}
	expectCode(t, "again", h.apply(Entry{Op: OpUnmountLocalDisk, ClientID: "c1"}), api.OK)
	expectCode(t, "unknown client", h.apply(Entry{Op: OpUnmountLocalDisk, ClientID: "nobody"}), api.SEGMENT_NOT_FOUND)
	expectCode(t, "no client", h.apply(Entry{Op: OpUnmountLocalDisk}), api.INVALID_PARAMS)
}
