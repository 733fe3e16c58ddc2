package master

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mooncake-go/mooncake/store/api"
)

type replicaRec struct {
	segID  string
	addr   uint64
	status api.ReplicaStatus
}

type object struct {
	key          string
	size         uint64
	replicas     []replicaRec
	complete     bool
	putClient    string
	putStarted   int64
	leaseUntil   int64
	lastAccess   int64
	softPin      bool
	softPinUntil int64
	hardPin      bool
	upsert       bool // a put in progress that replaces the key's value (upsert.go)
	// Until PutEnd: the soft pin to set then (softPin, for softPinTTL ns), or keep the old
	// value's pin (keepPin, an upsert with SoftPinPreserve).
	softPinTTL int64
	keepPin    bool
	// Storage tiers (tier.go).
	disk     *diskRec    // the object's G3 file, when it has one
	offload  *offloadRec // a move to G3 in progress
	promote  *promoteRec // a copy back into memory in progress
	diskHits int         // reads served from disk since the last promotion
	stat     statFlags   // what it adds to the counts of Stats (stats.go)
	indexed  timedSets   // the indexes of pinned and leased objects it is in (stats.go)
	// Under the prefix policy, while in the resident index: the chain nodes of its own name
	// and of its parent's (chains.go).
	chainSelf, chainParent *chainNode
	value                  []byte  // a small value's bytes (valuecache.go); nil: none
	valuePrev, valueNext   *object // its place in State.values while value is set (valuecache.go)
	reservedBytes          uint64  // a put reservation's bytes counted in State.reserved (reserve.go)
	// unconfirmed: complete and read from value alone, its replicas still being written
	// (unconfirmed.go); value is then out of State.values and counted in State.pinnedBytes.
	unconfirmed bool
}

type segment struct {
	api.Segment
	alloc *rangeAllocator
}

// Counters are cumulative, deterministic statistics kept inside the state (so a standby or a
// restore reports the same numbers).
type Counters struct {
	EvictedObjects  uint64 `json:"evicted_objects"`
	EvictedBytes    uint64 `json:"evicted_bytes"`
	EvictionPasses  uint64 `json:"eviction_passes"`
	ReclaimedPuts   uint64 `json:"reclaimed_puts"`
	ExpiredClients  uint64 `json:"expired_clients"`
	DroppedReplicas uint64 `json:"dropped_replicas"`
	// Storage tiers.
	OffloadedObjects  uint64 `json:"offloaded_objects,omitempty"`   // objects written to G3
	OffloadedBytes    uint64 `json:"offloaded_bytes,omitempty"`     // their bytes
	OffloadFailures   uint64 `json:"offload_failures,omitempty"`    // moves that failed or timed out
	DFSRefused        uint64 `json:"dfs_refused,omitempty"`         // moves refused: G3 full (dfs_full_policy=refuse)
	DFSEvictedObjects uint64 `json:"dfs_evicted_objects,omitempty"` // G3 files dropped to make room (evict_oldest)
	DFSEvictedBytes   uint64 `json:"dfs_evicted_bytes,omitempty"`
	DiskReads         uint64 `json:"disk_reads,omitempty"` // gets of objects with no memory copy
	Promotions        uint64 `json:"promotions,omitempty"` // objects copied back into memory
	// SSD offload (offload.go).
	LocalOffloadedObjects uint64 `json:"local_offloaded_objects,omitempty"` // objects written to a client's local disk
	LocalDiskLost         uint64 `json:"local_disk_lost,omitempty"`         // local-disk replicas dropped with their client
	LocalDiskEvicted      uint64 `json:"local_disk_evicted,omitempty"`      // local-disk copies dropped to stay within a client's quota
	LocalDiskRefused      uint64 `json:"local_disk_refused,omitempty"`      // moves to a local disk refused: quota reached, no disk eviction
	// The value cache (valuecache.go).
	ValueCacheHits  uint64 `json:"value_cache_hits,omitempty"`  // gets answered with a small value's bytes
	ValueCacheDrops uint64 `json:"value_cache_drops,omitempty"` // cached values dropped to make room for newer ones
}

