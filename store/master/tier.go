package master

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/dfs"
)

// Storage tiers in the state machine. Every move between tiers is a state change made by an
// entry, so the serving master, a standby and a restore agree on where each object lives:
//
//   - evictPass (tick, or a put short of room) hands an object without a G3 file to the client
//     holding its memory copy: offloadRec, with the file name (dfs.PathFor, a fresh generation)
//     and the bytes reserved in the tier;
//   - the client writes the file (temporary name, checksum, rename) and proposes offload_done
//     with the checksum: the object gains its disk replica and, unless a reader holds a lease,
//     loses its memory copy;
//   - a get of an object with no memory copy counts a disk hit; with --promotion_on_hit, after
//     --promotion_admission_threshold hits and when memory has room below the high watermark,
//     the reader gets a memory replica to fill (promoteRec) and proposes promote_done;
//   - a move whose client disappears (its segment dropped) or that outlives
//     put_start_discard_timeout is cancelled: the object stays where it was.

type diskRec struct {
	path   string // file (relative to root_fs_dir); a bucket file may hold several objects
	offset int64  // of the object's header in the file
	sum    uint32
	at     int64 // when the file was recorded: the G3 tier's eviction order
	// SSD offload (offload.go): the client whose local disk holds the file ("" = G3) and its
	// offload read server.
	client, endpoint string
}

type offloadRec struct {
	client, segID string
	addr          uint64
	path          string
	gen           uint64 // the move's generation (dfsGen when it started, also in path)
	started       int64
	local         bool   // to the client's local disk (SSD offload), not G3
	keep          bool   // a copy made right after the put: the memory copy stays
	endpoint      string // local: the client's offload read server
}

type promoteRec struct {
	client, segID string
	addr          uint64
	started       int64
}

// inMemory reports whether o has a readable memory copy.
func (s *State) inMemory(o *object) bool {
	return o.unconfirmed || slices.ContainsFunc(o.replicas, func(r replicaRec) bool { return r.status == api.ReplicaComplete })
}

func (s *State) offloading() int { return s.downN }

// movesDown counts the moves to a disk tier in progress that free memory when they end (not
// the copies --enable_offload keeps), and their bytes.
func (s *State) movesDown() (n int, bytes uint64) { return s.downN, s.downBytes }

// setOffload starts o's move to a disk tier (rec), counting it.
func (s *State) setOffload(o *object, rec *offloadRec) {
	o.offload = rec
	s.offN++
	if !rec.keep {
		s.downN++
		s.downBytes += o.size
	}
}

// clearOffload ends o's move to a disk tier (done, cancelled or dropped), uncounting it.
func (s *State) clearOffload(o *object) {
	rec := o.offload
	if rec == nil {
		return
	}
	o.offload = nil
	s.offN--
	if !rec.keep {
		s.downN--
		s.downBytes -= o.size
	}
}

// minInFlight is the least a client may have moving to a disk tier at once: two 8 MiB bucket
// files (one written while the other is reported), so that small objects move in large writes
// even when the eviction quota is a few objects.
const minInFlight = 2 * dfs.BucketBytes

// moveRoom reports whether an eviction pass with n moves of bytes in progress may start
// another: up to two passes' worth of objects (one written while the other is reported), or
// moveBytes.
func (s *State) moveRoom(quota, n int, bytes uint64) bool {
	return n < 2*quota || bytes < s.moveBytes()
}

// moveBytes is how many bytes may be moving to a disk tier whatever the pass: minInFlight, at
// most an eighth of the memory (so that a small store is not emptied ahead of need).
func (s *State) moveBytes() uint64 { return min(minInFlight, s.capacity/8) }

// moveAhead starts moves to a disk tier when a put leaves memory above the high watermark and
// less than moveBytes are moving: what the tick would start within its period (100 ms),
// started at once, so that the clients write to disk while the puts use the room left below
// capacity, instead of after memory filled up (a put short of room waits for a move to end; at
// 64 KiB objects that serialised puts and writes). Like every entry's effect it depends only
// on the state and the entry's time.
func (s *State) moveAhead(now int64) {
	if !s.tiered() || !s.aboveWatermark() {
		return
	}
	if _, bytes := s.movesDown(); bytes < s.moveBytes() {
		s.evictPass(now)
	}
}

