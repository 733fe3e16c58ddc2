package master

import (
	"slices"
	"strings"
)

// Each disk tier ("" G3, else a client's local disk) keeps, derived from the objects, the bytes
// of its copies and of the moves to it in progress (a local disk's quota is checked against
// them; G3's are dfsUsed and dfsReserved, which snapshots carry), and its copies in the order in
// which they make room.
//
// The order in which disk copies make room (G3 under --dfs_full_policy=evict_oldest, a
// client's local disk at its quota): oldest copy first (diskRec.at), then by key, so that every
// replica of the state picks the same copies. Each tier (G3: "", a local disk: its client id)
// keeps its copies in that order as they are written, so making room costs the copies it drops
// rather than a walk over every object. Entries are not removed when a copy goes: an entry
// whose object no longer has that copy is skipped and trimmed as the head of the queue passes
// it, and the queue is rebuilt from its live entries when it has grown to twice their number.

// diskItem is a copy in a diskQueue: its object and the time it was written.
type diskItem struct {
	o  *object
	at int64
}

type diskQueue struct {
	items    []diskItem // sorted by (at, key)
	live     int        // copies of the tier that are still there (items also holds gone ones)
	used     uint64     // their bytes
	reserved uint64     // bytes of the moves to the tier in progress
}

// diskTier returns tier t's queue, making it.
func (s *State) diskTier(t string) *diskQueue {
	q := s.diskOrder[t]
	if q == nil {
		q = &diskQueue{}
		s.diskOrder[t] = q
	}
	return q
}

// diskInUse is tier t's bytes: its copies and the moves to it in progress.
func (s *State) diskInUse(t string) uint64 {
	if q := s.diskOrder[t]; q != nil {
		return q.used + q.reserved
	}
	return 0
}

// moveTier names the tier a move goes to.
func moveTier(m *offloadRec) string {
	if m.local {
		return m.client
	}
	return ""
}

// holdRoom notes n bytes of a move to tier t in progress; releaseRoom gives them back.
func (s *State) holdRoom(t string, n uint64) { s.diskTier(t).reserved += n }

func (s *State) releaseRoom(t string, n uint64) {
	if q := s.diskOrder[t]; q != nil {
		q.reserved -= n
		s.dropIfEmpty(t, q)
	}
}

// dropIfEmpty forgets tier t once it holds no copy and no move: its entries are all stale.
func (s *State) dropIfEmpty(t string, q *diskQueue) {
	if q.live > 0 {
		return
	}
	q.items = nil
	if q.reserved == 0 {
		delete(s.diskOrder, t)
	}
}

func itemBefore(a, b diskItem) int {
	if a.at != b.at {
		if a.at < b.at {
			return -1
		}
		return 1
	}
	return strings.Compare(a.o.key, b.o.key)
}

// tierOf names o's disk copy's tier in State.diskOrder.
func tierOf(d *diskRec) string { return d.client }

// noteDisk queues o's disk copy, just written (or decoded).
func (s *State) noteDisk(o *object) {
	s.fileNoted(o) // orphans.go
	t := tierOf(o.disk)
	q := s.diskTier(t)
	it := diskItem{o, o.disk.at}
	q.live++
	q.used += o.size
	if n := len(q.items); n == 0 || itemBefore(q.items[n-1], it) < 0 {
		q.items = append(q.items, it) // the usual case: copies are written in time order
	} else {
		i, _ := slices.BinarySearchFunc(q.items, it, itemBefore)
		for j := i; j < len(q.items) && itemBefore(q.items[j], it) == 0; j++ {
			if q.items[j].o == o {
				return // a copy made again at the same time: its old entry stands for it
			}
		}
		q.items = slices.Insert(q.items, i, it)
	}
	if len(q.items) > 2*q.live+64 {
		s.tidyDiskQueue(t)
	}
}

// forgetDisk notes that o's disk copy goes (its queue entry is left to be skipped).
func (s *State) forgetDisk(o *object) {
	s.fileForgot(o) // orphans.go
	t := tierOf(o.disk)
	if q := s.diskOrder[t]; q != nil {
		q.live--
		q.used -= o.size
		s.dropIfEmpty(t, q) // with no copy left every entry is stale (a client gone with its disk, say)
	}
}

// current reports whether it is still a copy of tier t.
func (s *State) current(t string, it diskItem) bool {
	o := it.o
	return s.objects[o.key] == o && o.disk != nil && tierOf(o.disk) == t && o.disk.at == it.at
}

// dropOldest drops tier t's copies oldest first, skipping those a reader holds a lease on and
// those being promoted, until done reports true: a copy of an object still in memory goes
// alone, an object with no other copy goes with it. count is called for each before it goes.
func (s *State) dropOldest(t string, now int64, done func() bool, count func(o *object)) {
	q := s.diskOrder[t]
	if q == nil {
		return
	}
	for i := 0; i < len(q.items) && !done(); i++ {
		it := q.items[i]
		if !s.current(t, it) || it.o.leaseUntil > now || it.o.promote != nil {
			continue
		}
		count(it.o)
		s.evictFromDisk(it.o)
	}
	s.tidyDiskQueue(t)
}

// tidyDiskQueue trims t's queue of the entries of copies that are gone: those at its head, or
// all of them once they are as many as the live ones.
func (s *State) tidyDiskQueue(t string) {
	q := s.diskOrder[t]
	if q == nil {
		return
	}
	head := 0
	for head < len(q.items) && !s.current(t, q.items[head]) {
		head++
	}
	q.items = q.items[head:]
	if len(q.items) > 2*q.live+64 {
		q.items = slices.DeleteFunc(q.items, func(it diskItem) bool { return !s.current(t, it) })
	}
	s.dropIfEmpty(t, q)
}