// State is the master's metadata: segments, objects and clients. It changes only through Apply;
// every other method is a read. It is not safe for concurrent use: the Server serialises access.
type State struct {
	cfg      Config
	segments map[string]*segment
	segIDs   []string            // sorted mount IDs: the deterministic iteration order
	clients  map[string][]string // client -> mounted segment IDs (sorted)
	objects  map[string]*object
	pending  map[string]*object // objects between PutStart and PutEnd/PutRevoke
	// resident indexes the objects of objects that may hold memory replicas (derived, never
	// encoded): an object is added when it enters objects or gains a replica and removed when
	// it leaves objects (deleteObject: removes, and an upsert's replaced version); eachResident drops
	// the ones whose memory copies are gone. Eviction walks it instead of every object, so a
	// pass costs what memory holds, not what G3 holds.
	resident map[*object]struct{}
	// chains: under the prefix policy, the resident objects' key names and how many resident
	// objects name each as their parent (chains.go; derived, never encoded). nil under lru.
	chains map[string]*chainNode
	// orphans: under the prefix policy, G3 copies whose parent no object holds, oldest first,
	// with stale entries; orphansBusy/orphansLater hold new ones while dropOrphans walks it
	// (orphans.go; derived, never encoded).
	orphanIndex  bool // prefix policy, G3 tier, --dfs_full_policy=evict_oldest
	orphans      []diskItem
	orphansBusy  bool
	orphansLater []diskItem
	stats        derivedStats // the counts and indexes behind Stats (stats.go)
	// retired are the memory copies of objects an upsert replaced while readers held a lease on
	// them: freed when the lease is over (upsert.go).
	retired    []retiredRec
	capacity   uint64
	used       uint64
	reserved   uint64 // of used: the bytes of put reservations in progress (reserve.go; derived)
	valueBytes uint64 // bytes in the value cache (valuecache.go)
	// of valueBytes: the values of unconfirmed puts, which the cache cannot drop (unconfirmed.go; derived)
	pinnedBytes uint64
	unconfirmed map[string]*object // the unconfirmed puts by key (unconfirmed.go; derived)
	values      valueList          // the objects whose bytes it holds, least recently used first (derived)
	applied     uint64
	counters    Counters
	// verifiedAt is the applied count right after the last OpVerify entry: the leader
	// proposes a new one only when something changed since (an idle cluster's log stays put).
	verifiedAt uint64
	// Storage tiers (tier.go).
	dfsUsed     uint64             // bytes of objects in G3
	dfsReserved uint64             // bytes of moves to G3 in progress
	dfsGen      uint64             // generation of the last G3 file name handed out
	refill      bool               // a move to a disk tier ended in this entry (see refillMoves)
	moving      map[string]*object // objects with an offload or a promotion in progress
	// The moves to a disk tier in progress (derived from moving, kept up by setOffload and
	// clearOffload, so that a put need not walk every move): all of them, and those that free
	// memory when they end (not --enable_offload's copies) with their bytes.
	offN, downN int
	downBytes   uint64
	fileRefs    map[string]int // G3 file -> objects stored in it (derived from objects)
	garbage     []string       // G3 files of dropped objects, handed to the caller of Apply
	// SSD offload (offload.go).
	localUsed    uint64      // bytes of objects on clients' local disks
	localGarbage []LocalFile // local-disk files of dropped objects, handed to the caller of Apply
	// diskOrder: per disk tier ("" G3, else a client's local disk), its bytes, the bytes moving
	// to it and its copies oldest first (diskorder.go; derived from objects).
	diskOrder map[string]*diskQueue
}

// NewState returns an empty state using cfg's store policy (leases, pins, eviction, allocation).
func NewState(cfg Config) *State {
	s := &State{
		cfg:         cfg,
		segments:    map[string]*segment{},
		clients:     map[string][]string{},
		objects:     map[string]*object{},
		pending:     map[string]*object{},
		unconfirmed: map[string]*object{},
		resident:    map[*object]struct{}{},
		stats:       newDerivedStats(),
		moving:      map[string]*object{},
		fileRefs:    map[string]int{},
		diskOrder:   map[string]*diskQueue{},
	}
	if cfg.EvictionPolicy == EvictionPrefix {
		s.chains = map[string]*chainNode{}
		s.orphanIndex = cfg.RootFSDir != "" && cfg.DFSFullPolicy == "evict_oldest"
	}
	return s
}

// Applied is the number of entries applied so far (the log position of a standby).
func (s *State) Applied() uint64 { return s.applied }

// VerifiedAt is the applied count right after the last OpVerify entry.
func (s *State) VerifiedAt() uint64 { return s.verifiedAt }

// Apply changes the state by one entry and returns its result. It is deterministic: it reads no
// clock, no randomness and no I/O beyond the entry.
//
// Result.Garbage lists the G3 files (relative to root_fs_dir) the entry left unreferenced: the
// serving master deletes them once the entry is durable; a standby ignores them.
func (s *State) Apply(e Entry) Result {
	s.applied++
	r := s.apply(e)
	if s.refill {
		s.refill = false
		s.refillMoves(e.Now)
	}
	if len(s.garbage) > 0 {
		r.Garbage, s.garbage = s.garbage, nil
	}
	if len(s.localGarbage) > 0 {
		r.LocalGarbage, s.localGarbage = s.localGarbage, nil
	}
	return r
}

// entryOps are the ops that one method applies from the entry alone.
var entryOps = map[Op]func(*State, Entry) Result{
	OpMountSegment:     (*State).mountSegment,
	OpUnmountSegment:   (*State).unmountSegment,
	OpDrainSegment:     (*State).drainSegment,
	OpUnmountLocalDisk: (*State).unmountLocalDisk,
	OpExpireClient:     (*State).expireClient,
	OpPutStart:         (*State).putStart,
	OpPutEnd:           (*State).putEnd,
	OpPutRevoke:        (*State).putRevoke,
	OpPutEndReserved:   (*State).putEndReserved,
	OpPutConfirm:       (*State).putConfirm,
	OpGrantLease:       (*State).grantLease,
	OpRemove:           (*State).remove,
	OpRemoveByRegex:    (*State).removeByRegex,
	OpRemoveAll:        (*State).removeAll,
	OpOffloadDone:      (*State).offloadDone,
	OpPromoteDone:      (*State).promoteDone,
	OpReplicaClear:     (*State).replicaClear,
}

func (s *State) apply(e Entry) Result {
	if f, ok := entryOps[e.Op]; ok {
		return f(s, e)
	}
	switch e.Op {
	case OpTick:
		return s.tick(e.Now)
	case OpVerify:
		s.verifiedAt = s.applied
		return Result{}
	case OpBatch:
		out := Result{Batch: e.results[:0]}
		if cap(out.Batch) < len(e.Batch) {
			out.Batch = make([]Result, len(e.Batch))
		}
		out.Batch = out.Batch[:len(e.Batch)]
		for i, sub := range e.Batch {
			sub.Now = e.Now
			sub.Seed = e.Seed + uint64(i)
			if sub.Op == OpBatch {
				out.Batch[i] = fail(api.INVALID_PARAMS, "nested batch entries are not allowed")
				continue
			}
			out.Batch[i] = s.apply(sub)
		}
		return out
	}
	return fail(api.INVALID_PARAMS, fmt.Sprintf("unknown state-machine op %q", e.Op))
}

