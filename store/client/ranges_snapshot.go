package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/internal/memview"
	"github.com/mooncake-go/mooncake/store/api"
)

// Session-based ranged reads (upstream's RangedReadSnapshot): one metadata query for a set of
// keys, then any number of ranged-read batches against the replica descriptors it returned,
// without asking the master again while its read lease holds.
//
// What the lease protects. The master grants a read lease of --default_kv_lease_ttl with every
// replica list. While it runs, the object's memory copies stay where the descriptors say:
// eviction, a move to the G3 tier, batch_replica_clear and remove (without force) leave a
// leased object's memory alone, and an upsert keeps the replaced version's memory (retired)
// until the lease ends. So a snapshot read within the lease returns the bytes the key had when
// the snapshot was taken (the old value after an upsert), and a plain get the new ones.
//
// Refresh. A batch that starts when half the lease window has passed since the query (the
// query's send time, earlier than the master's grant) first queries every key again, so the
// snapshot then describes the current versions (an upsert becomes visible, a key missing at
// preparation may appear, a removed one reports OBJECT_NOT_FOUND). A batch never reads through
// a descriptor whose lease is over: before each object's reads it checks the lease is still
// running, and a read that ends after the lease ended reports LEASE_EXPIRED instead of its byte
// count (the bytes may have been replaced while they were copied). The one thing a lease does
// not stop is remove(force=True) (and remove_all / remove_by_regex with force), which frees the
// memory at once, for every reader, as upstream's force does.
//
// Staging. A batch with allowStaging reads objects that have no memory copy (a G3 file, or a
// client's SSD offload file) through an intermediate buffer: the whole object (its checksum
// covers the whole payload) is read into memory this client allocates, then the ranges are
// copied out. Staged objects are read one at a time per batch, so a batch holds at most one
// object's bytes beyond the caller's buffers; each object is read once per batch however many
// rows name it. A promotion the master offers with the query is given back at once (snapshot
// reads do not write the memory copy; plain gets still promote).

// Snapshot is a ranged-read snapshot of some keys (Client.PrepareSnapshot). It is safe for
// concurrent use.
type Snapshot struct {
	c      *Client
	keys   []string       // the distinct keys, in first-seen order
	index  map[string]int // key -> position in keys
	mu     sync.Mutex     // one refresh at a time
	view   atomic.Pointer[snapView]
	closed atomic.Bool
}

// snapView is the result of one query of every key of a snapshot.
type snapView struct {
	refresh  time.Time // batches starting at or after it query again
	deadline time.Time // the end of the read lease (as this client counts it)
	entries  []snapEntry
}

// snapEntry is one key's descriptors (or why there are none).
type snapEntry struct {
	ikey  string // the key on the master (tenant namespace)
	size  uint64
	mem   []api.Replica // memory copies, best first
	files []api.Replica // file copies (G3, SSD offload), best first
	err   error
}

// RangeGroup is the fragments read from one key in a batch of Snapshot.GetRanges. With Whole,
// every fragment is checked before any is read, and one that cannot be read fails them all, so
// the destination is left as it was. With Buffer (an address in a registered buffer, the
// caller's buffer_ptrs entry), every destination must lie in the registered buffer holding it,
// not merely in some registered buffer (a range past the end of one buffer is refused even when
// another registered buffer follows it in memory).
type RangeGroup struct {
	Key    string
	Frags  []Range
	Whole  bool
	Buffer uintptr
}

// PrepareSnapshot queries the replicas of every distinct key once (granting read leases) and
// returns a snapshot to read ranges of them with. Keys that do not exist are allowed: reads of
// them fail with OBJECT_NOT_FOUND. A master that cannot be reached is not an error here either:
// the next batch queries again.
func (c *Client) PrepareSnapshot(ctx context.Context, keys []string) *Snapshot {
	s := &Snapshot{c: c, index: make(map[string]int, len(keys))}
	for _, k := range keys {
		if _, ok := s.index[k]; !ok {
			s.index[k] = len(s.keys)
			s.keys = append(s.keys, k)
		}
	}
	s.view.Store(s.query(ctx))
	return s
}

// Client is the client that prepared the snapshot.
func (s *Snapshot) Client() *Client { return s.c }

// Keys returns the snapshot's distinct keys, in the order first given.
func (s *Snapshot) Keys() []string { return slices.Clone(s.keys) }

// Close releases the snapshot's descriptors; later reads fail with INVALID_PARAMS. The leases
// it holds on the master end on their own.
func (s *Snapshot) Close() {
	s.closed.Store(true)
	s.view.Store(nil)
}