// refillMoves runs after an entry in which moves to a disk tier ended (once per entry, however
// many moves a batch report ended): while memory, counting the moves still in progress as
// freed, is above the eviction's target (the high watermark less eviction_ratio of the
// capacity) and less than moveBytes are moving, it starts the next moves at once. A drain that
// began at the high watermark then keeps the clients writing until it reaches its target,
// instead of stopping after the first moves until a put crosses the watermark again (with puts
// waiting for room, the disk idled between one bucket's report and the next bucket's moves).
// Only moves in progress lead here, so a workload below the watermark still never moves.
func (s *State) refillMoves(now int64) {
	if !s.tiered() || s.capacity == 0 {
		return
	}
	_, bytes := s.movesDown()
	target := max(0, s.cfg.EvictionHighWatermarkRatio-s.cfg.EvictionRatio) * float64(s.capacity)
	if float64(s.used-min(bytes, s.used)) > target && bytes < s.moveBytes() {
		s.evictPass(now)
	}
}

func (s *State) dfsFullNote() string {
	if c := s.cfg.GlobalFileSegmentSize; c > 0 && s.dfsUsed+s.dfsReserved >= c*9/10 {
		return fmt.Sprintf("; the G3 tier is full (%d of %d bytes, --dfs_full_policy=%s)", s.dfsUsed, c, s.cfg.DFSFullPolicy)
	}
	return ""
}

func (s *State) diskReplica(o *object) api.Replica {
	if o.disk.client != "" {
		return s.localReplica(o)
	}
	return api.Replica{SegmentID: "dfs", SegmentName: "dfs", Size: o.size, Status: api.ReplicaComplete,
		Kind: api.KindDisk, Path: o.disk.path, Offset: o.disk.offset, Checksum: o.disk.sum}
}

func (s *State) releaseReplica(o *object, idx int) {
	r := o.replicas[idx]
	if seg, ok := s.segments[r.segID]; ok {
		seg.alloc.release(r.addr-seg.Base, o.size)
		s.used -= alignUp(o.size)
	}
	o.replicas = slices.Delete(o.replicas, idx, idx+1)
	s.restat(o)
}

// dropMemory frees o's memory copies (it has a G3 file).
func (s *State) dropMemory(o *object) {
	s.dropValue(o) // valuecache.go
	s.counters.EvictedObjects++
	s.counters.EvictedBytes += o.size * uint64(len(o.replicas))
	for len(o.replicas) > 0 {
		s.releaseReplica(o, len(o.replicas)-1)
	}
}

// evictFromDisk evicts o's G3 copy: the file alone when o is also in memory, else the object.
func (s *State) evictFromDisk(o *object) {
	if s.inMemory(o) {
		s.dropDisk(o)
	} else {
		s.deleteObject(o)
	}
}

// dropDisk forgets o's G3 file (handed out as garbage).
func (s *State) dropDisk(o *object) {
	s.forgetDisk(o)
	ref := o.disk.ref()
	if s.fileRefs[ref]--; s.fileRefs[ref] <= 0 {
		delete(s.fileRefs, ref)
		if o.disk.client == "" {
			s.garbage = append(s.garbage, o.disk.path)
		} else if _, alive := s.clients[o.disk.client]; alive {
			s.localGarbage = append(s.localGarbage, LocalFile{Client: o.disk.client, Path: o.disk.path})
		}
	}
	if c := o.disk.client; c != "" {
		s.localUsed -= o.size
		s.stats.localDisk--
	} else {
		s.dfsUsed -= o.size
	}
	o.disk = nil
	o.diskHits = 0
	s.restat(o)
}

func (s *State) endMove(o *object) {
	if o.offload == nil && o.promote == nil {
		delete(s.moving, o.key)
	}
}

func (s *State) cancelOffload(o *object) {
	s.unreserve(o)
	s.clearOffload(o)
	s.endMove(o)
}

// unreserve gives back the room o's move to a disk tier held.
func (s *State) unreserve(o *object) {
	if !o.offload.local {
		s.dfsReserved -= o.size
	}
	s.releaseRoom(moveTier(o.offload), o.size)
}

func (s *State) cancelPromote(o *object) {
	p := o.promote
	if idx := slices.IndexFunc(o.replicas, func(r replicaRec) bool { return r.segID == p.segID && r.addr == p.addr }); idx >= 0 {
		s.releaseReplica(o, idx)
	}
	o.promote = nil
	s.endMove(o)
	if len(o.replicas) == 0 && o.disk == nil {
		s.deleteObject(o) // its disk copy went while it was being promoted
	}
}

// dropTiers is deleteObject's part for the tiers (memory replicas are released there).
func (s *State) dropTiers(o *object) {
	if o.disk != nil {
		s.dropDisk(o)
	}
	if o.offload != nil {
		s.unreserve(o)
		s.clearOffload(o)
	}
	o.promote = nil
	delete(s.moving, o.key)
}

// segmentGone cancels o's moves that depended on segment segID (just unmounted).
func (s *State) segmentGone(o *object, segID string) {
	if o.offload != nil && o.offload.segID == segID {
		s.counters.OffloadFailures++
		s.cancelOffload(o)
	}
	if o.promote != nil && o.promote.segID == segID {
		o.promote = nil // its replica was on the segment and is already gone
		s.endMove(o)
	}
}