// ValidateKey checks a key: non-empty, valid UTF-8, at most api.MaxKeyLength bytes.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return api.Errorf(api.INVALID_KEY, "key is empty")
	case len(key) > api.MaxKeyLength:
		return api.Errorf(api.INVALID_KEY, "key is %d bytes, longer than the limit of %d", len(key), api.MaxKeyLength)
	case !utf8.ValidString(key):
		return api.Errorf(api.INVALID_KEY, "key is not valid UTF-8")
	}
	return nil
}

func keyFail(key string) (Result, bool) {
	if err := ValidateKey(key); err != nil {
		return Result{Code: api.INVALID_KEY, Message: err.(*api.Error).Msg}, true
	}
	return Result{}, false
}

// lookup returns the object of e.Key, or nil and the answer to a call on it: an invalid key, or
// OBJECT_NOT_FOUND worded "key %q <missing>".
func (s *State) lookup(e Entry, missing string) (*object, Result) {
	if r, bad := keyFail(e.Key); bad {
		return nil, r
	}
	o, ok := s.objects[e.Key]
	if !ok {
		return nil, fail(api.OBJECT_NOT_FOUND, fmt.Sprintf("key %q %s", e.Key, missing))
	}
	return o, Result{}
}

// otherPutter reports whether e comes from a client other than the one writing o (an entry
// without a client id speaks for the master, which may end any put).
func otherPutter(e Entry, o *object) (Result, bool) {
	if e.ClientID != "" && o.putClient != e.ClientID {
		return fail(api.ILLEGAL_CLIENT, fmt.Sprintf("key %q is being written by another client", e.Key)), true
	}
	return Result{}, false
}

// ---- segments and clients ----

func (s *State) mountSegment(e Entry) Result {
	if e.Segment == nil {
		return fail(api.INVALID_PARAMS, "mount without a segment")
	}
	seg := *e.Segment
	seg.ClientID = e.ClientID
	seg.Draining = false
	switch {
	case e.ClientID == "":
		return fail(api.INVALID_PARAMS, "mount without a client id")
	case seg.ID == "" || seg.Name == "":
		return fail(api.INVALID_PARAMS, "segment needs an id and a name")
	case seg.Size < allocAlign:
		return fail(api.INVALID_PARAMS, fmt.Sprintf("segment size %d is too small (minimum %d bytes)", seg.Size, allocAlign))
	case seg.Base == 0 || seg.Base+seg.Size < seg.Base:
		return fail(api.INVALID_PARAMS, "segment base address is invalid")
	}
	if old, ok := s.segments[seg.ID]; ok {
		if old.ClientID == seg.ClientID && old.Base == seg.Base && old.Size == seg.Size && old.Name == seg.Name {
			return Result{} // idempotent re-mount
		}
		return fail(api.SEGMENT_ALREADY_EXISTS, fmt.Sprintf("segment %s is already mounted", seg.ID))
	}
	s.segments[seg.ID] = &segment{Segment: seg, alloc: newRangeAllocator(seg.Size)}
	s.segIDs = insertSorted(s.segIDs, seg.ID)
	s.clients[seg.ClientID] = insertSorted(s.clients[seg.ClientID], seg.ID)
	s.capacity += s.segments[seg.ID].alloc.size
	return Result{}
}

func (s *State) unmountSegment(e Entry) Result {
	seg, r, bad := s.ownSegment(e)
	if bad {
		return r
	}
	s.dropSegment(seg)
	return Result{}
}

// drainSegment starts an unmount's grace period: the segment takes no new object (allocate
// skips it) and what it holds stays readable until the client unmounts it.
func (s *State) drainSegment(e Entry) Result {
	seg, r, bad := s.ownSegment(e)
	if bad {
		return r
	}
	seg.Draining = true
	return Result{}
}

// ownSegment is the segment e names, when it is mounted by e's client (or e has none).
func (s *State) ownSegment(e Entry) (*segment, Result, bool) {
	seg, ok := s.segments[e.SegmentID]
	if !ok {
		return nil, fail(api.SEGMENT_NOT_FOUND, fmt.Sprintf("segment %s is not mounted", e.SegmentID)), true
	}
	if e.ClientID != "" && seg.ClientID != e.ClientID {
		return nil, fail(api.ILLEGAL_CLIENT, fmt.Sprintf("segment %s belongs to another client", e.SegmentID)), true
	}
	return seg, Result{}, false
}