// query asks the master for the replicas of every key of the snapshot.
func (s *Snapshot) query(ctx context.Context) *snapView {
	start := time.Now()
	v := &snapView{refresh: start, deadline: start, entries: make([]snapEntry, len(s.keys))}
	var ikeys []string
	var idx []int
	for i, k := range s.keys {
		ik, err := s.c.tkey(k)
		if err != nil {
			v.entries[i].err = err
			continue
		}
		v.entries[i].ikey = ik
		ikeys = append(ikeys, ik)
		idx = append(idx, i)
	}
	if len(ikeys) == 0 {
		return v
	}
	rctx, cancel := s.c.rpcCtx(ctx)
	resp, err := s.c.master.BatchGetReplicaList(rctx, &api.BatchKeysRequest{ClientID: s.c.id, Keys: ikeys})
	cancel()
	if err == nil {
		err = resp.Err()
	}
	if err == nil && len(resp.Results) != len(ikeys) {
		err = api.Errorf(api.INTERNAL_ERROR, "the master answered %d replica lists for %d keys", len(resp.Results), len(ikeys))
	}
	if err != nil {
		err = s.c.rpcErr("ranged-read snapshot", err)
		for _, i := range idx {
			v.entries[i].err = err
		}
		return v // refresh == start: the next batch asks again
	}
	var ttl time.Duration
	for j, g := range resp.Results {
		e := &v.entries[idx[j]]
		ttl = max(ttl, leaseTTL(&g))
		if err := g.Err(); err != nil {
			e.err = fmt.Errorf("get %s: %w", quote(e.ikey), err)
			continue
		}
		if g.Promote != nil {
			s.c.declinePromotion(ctx, e.ikey)
		}
		e.size = g.Size
		for _, r := range s.c.orderReplicas(g.Replicas) {
			if r.IsFile() {
				e.files = append(e.files, r)
			} else {
				e.mem = append(e.mem, r)
			}
		}
		if len(e.mem)+len(e.files) == 0 {
			e.err = api.Errorf(api.REPLICA_NOT_FOUND, "get %s: no replica", quote(e.ikey))
		}
	}
	v.deadline = start.Add(ttl)
	v.refresh = start.Add(ttl / 2)
	return v
}

// declinePromotion gives back the memory replica the master offered to promote key into.
func (c *Client) declinePromotion(ctx context.Context, key string) {
	rctx, cancel := c.rpcCtx(ctx)
	c.master.PromoteDone(rctx, &api.OffloadDoneRequest{ClientID: c.id, Key: key, Error: "a ranged-read snapshot does not promote"})
	cancel()
}

// current returns the view a batch starting now reads with, querying again when half the lease
// window has passed.
func (s *Snapshot) current(ctx context.Context) (*snapView, error) {
	if v := s.view.Load(); v != nil && time.Now().Before(v.refresh) {
		return v, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return nil, api.Errorf(api.INVALID_PARAMS, "the ranged-read snapshot is closed")
	}
	v := s.view.Load()
	if v == nil || !time.Now().Before(v.refresh) {
		v = s.query(ctx)
		s.view.Store(v)
	}
	return v, nil
}

// GetRanges reads every group's fragments through the snapshot's descriptors: for each
// fragment the bytes read or its error, as Client.GetRanges. A key the snapshot was not
// prepared with fails with INVALID_PARAMS. With allowStaging, objects without a memory copy are
// read through an intermediate buffer (see the comment at the top of this file); without it
// they fail with REPLICA_NOT_FOUND, as Client.GetRanges.
func (s *Snapshot) GetRanges(ctx context.Context, groups []RangeGroup, allowStaging bool) ([][]uint64, [][]error) {
	got := make([][]uint64, len(groups))
	errs := make([][]error, len(groups))
	for i, g := range groups {
		got[i] = make([]uint64, len(g.Frags))
		errs[i] = make([]error, len(g.Frags))
	}
	if len(groups) == 0 {
		return got, errs
	}
	v, err := s.current(ctx)
	if err != nil {
		for i := range errs {
			fillErr(errs[i], err)
		}
		return got, errs
	}
	regs := s.c.regionTable()
	staged := map[int][]int{} // entry -> groups read through a staging buffer
	var direct []int
	for gi, g := range groups {
		ki, ok := s.index[g.Key]
		if !ok {
			fillErr(errs[gi], api.Errorf(api.INVALID_PARAMS, "get %s: the key is not in this ranged-read snapshot (prepare a snapshot with it)", quote(g.Key)))
			continue
		}
		e := &v.entries[ki]
		if e.err != nil {
			fillErr(errs[gi], e.err)
			continue
		}
		bad := -1
		in := regs
		if g.Buffer != 0 {
			in = regs.holding(g.Buffer)
		}
		for fi, f := range g.Frags {
			if errs[gi][fi] = checkRange(e.ikey, e.size, f, in); errs[gi][fi] != nil && bad < 0 {
				bad = fi
			}
		}
		switch {
		case bad >= 0 && g.Whole:
			fillErr(errs[gi], api.Errorf(api.INVALID_PARAMS, "get %s: not read: fragment %d of the same row cannot be read", quote(e.ikey), bad))
		case len(e.mem) > 0:
			direct = append(direct, gi)
		case allowStaging && len(e.files) > 0:
			staged[ki] = append(staged[ki], gi)
		default:
			fillErr(errs[gi], api.Errorf(api.REPLICA_NOT_FOUND, "get %s: ranged reads need a memory replica and the object has none (allow_staging reads it through a staging buffer)", quote(e.ikey)))
		}
	}
	parallel(len(direct), batchReadParallel, func(j int) {
		gi := direct[j]
		e := &v.entries[s.index[groups[gi].Key]]
		s.c.readGroup(ctx, v, e, groups[gi].Frags, got[gi], errs[gi])
	})
	for _, ki := range sortedInts(staged) {
		s.c.readStaged(ctx, v, &v.entries[ki], groups, staged[ki], got, errs)
	}
	return got, errs
}