func (s *State) moveTimeout() int64 { return int64(s.cfg.PutStartDiscardTimeout) }

func (s *State) staleMoves(now int64) bool {
	for _, o := range s.moving {
		if (o.offload != nil && now-o.offload.started >= s.moveTimeout()) ||
			(o.promote != nil && now-o.promote.started >= s.moveTimeout()) {
			return true
		}
	}
	return false
}

func (s *State) expireMoves(now int64) int {
	n := 0
	for _, key := range sortedMapKeys(s.moving) {
		o := s.moving[key]
		if o.offload != nil && now-o.offload.started >= s.moveTimeout() {
			s.counters.OffloadFailures++
			s.cancelOffload(o)
			n++
		}
		if o.promote != nil && now-o.promote.started >= s.moveTimeout() {
			s.cancelPromote(o)
			n++
		}
	}
	return n
}

// dfsRoom reports whether need more bytes fit the G3 tier, making room oldest-first under
// --dfs_full_policy=evict_oldest.
func (s *State) dfsRoom(need uint64, now int64) bool {
	c := s.cfg.GlobalFileSegmentSize
	fits := func() bool { return c == 0 || s.dfsUsed+s.dfsReserved+need <= c }
	if fits() || need > c || s.cfg.DFSFullPolicy != "evict_oldest" {
		return fits()
	}
	count := func(o *object) {
		s.counters.DFSEvictedObjects++
		s.counters.DFSEvictedBytes += o.size
	}
	s.dropOrphans(now, fits, count) // the prefix policy's first (orphans.go)
	s.dropOldest("", now, fits, count)
	return fits()
}

// startOffload hands o (complete, in memory, no file) to the client of a memory copy: to its
// local disk when that client has SSD offload (offload.go), else to G3. It returns false when
// neither tier can take it (counting a refusal when the G3 tier has no room). keep marks a copy
// made right after the put (--enable_offload without --offload_on_evict): the memory copy stays.
func (s *State) startOffload(o *object, now int64, keep bool) bool {
	if r, seg := s.localTarget(o); seg != nil {
		if s.localRoom(seg.ClientID, o.size, now) {
			s.dfsGen++
			s.setOffload(o, &offloadRec{client: seg.ClientID, segID: r.segID, addr: r.addr, path: dfs.PathFor(o.key, s.dfsGen), gen: s.dfsGen,
				started: now, local: true, keep: keep, endpoint: seg.OffloadEndpoint})
			s.moving[o.key] = o
			s.holdRoom(seg.ClientID, o.size)
			return true
		}
		s.counters.LocalDiskRefused++ // no room on that disk: G3 if there is one
	}
	if s.cfg.RootFSDir == "" || keep {
		return false
	}
	if !s.dfsRoom(o.size, now) {
		s.counters.DFSRefused++
		return false
	}
	r := o.replicas[0]
	seg := s.segments[r.segID]
	s.dfsGen++
	s.setOffload(o, &offloadRec{client: seg.ClientID, segID: r.segID, addr: r.addr, path: dfs.PathFor(o.key, s.dfsGen), gen: s.dfsGen, started: now})
	s.moving[o.key] = o
	s.dfsReserved += o.size
	s.holdRoom("", o.size)
	return true
}

func (s *State) offloadDone(e Entry) Result {
	o, r := s.lookup(e, "not found (removed while moving to G3)")
	if o == nil {
		return r
	}
	file := e.File
	if file == "" {
		file = e.Path
	}
	if o.disk != nil && o.disk.path == file && o.disk.offset == e.Offset && e.Error == "" {
		return Result{} // a repeated report (a retry, or a task listed twice): already recorded
	}
	if o.offload == nil || o.offload.path != e.Path || (e.ClientID != "" && o.offload.client != e.ClientID) {
		return fail(api.INVALID_WRITE, fmt.Sprintf("key %q has no move to G3 file %s in progress (cancelled or superseded)", e.Key, e.Path))
	}
	if e.Error != "" {
		s.counters.OffloadFailures++
		s.cancelOffload(o)
		return Result{}
	}
	off := o.offload
	o.disk = &diskRec{path: file, offset: e.Offset, sum: e.Checksum, at: e.Now}
	defer s.restat(o)
	if off.local {
		o.disk.client, o.disk.endpoint = off.client, off.endpoint
		s.localUsed += o.size
		s.stats.localDisk++
		s.counters.LocalOffloadedObjects++
	} else {
		s.dfsReserved -= o.size
		s.dfsUsed += o.size
	}
	s.fileRefs[o.disk.ref()]++
	s.releaseRoom(moveTier(off), o.size)
	s.noteDisk(o)
	s.clearOffload(o)
	s.endMove(o)
	if !off.keep {
		s.refill = true
	}
	s.counters.OffloadedObjects++
	s.counters.OffloadedBytes += o.size
	if !off.keep && o.leaseUntil <= e.Now && o.promote == nil {
		s.dropMemory(o)
	}
	return Result{}
}