// dropSegment removes a segment: complete objects lose their replica there (and disappear with
// their last replica); puts in progress with a replica there are revoked.
func (s *State) dropSegment(seg *segment) {
	s.dropPendingUpsertsOn(seg.ID)
	s.dropRetiredOn(seg.ID)
	// The objects with a copy there are in the resident index (every object with a memory
	// replica is): taken from it and handled in key order, not found by sorting every key (an
	// unmount among a million objects held the master for about 0.9 s).
	type keyed struct {
		key string
		o   *object
	}
	onSeg := func(r replicaRec) bool { return r.segID == seg.ID }
	var hit []keyed
	s.eachResident(func(o *object) {
		if slices.ContainsFunc(o.replicas, onSeg) {
			hit = append(hit, keyed{o.key, o})
		}
	})
	slices.SortFunc(hit, func(a, b keyed) int { return strings.Compare(a.key, b.key) })
	for _, h := range hit {
		o := h.o
		idx := slices.IndexFunc(o.replicas, onSeg)
		if !o.complete || o.unconfirmed { // unconfirmed.go: its write there may not have landed
			s.deleteObject(o)
			continue
		}
		o.replicas = slices.Delete(o.replicas, idx, idx+1)
		s.used -= alignUp(o.size)
		s.counters.DroppedReplicas++
		s.segmentGone(o, seg.ID)
		s.restat(o)
		if len(o.replicas) == 0 {
			s.dropValue(o) // its last memory copy went
			if o.disk == nil {
				s.deleteObject(o)
			}
		}
	}
	s.capacity -= seg.alloc.size
	delete(s.segments, seg.ID)
	s.segIDs = removeSorted(s.segIDs, seg.ID)
	if ids := removeSorted(s.clients[seg.ClientID], seg.ID); len(ids) > 0 {
		s.clients[seg.ClientID] = ids
	} else {
		delete(s.clients, seg.ClientID)
		s.clientDisksGone(seg.ClientID)
	}
}

func (s *State) expireClient(e Entry) Result {
	if e.ClientID == "" {
		return fail(api.INVALID_PARAMS, "expire without a client id")
	}
	for _, id := range slices.Clone(s.clients[e.ClientID]) {
		s.dropSegment(s.segments[id])
	}
	for _, key := range sortedMapKeys(s.pending) {
		if o := s.pending[key]; o.putClient == e.ClientID {
			s.deleteObject(o)
		}
	}
	// Its unconfirmed puts stay, readable from their values (unconfirmed.go).
	s.counters.ExpiredClients++
	return Result{}
}

// ---- put ----

func (s *State) putStart(e Entry) Result {
	if r, bad := keyFail(e.Key); bad {
		return r
	}
	cfg := api.ReplicateConfig{ReplicaNum: 1}
	if e.Config != nil {
		cfg = *e.Config
	}
	if cfg.ReplicaNum == 0 {
		cfg.ReplicaNum = 1
	}
	switch {
	case e.Size == 0:
		return fail(api.INVALID_PARAMS, "value size is 0; empty values cannot be stored")
	case cfg.ReplicaNum < 0:
		return fail(api.INVALID_PARAMS, fmt.Sprintf("replica_num %d is negative", cfg.ReplicaNum))
	case cfg.SoftPinAction < api.SoftPinPreserve || cfg.SoftPinAction > api.SoftPinDisable:
		return fail(api.INVALID_PARAMS, fmt.Sprintf("soft_pin_action %d is not PRESERVE (0), ENABLE (1) or DISABLE (2)", cfg.SoftPinAction))
	case cfg.SoftPinTTLMs != nil && !cfg.SoftPinEnabled():
		return fail(api.INVALID_PARAMS, "soft_pin_ttl_ms is set but the soft pin is not enabled (soft_pin_action ENABLE or with_soft_pin)")
	}
	if o, ok := s.pending[e.Key]; ok {
		if e.ClientID != "" && o.putClient == e.ClientID && o.size == e.Size && o.upsert == e.Upsert &&
			e.Now-o.putStarted < int64(s.cfg.PutStartDiscardTimeout) {
			// The same client asks again (a retry after a failover or a lost reply): the put
			// it started is still open, so hand back the same replicas.
			return Result{Replicas: s.describe(o), Size: o.size}
		}
		if e.Now-o.putStarted < int64(s.cfg.PutStartDiscardTimeout) {
			return fail(api.OBJECT_REPLICA_BUSY, fmt.Sprintf("key %q is being written by another put", e.Key))
		}
		s.deleteObject(o) // pre-empt a put-start left open too long
		s.counters.ReclaimedPuts++
	}
	if o, ok := s.objects[e.Key]; ok && o.complete && !e.Upsert {
		return fail(api.OBJECT_ALREADY_EXISTS, fmt.Sprintf("key %q already exists", e.Key))
	}
	// Fail fast when no amount of eviction could help.
	need := alignUp(e.Size)
	fit := 0
	for _, id := range s.segIDs {
		if seg := s.segments[id]; seg.alloc.size >= need && !seg.Draining {
			fit++
		}
	}
	if fit < cfg.ReplicaNum {
		return fail(api.NO_AVAILABLE_HANDLE, fmt.Sprintf(
			"cannot place %d replica(s) of %d bytes: only %d mounted segment(s) open to new objects are large enough", cfg.ReplicaNum, e.Size, fit))
	}
	reserving := api.IsReservation(e.Key)
	if reserving {
		if r, refused := s.reservationRefused(e, cfg); refused {
			return r
		}
	}
	reps, ok := s.allocate(e, cfg)
	if !ok && reserving {
		return fail(api.NO_AVAILABLE_HANDLE, "no free room for a put reservation (reservations never evict)")
	}
	for !ok {
		retry := func(why string) Result {
			r := fail(api.NO_AVAILABLE_HANDLE, fmt.Sprintf("no space for %d replica(s) of %d bytes yet: %s; retry", cfg.ReplicaNum, e.Size, why))
			r.Retry = true
			return r
		}
		if s.tiered() {
			// As many bytes as may be are moving down: a pass could start no move, and the
			// puts of a full memory (several per move's end) would each sort every object.
			if n, bytes := s.movesDown(); bytes >= s.moveBytes() {
				return retry(fmt.Sprintf("%d object(s) (%d bytes) are moving to a disk tier", n, bytes))
			}
		}
		if freed, _ := s.evictPass(e.Now); freed == 0 {
			if s.tiered() && (s.offloadingAny() > 0 || s.leasedInMemory(e.Now) > 0) {
				return retry(fmt.Sprintf("%d object(s) are moving to the G3 tier, %d are leased to readers", s.offloading(), s.leasedInMemory(e.Now)))
			}
			msg := fmt.Sprintf("no space for %d replica(s) of %d bytes on distinct segments, and nothing left to evict", cfg.ReplicaNum, e.Size)
			if s.cfg.RootFSDir != "" {
				msg += s.evictBlockers(e.Now) + s.dfsFullNote()
			}
			return fail(api.NO_AVAILABLE_HANDLE, msg)
		}
		reps, ok = s.allocate(e, cfg)
	}
	o := &object{
		key: e.Key, size: e.Size, replicas: reps, putClient: e.ClientID, putStarted: e.Now,
		softPin: cfg.SoftPinEnabled(), hardPin: cfg.WithHardPin, upsert: e.Upsert,
		keepPin: e.Upsert && !cfg.SoftPinEnabled() && cfg.SoftPinAction == api.SoftPinPreserve,
	}
	if o.softPin {
		o.softPinTTL = s.softPinTTL(cfg)
	}
	if _, ok := s.objects[e.Key]; !ok {
		s.objects[e.Key] = o // an upsert's new version stays out of objects until its PutEnd
		s.holdName(o)        // orphans.go
		s.noteResident(o)
	}
	s.pending[e.Key] = o
	s.noteReservation(o, 1)
	s.moveAhead(e.Now)
	return Result{Replicas: s.describe(o), Size: o.size}
}