// fillErr sets every entry of errs that is still nil to err.
func fillErr(errs []error, err error) {
	for i := range errs {
		if errs[i] == nil {
			errs[i] = err
		}
	}
}

func sortedInts(m map[int][]int) []int {
	ks := make([]int, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	return ks
}

// parallel runs fn(0..n-1) on up to workers goroutines.
func parallel(n, workers int, fn func(i int)) {
	if n <= 1 || workers <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
}

func leaseOver(key string) error {
	return api.Errorf(api.LEASE_EXPIRED, "get %s: the snapshot's read lease ended before the read did; the data may have been replaced (read again: the next batch refreshes the snapshot)", quote(key))
}

// readGroup reads the fragments of one object that passed checkRange (errs[i] == nil) from its
// memory copies: one mapping of the object on this host, or one engine batch.
func (c *Client) readGroup(ctx context.Context, v *snapView, e *snapEntry, frags []Range, got []uint64, errs []error) {
	todo := make([]int, 0, len(frags))
	for i := range frags {
		if errs[i] == nil {
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 {
		return
	}
	if !time.Now().Before(v.deadline) {
		for _, i := range todo {
			errs[i] = leaseOver(e.ikey)
		}
		return
	}
	var err error
	for _, r := range e.mem {
		if err = c.readFrags(ctx, r, frags, todo); err == nil {
			break
		}
	}
	switch {
	case err != nil:
		err = fmt.Errorf("get %s: %w", quote(e.ikey), err)
	case time.Now().After(v.deadline):
		err = leaseOver(e.ikey)
	}
	for _, i := range todo {
		if err != nil {
			errs[i] = err
		} else {
			got[i] = frags[i].Size
		}
	}
}

// transferChunk is the most fragments one engine batch of a ranged read carries.
const transferChunk = 16384

// readFrags copies frags[todo] from the memory replica r: through a mapping of the whole object
// when this host can map it, else in engine batches into the (registered) destinations.
func (c *Client) readFrags(ctx context.Context, r api.Replica, frags []Range, todo []int) error {
	id, err := c.openSegment(r.SegmentName)
	if err != nil {
		return err
	}
	if view, release, ok, err := c.eng.MapRemotePinned(id, r.Addr, r.Size); err == nil && ok {
		for _, i := range todo {
			f := frags[i]
			copy(memview.Bytes(f.Dst, int(f.Size)), view[f.Src:f.Src+f.Size])
		}
		release()
		return nil
	}
	reqs := make([]engine.TransferRequest, 0, min(len(todo), transferChunk))
	for start := 0; start < len(todo); start += transferChunk {
		reqs = reqs[:0]
		for _, i := range todo[start:min(start+transferChunk, len(todo))] {
			f := frags[i]
			reqs = append(reqs, engine.TransferRequest{Opcode: engine.OpRead, Source: f.Dst, TargetID: id, TargetOffset: r.Addr + f.Src, Length: f.Size})
		}
		if err := c.eng.TransferSync(ctx, reqs); err != nil {
			return api.Errorf(api.TRANSFER_FAIL, "read %d ranges from %s: %v", len(reqs), r.SegmentName, err)
		}
	}
	return nil
}

// readStaged reads a file-only object once into a buffer of its size and copies the fragments
// of groups[gis] out of it.
func (c *Client) readStaged(ctx context.Context, v *snapView, e *snapEntry, groups []RangeGroup, gis []int, got [][]uint64, errs [][]error) {
	fail := func(err error) {
		for _, gi := range gis {
			fillErr(errs[gi], err)
		}
	}
	if !time.Now().Before(v.deadline) {
		fail(leaseOver(e.ikey))
		return
	}
	whole := make([]byte, e.size)
	var all []error
	for _, r := range e.files {
		err := c.readDisk(ctx, e.ikey, &api.GetReplicaListResponse{}, r, buf{b: whole})
		if err == nil {
			all = nil
			break
		}
		all = append(all, err)
	}
	switch {
	case len(all) == 1:
		fail(fmt.Errorf("get %s: %w", quote(e.ikey), all[0]))
		return
	case len(all) > 1:
		fail(fmt.Errorf("get %s: every replica failed: %w", quote(e.ikey), errors.Join(all...)))
		return
	case time.Now().After(v.deadline):
		fail(leaseOver(e.ikey))
		return
	}
	for _, gi := range gis {
		for fi, f := range groups[gi].Frags {
			if errs[gi][fi] == nil {
				copy(memview.Bytes(f.Dst, int(f.Size)), whole[f.Src:f.Src+f.Size])
				got[gi][fi] = f.Size
			}
		}
	}
}

// checkRange checks fragment f of key's size-byte value: its size, its source range, and its
// destination inside one registered buffer.
func checkRange(key string, size uint64, f Range, regs regionTable) error {
	switch {
	case f.Size == 0:
		return api.Errorf(api.INVALID_PARAMS, "get %s: a fragment of 0 bytes", quote(key))
	case f.Src > size || f.Size > size-f.Src:
		return api.Errorf(api.INVALID_PARAMS, "get %s: bytes [%d, %d) are outside the %d-byte value", quote(key), f.Src, f.Src+f.Size, size)
	}
	return regs.check(key, f.Dst, f.Size)
}

// regionTable is the registered buffers of a client, by address, for many look-ups in a batch.
type regionTable struct {
	base   []uintptr
	size   []uint64
	maxEnd []uintptr // maxEnd[i]: the highest end of base[0..i]
}

func (c *Client) regionTable() regionTable {
	c.regMu.RLock()
	type reg struct {
		base uintptr
		n    uint64
	}
	rs := make([]reg, 0, len(c.regions))
	for a, n := range c.regions {
		rs = append(rs, reg{a, n})
	}
	c.regMu.RUnlock()
	slices.SortFunc(rs, func(a, b reg) int {
		switch {
		case a.base < b.base:
			return -1
		case a.base > b.base:
			return 1
		}
		return 0
	})
	var t regionTable
	var hi uintptr
	for _, r := range rs {
		t.base = append(t.base, r.base)
		t.size = append(t.size, r.n)
		hi = max(hi, r.base+uintptr(r.n))
		t.maxEnd = append(t.maxEnd, hi)
	}
	return t
}

// holding returns the table of the one registered buffer holding addr (empty when none does).
func (t regionTable) holding(addr uintptr) regionTable {
	i := sort.Search(len(t.base), func(i int) bool { return t.base[i] > addr }) - 1
	for j := i; j >= 0 && t.maxEnd[j] > addr; j-- {
		if addr-t.base[j] < uintptr(t.size[j]) {
			end := t.base[j] + uintptr(t.size[j])
			return regionTable{base: t.base[j : j+1], size: t.size[j : j+1], maxEnd: []uintptr{end}}
		}
	}
	return regionTable{}
}

// check reports whether [addr, addr+n) lies in one registered buffer.
func (t regionTable) check(key string, addr uintptr, n uint64) error {
	i := sort.Search(len(t.base), func(i int) bool { return t.base[i] > addr }) - 1
	found := -1
	for j := i; j >= 0 && t.maxEnd[j] > addr; j-- {
		if addr >= t.base[j] && addr-t.base[j] < uintptr(t.size[j]) {
			if uint64(addr-t.base[j])+n <= t.size[j] {
				return nil
			}
			if found < 0 {
				found = j
			}
		}
	}
	if found < 0 {
		return api.Errorf(api.INVALID_PARAMS, "get %s: destination %#x is not in a buffer registered with register_buffer", quote(key), addr)
	}
	return api.Errorf(api.BUFFER_OVERFLOW, "get %s: %d bytes at %#x overflow the %d-byte registered buffer at %#x", quote(key), n, addr, t.size[found], t.base[found])
}