// maybePromote gives the reader of a disk-only object a memory replica to fill, when
// promotion is on, the object was read often enough and memory has room below the watermark.
func (s *State) maybePromote(e Entry, o *object) *api.Replica {
	if !s.cfg.PromotionOnHit || o.disk == nil || o.promote != nil || o.offload != nil ||
		o.diskHits < s.cfg.PromotionAdmissionThreshold || e.ClientID == "" {
		return nil
	}
	// Upstream's gate: memory below the high watermark now (the copy may take usage past it;
	// the next eviction pass then takes least recently used objects, not this one).
	if float64(s.used) >= s.cfg.EvictionHighWatermarkRatio*float64(s.capacity) {
		return nil
	}
	pe := e
	pe.Size = o.size
	reps, ok := s.allocate(pe, api.ReplicateConfig{ReplicaNum: 1})
	if !ok {
		return nil
	}
	r := reps[0]
	o.replicas = append(o.replicas, r)
	s.noteResident(o)
	o.promote = &promoteRec{client: e.ClientID, segID: r.segID, addr: r.addr, started: e.Now}
	s.moving[o.key] = o
	seg := s.segments[r.segID]
	return &api.Replica{SegmentID: r.segID, SegmentName: seg.Name, Addr: r.addr, Size: o.size, Status: api.ReplicaProcessing}
}

func (s *State) promoteDone(e Entry) Result {
	o, r := s.lookup(e, "not found (removed while being promoted)")
	if o == nil {
		return r
	}
	if o.promote == nil || (e.ClientID != "" && o.promote.client != e.ClientID) {
		return fail(api.INVALID_WRITE, fmt.Sprintf("key %q has no promotion in progress for this client", e.Key))
	}
	if e.Error != "" {
		s.cancelPromote(o)
		return Result{}
	}
	p := o.promote
	for i := range o.replicas {
		if o.replicas[i].segID == p.segID && o.replicas[i].addr == p.addr {
			o.replicas[i].status = api.ReplicaComplete
		}
	}
	o.promote = nil
	o.diskHits = 0
	s.accessed(o, e.Now)
	s.restat(o)
	s.endMove(o)
	s.counters.Promotions++
	return Result{}
}

// OffloadTasksAfter lists the moves to a disk tier assigned to clientID that started after
// generation after, oldest first, and the generation now (every later move's is higher).
func (s *State) OffloadTasksAfter(clientID string, after uint64) ([]api.OffloadTask, uint64) {
	var recs []*object
	for _, o := range s.moving {
		if o.offload != nil && o.offload.client == clientID && o.offload.gen > after {
			recs = append(recs, o)
		}
	}
	slices.SortFunc(recs, func(a, b *object) int { return cmp.Compare(a.offload.gen, b.offload.gen) })
	out := make([]api.OffloadTask, 0, len(recs))
	for _, o := range recs {
		out = append(out, api.OffloadTask{Key: o.key, Path: o.offload.path, Size: o.size, SegmentID: o.offload.segID,
			Addr: o.offload.addr, Local: o.offload.local})
	}
	return out, s.dfsGen
}

// genOf is the generation in a file name of dfs.PathFor ("<hash>-<gen>.mcobj"), 0 if none.
func genOf(path string) uint64 {
	base := strings.TrimSuffix(filepath.Base(path), ".mcobj")
	gen, _ := strconv.ParseUint(base[strings.LastIndexByte(base, '-')+1:], 10, 64)
	return gen
}

// evictBlockers describes why nothing in memory could be evicted (for the put's error).
func (s *State) evictBlockers(now int64) string {
	var inMem, leased, pinned, writing int
	s.eachResident(func(o *object) {
		inMem++
		switch {
		case !o.complete:
			writing++
		case o.hardPin || (s.softPinned(o, now) && !s.cfg.AllowEvictSoftPinnedObjects):
			pinned++
		case o.leaseUntil > now:
			leased++
		}
	})
	return fmt.Sprintf(" (%d objects in memory: %d leased to readers, %d pinned, %d being written)", inMem, leased, pinned, writing)
}

// leasedInMemory counts complete objects in memory whose lease keeps them there.
func (s *State) leasedInMemory(now int64) int {
	n := 0
	s.eachResident(func(o *object) {
		if o.complete && o.leaseUntil > now {
			n++
		}
	})
	return n
}