// allocate places cfg.ReplicaNum replicas of e.Size bytes on distinct segments, preferring
// distinct engines (hosts), all or nothing.
func (s *State) allocate(e Entry, cfg api.ReplicateConfig) ([]replicaRec, bool) {
	order := s.candidateOrder(e, cfg)
	reps := make([]replicaRec, 0, cfg.ReplicaNum)
	usedSeg := map[string]bool{}
	usedName := map[string]bool{}
	for pass := 0; pass < 2 && len(reps) < cfg.ReplicaNum; pass++ {
		for _, id := range order {
			if len(reps) == cfg.ReplicaNum {
				break
			}
			seg := s.segments[id]
			if usedSeg[id] || seg.Draining || (pass == 0 && usedName[seg.Name]) {
				continue
			}
			off, ok := seg.alloc.alloc(e.Size)
			if !ok {
				continue
			}
			usedSeg[id], usedName[seg.Name] = true, true
			reps = append(reps, replicaRec{segID: id, addr: seg.Base + off, status: api.ReplicaProcessing})
		}
	}
	if len(reps) < cfg.ReplicaNum {
		for _, r := range reps {
			seg := s.segments[r.segID]
			seg.alloc.release(r.addr-seg.Base, e.Size)
		}
		return nil, false
	}
	s.used += alignUp(e.Size) * uint64(len(reps))
	return reps, true
}

func (s *State) candidateOrder(e Entry, cfg api.ReplicateConfig) []string {
	rest := slices.Clone(s.segIDs)
	switch s.cfg.AllocationStrategy {
	case "free_ratio_first":
		sort.SliceStable(rest, func(i, j int) bool {
			a, b := s.segments[rest[i]].alloc, s.segments[rest[j]].alloc
			return float64(a.size-a.used)/float64(a.size) > float64(b.size-b.used)/float64(b.size)
		})
	default: // "random", seeded by the entry so that replay places replicas identically
		r := rand.New(rand.NewPCG(e.Seed, uint64(e.Now)))
		r.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	}
	if len(cfg.PreferredSegments) == 0 {
		return rest
	}
	var pref []string
	for _, p := range cfg.PreferredSegments {
		for _, id := range s.segIDs {
			seg := s.segments[id]
			if (seg.ID == p || seg.Name == p) && !slices.Contains(pref, id) {
				pref = append(pref, id)
			}
		}
	}
	out := pref
	for _, id := range rest {
		if !slices.Contains(pref, id) {
			out = append(out, id)
		}
	}
	return out
}

func (s *State) putEnd(e Entry) Result {
	if r, bad := keyFail(e.Key); bad {
		return r
	}
	o, ok := s.pending[e.Key]
	if !ok {
		if cur, ok := s.objects[e.Key]; ok && cur.complete {
			return Result{} // a repeated PutEnd (a retry after a lost reply)
		}
		return fail(api.OBJECT_NOT_FOUND, fmt.Sprintf("key %q has no put in progress", e.Key))
	}
	if r, bad := otherPutter(e, o); bad {
		return r
	}
	if o.softPin {
		o.softPinUntil = e.Now + o.softPinTTL
		o.softPin = o.softPinTTL > 0
	}
	if cur, ok := s.objects[e.Key]; ok && cur != o {
		if o.keepPin {
			o.softPin, o.softPinUntil = cur.softPin, cur.softPinUntil
		}
		s.retire(cur, e.Now) // an upsert: the old version goes as the new one becomes readable
	}
	if s.objects[e.Key] != o {
		s.objects[e.Key] = o
		s.holdName(o) // orphans.go
	}
	s.noteResident(o)
	o.complete = true
	o.upsert, o.keepPin, o.softPinTTL = false, false, 0
	s.accessed(o, e.Now)
	delete(s.pending, e.Key)
	if e.Unconfirmed {
		s.pin(o, e.Value) // unconfirmed.go: its replicas stay unreadable until confirmed
		s.restat(o)
		s.noteTimed(o, e.Now)
		return Result{}
	}
	for i := range o.replicas {
		o.replicas[i].status = api.ReplicaComplete
	}
	s.cacheValue(o, e.Value) // valuecache.go
	s.offloadAfterPut(o, e.Now)
	s.restat(o)
	s.noteTimed(o, e.Now)
	return Result{}
}

