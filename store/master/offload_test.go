package master

import (
	"testing"

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