func (s *State) putRevoke(e Entry) Result {
	if r, bad := keyFail(e.Key); bad {
		return r
	}
	o, ok := s.pending[e.Key]
	if !ok {
		if cur, ok := s.objects[e.Key]; ok && cur.unconfirmed && cur.putClient == e.ClientID {
			s.deleteObject(cur) // its write failed (unconfirmed.go): readers had its value only
			return Result{}
		}
		if cur, ok := s.objects[e.Key]; ok && cur.complete {
			return fail(api.INVALID_WRITE, fmt.Sprintf("key %q is already complete; remove it instead", e.Key))
		}
		return fail(api.OBJECT_NOT_FOUND, fmt.Sprintf("key %q has no put in progress", e.Key))
	}
	if r, bad := otherPutter(e, o); bad {
		return r
	}
	s.deleteObject(o)
	return Result{}
}

// ---- get / remove ----

func (s *State) grantLease(e Entry) Result {
	o, r := s.lookup(e, "not found")
	if o == nil {
		return r
	}
	if !o.complete {
		return fail(api.REPLICA_IS_NOT_READY, fmt.Sprintf("key %q is still being written", e.Key))
	}
	o.leaseUntil = max(o.leaseUntil, e.Now+int64(s.cfg.DefaultKVLeaseTTL))
	s.noteTimed(o, e.Now)
	s.accessed(o, e.Now)
	res := Result{Replicas: s.describe(o), Size: o.size, Value: s.cachedValue(o)}
	if !s.inMemory(o) {
		s.counters.DiskReads++
		o.diskHits++
		res.Promote = s.maybePromote(e, o)
	}
	return res
}

func (s *State) removable(o *object, now int64, force bool) Result {
	switch {
	case !o.complete:
		return fail(api.REPLICA_IS_NOT_READY, fmt.Sprintf("key %q is still being written", o.key))
	case force:
		return Result{}
	case o.leaseUntil > now:
		return fail(api.OBJECT_HAS_LEASE, fmt.Sprintf("key %q is leased to a reader for another %v; retry later or force",
			o.key, time.Duration(o.leaseUntil-now).Round(time.Millisecond)))
	case o.hardPin:
		return fail(api.OBJECT_HAS_LEASE, fmt.Sprintf("key %q is hard-pinned; remove it with force", o.key))
	}
	return Result{}
}

func (s *State) remove(e Entry) Result {
	o, r := s.lookup(e, "not found")
	if o == nil {
		return r
	}
	if r := s.removable(o, e.Now, e.Force); r.Code != api.OK {
		return r
	}
	s.deleteObject(o)
	return Result{}
}

func (s *State) removeByRegex(e Entry) Result {
	re, err := regexp.Compile(e.Pattern)
	if err != nil {
		return fail(api.INVALID_PARAMS, fmt.Sprintf("bad regular expression %q: %v", e.Pattern, err))
	}
	var n int64
	for _, key := range s.sortedKeys() {
		o := s.objects[key]
		name, ok := scopedKey(e, key)
		if ok && re.MatchString(name) && s.removable(o, e.Now, e.Force).Code == api.OK {
			s.deleteObject(o)
			n++
		}
	}
	return Result{Count: n}
}

// scopedKey is what a scoped removal matches key by (its user part) and whether key is in the
// entry's tenant; an unscoped entry sees every key as stored.
func scopedKey(e Entry, key string) (string, bool) {
	if !e.Scoped {
		return key, true
	}
	t, user := api.SplitTenant(key)
	return user, t == e.Tenant
}

// removeAll removes every complete object, leased or pinned unless KeepHeld (then those a plain
// remove would refuse stay); puts in progress are left alone.
func (s *State) removeAll(e Entry) Result {
	var n int64
	for _, key := range s.sortedKeys() {
		if _, ok := scopedKey(e, key); !ok {
			continue
		}
		if o := s.objects[key]; s.removable(o, e.Now, !e.KeepHeld).Code == api.OK {
			s.deleteObject(o)
			n++
		}
	}
	return Result{Count: n}
}

// deleteObject frees o's replicas and forgets it. o may be the readable version of its key, a
// put in progress, or both (an upsert's new version is in pending only, beside the old one).
func (s *State) deleteObject(o *object) {
	s.dropValue(o)
	if o.unconfirmed && s.unconfirmed[o.key] == o {
		delete(s.unconfirmed, o.key)
	}
	for _, r := range o.replicas {
		if seg, ok := s.segments[r.segID]; ok {
			seg.alloc.release(r.addr-seg.Base, o.size)
			s.used -= alignUp(o.size)
		}
	}
	if s.objects[o.key] == o {
		s.dropTiers(o)
		delete(s.objects, o.key)
		s.releaseName(o) // orphans.go
		s.dropResident(o)
		s.forgetStat(o)
	}
	if s.pending[o.key] == o {
		s.noteReservation(o, -1)
		delete(s.pending, o.key)
	}
}

// ---- background work: stale puts and eviction ----

// NeedsTick reports whether a Tick at now would change anything; the server proposes Tick
// entries only then, so an idle master writes nothing to its log.
func (s *State) NeedsTick(now int64) bool {
	if s.aboveWatermark() {
		return true
	}
	for _, o := range s.pending {
		if now-o.putStarted >= int64(s.cfg.PutStartReleaseTimeout) {
			return true
		}
	}
	return s.staleMoves(now) || s.retiredDue(now)
}

func (s *State) aboveWatermark() bool {
	return s.capacity > 0 && float64(s.used) > s.cfg.EvictionHighWatermarkRatio*float64(s.capacity)
}

func (s *State) tick(now int64) Result {
	var n int64
	for _, key := range sortedMapKeys(s.pending) {
		if o := s.pending[key]; now-o.putStarted >= int64(s.cfg.PutStartReleaseTimeout) {
			s.deleteObject(o)
			s.counters.ReclaimedPuts++
			n++
		}
	}
	n += int64(s.expireMoves(now))
	n += int64(s.freeRetired(now))
	if s.aboveWatermark() {
		freed, sched := s.evictPass(now)
		n += int64(freed + sched)
	}
	return Result{Count: n}
}

// softPinTTL is how long cfg's soft pin lasts, in ns: its own TTL or the default, at most the max.
func (s *State) softPinTTL(cfg api.ReplicateConfig) int64 {
	ttl := s.cfg.DefaultKVSoftPinTTL
	if cfg.SoftPinTTLMs != nil {
		ms := min(*cfg.SoftPinTTLMs, uint64(math.MaxInt64/int64(time.Millisecond)))
		ttl = time.Duration(ms) * time.Millisecond
	}
	return int64(min(ttl, s.cfg.MaxKVSoftPinTTL))
}

func (s *State) softPinned(o *object, now int64) bool { return o.softPin && o.softPinUntil > now }

// lruOrder orders objects least recently used first, by key among equals: a strict total
// order (keys are unique), so the victims of a pass do not depend on the map's iteration order
// and every replica of the state picks the same ones.
func lruOrder(a, b *object) int {
	if a.lastAccess != b.lastAccess {
		return cmp.Compare(a.lastAccess, b.lastAccess)
	}
	return strings.Compare(a.key, b.key)
}

// evictPass evicts about EvictionRatio of the evictable objects (at least one), in the order of
// --eviction_policy (least recently used first by default, evictpolicy.go): plain objects before soft-pinned ones, soft-pinned only when allowed, hard-pinned,
// leased, in-progress and moving objects never. Without the G3 tier an evicted object is gone;
// with it, an object that has a G3 file loses its memory copy, and one that has none is handed
// to its client to write to G3 (tier.go) and loses its memory copy when the file is in place.
// It returns how many objects lost their memory copy, and how many moves it started.
func (s *State) evictPass(now int64) (freed, scheduled int) {
	var plain, soft []*object
	s.eachResident(func(o *object) {
		if !o.complete || o.hardPin || o.offload != nil || o.promote != nil {
			return
		}
		// A leased object keeps its memory copy; with G3 it may still start its move (the
		// copy goes when the file is in place and the lease is over).
		if o.leaseUntil > now && (o.disk != nil || !s.canOffload(o)) {
			return
		}
		if s.softPinned(o, now) {
			if s.cfg.AllowEvictSoftPinnedObjects {
				soft = append(soft, o)
			}
			return
		}
		plain = append(plain, o)
	})
	total := len(plain) + len(soft)
	if total == 0 {
		return 0, 0
	}
	// The quota's least recently used, plain before soft-pinned: selected, then only they are
	// sorted (a full sort of a million candidates held the master for a quarter of a second).
	quota := max(1, int(math.Ceil(s.cfg.EvictionRatio*float64(total))))
	order := s.victimOrder() // evictpolicy.go
	var victims []*object
	if quota <= len(plain) {
		victims = leastK(plain, quota, order)
	} else {
		slices.SortFunc(plain, order)
		victims = append(plain, leastK(soft, quota-len(plain), order)...)
	}
	moving, movingBytes := s.movesDown() // counted once, then kept up as moves start
	for _, o := range victims {
		switch {
		case o.disk != nil:
			s.dropMemory(o)
			freed++
		case !s.canOffload(o):
			s.counters.EvictedObjects++
			s.counters.EvictedBytes += o.size * uint64(len(o.replicas))
			s.deleteObject(o)
			freed++
		case s.moveRoom(quota, moving, movingBytes) && s.startOffload(o, now, false):
			scheduled++
			moving, movingBytes = moving+1, movingBytes+o.size
		}
	}
	if freed+scheduled > 0 {
		s.counters.EvictionPasses++
	}
	return freed, scheduled
}

// noteResident adds o to the resident index when it holds memory replicas.
func (s *State) noteResident(o *object) {
	if len(o.replicas) > 0 {
		s.addResident(o) // chains.go
	}
}

// eachResident calls f for every object of objects that holds memory replicas, in no
// particular order (callers must not depend on it: eviction selects by a strict order), and
// drops from the index the objects whose memory copies went since they were added.
func (s *State) eachResident(f func(o *object)) {
	for o := range s.resident {
		if len(o.replicas) == 0 {
			s.dropResident(o) // chains.go
			continue
		}
		f(o)
	}
}

// ---- reads ----

func (s *State) describe(o *object) []api.Replica { return s.replicaList(o, true) }

// replicaList lists o's copies; readable: not those of a complete object that are still being
// written (a promotion's, an unconfirmed put's: unconfirmed.go).
func (s *State) replicaList(o *object, readable bool) []api.Replica {
	out := make([]api.Replica, 0, len(o.replicas)+1)
	for _, r := range o.replicas {
		if readable && o.complete && r.status != api.ReplicaComplete {
			continue
		}
		seg := s.segments[r.segID]
		out = append(out, api.Replica{SegmentID: r.segID, SegmentName: seg.Name, Addr: r.addr, Size: o.size, Status: r.status})
	}
	if o.disk != nil {
		out = append(out, s.diskReplica(o))
	}
	return out
}

// Exists reports whether key names a complete object, and its size.
func (s *State) Exists(key string) (bool, uint64) {
	o, ok := s.objects[key]
	if !ok || !o.complete {
		return false, 0
	}
	return true, o.size
}

// ObjectInfo describes one object for the admin API.
type ObjectInfo struct {
	Key          string        `json:"key"`
	Size         uint64        `json:"size"`
	Complete     bool          `json:"complete"`
	Replicas     []api.Replica `json:"replicas"`
	LeaseUntil   time.Time     `json:"lease_until"`
	LastAccess   time.Time     `json:"last_access"`
	SoftPinned   bool          `json:"soft_pinned"`
	SoftPinUntil time.Time     `json:"soft_pin_until,omitzero"`
	HardPinned   bool          `json:"hard_pinned"`
	Unconfirmed  bool          `json:"unconfirmed,omitempty"` // read from the master's copy of its value until its write is confirmed (unconfirmed.go)
}

// Query describes key (ok=false when unknown).
func (s *State) Query(key string) (ObjectInfo, bool) {
	o, ok := s.objects[key]
	if !ok {
		return ObjectInfo{}, false
	}
	info := ObjectInfo{
		// An unconfirmed put's copies, still ReplicaProcessing, are listed all the same.
		Key: o.key, Size: o.size, Complete: o.complete, Replicas: s.replicaList(o, !o.unconfirmed), Unconfirmed: o.unconfirmed,
		LeaseUntil: time.Unix(0, o.leaseUntil), LastAccess: time.Unix(0, o.lastAccess),
		SoftPinned: o.softPin, HardPinned: o.hardPin,
	}
	if o.softPinUntil != 0 {
		info.SoftPinUntil = time.Unix(0, o.softPinUntil)
	}
	return info, true
}

// Keys returns the keys of complete objects, sorted.
func (s *State) Keys() []string {
	out := make([]string, 0, len(s.objects))
	for k, o := range s.objects {
		if o.complete {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// SegmentInfo describes a mounted segment.
type SegmentInfo struct {
	api.Segment
	Used uint64 `json:"used"`
	Free uint64 `json:"free"`
}

// Segments lists mounted segments in ID order.
func (s *State) Segments() []SegmentInfo {
	out := make([]SegmentInfo, 0, len(s.segIDs))
	for _, id := range s.segIDs {
		seg := s.segments[id]
		out = append(out, SegmentInfo{Segment: seg.Segment, Used: seg.alloc.used, Free: seg.alloc.size - seg.alloc.used})
	}
	return out
}

// ClientSegments lists the segment IDs mounted for a client.
func (s *State) ClientSegments(clientID string) []string { return slices.Clone(s.clients[clientID]) }

// ClientEngines lists the transfer-engine names (segment names) of a client's segments, sorted,
// without repeats.
func (s *State) ClientEngines(clientID string) []string {
	var out []string
	for _, id := range s.clients[clientID] {
		if seg := s.segments[id]; seg != nil && seg.Name != "" && !slices.Contains(out, seg.Name) {
			out = append(out, seg.Name)
		}
	}
	slices.Sort(out)
	return out
}

// Clients lists the client IDs that have segments mounted, sorted.
func (s *State) Clients() []string { return sortedMapKeys(s.clients) }

// Stats is a point-in-time summary for metrics.
type Stats struct {
	Objects, PendingPuts, SoftPinned, HardPinned, Leased int
	Segments, Clients                                    int
	Capacity, Used                                       uint64
	Counters                                             Counters
	DFSUsed, DFSReserved                                 uint64
	DiskOnly, Moving                                     int
	LocalDiskUsed                                        uint64 // bytes on clients' local disks (SSD offload)
}

// Stats summarises the state at time now, from counts kept up as the state changes (stats.go).
func (s *State) Stats(now int64) Stats {
	return Stats{PendingPuts: len(s.pending), Segments: len(s.segments), Clients: len(s.clients),
		Capacity: s.capacity, Used: s.used, Counters: s.counters,
		DFSUsed: s.dfsUsed, DFSReserved: s.dfsReserved, Moving: len(s.moving), LocalDiskUsed: s.localUsed,
		Objects: s.stats.complete, HardPinned: s.stats.hardPinned, DiskOnly: s.stats.diskOnly,
		SoftPinned: countLive(s.stats.softPinned, inSoftPinned, func(o *object) bool { return o.complete && s.softPinned(o, now) }),
		Leased:     countLive(s.stats.leased, inLeased, func(o *object) bool { return o.complete && o.leaseUntil > now }),
	}
}

func (s *State) sortedKeys() []string { return sortedMapKeys(s.objects) }

func sortedMapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func insertSorted(xs []string, x string) []string {
	i, found := slices.BinarySearch(xs, x)
	if found {
		return xs
	}
	return slices.Insert(xs, i, x)
}

func removeSorted(xs []string, x string) []string {
	if i, found := slices.BinarySearch(xs, x); found {
		return slices.Delete(xs, i, i+1)
	}
	return xs
}
