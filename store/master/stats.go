package master

// Stats counts kept up as the state changes, so that a metrics scrape (Server.Snapshot, under
// the master's lock) costs what is pinned or leased, not a walk over every object: at a million
// objects that walk held the master for about 100 ms per scrape.
//
// The counts are derived, never encoded: a decoded state rebuilds them object by object.

// statFlags are the facts about one object that Stats counts and that do not depend on time.
type statFlags uint8

const (
	statComplete statFlags = 1 << iota
	statHardPinned
	statDiskOnly // a file on a disk tier and no complete memory copy
)

// timedSets names the indexes of derivedStats that hold an object (object.indexed), so that
// a read of an object leased already costs no map assignment (7 % of the master's CPU in a
// run of 64-key batch gets, 2026-12-08).
type timedSets uint8

const (
	inSoftPinned timedSets = 1 << iota
	inLeased
)

// derivedStats are the counts and indexes behind Stats.
type derivedStats struct {
	complete, hardPinned, diskOnly int
	localDisk                      int // objects with a copy on a client's local disk (SSD offload)
	// The objects that may be soft-pinned or leased now: added when pinned (PutEnd) or leased (a
	// read), removed by deleteObject, pruned of pins and leases that are over by Stats and, where
	// nothing asks for Stats, whenever a set has doubled since its last pruning (so each stays
	// within twice what is live, at an amortized constant cost per addition).
	softPinned, leased           map[*object]struct{}
	softPinnedBound, leasedBound int
}

// minTimedBound is the smallest size at which the pinned and leased sets get pruned on growth.
const minTimedBound = 1024

func newDerivedStats() derivedStats {
	return derivedStats{softPinned: map[*object]struct{}{}, leased: map[*object]struct{}{},
		softPinnedBound: minTimedBound, leasedBound: minTimedBound}
}

// statFlagsOf is what o contributes to the counts now: nothing unless it is a complete object
// of the state (not a put in progress, nor an upsert's replaced version).
func (s *State) statFlagsOf(o *object) statFlags {
	if !o.complete || s.objects[o.key] != o {
		return 0
	}
	f := statComplete
	if o.hardPin {
		f |= statHardPinned
	}
	if o.disk != nil && !s.inMemory(o) {
		f |= statDiskOnly
	}
	return f
}

// restat brings the counts up to date with o. Call it after any change to o's completeness,
// memory copies or disk file, and when o leaves the state (deleteObject).
func (s *State) restat(o *object) {
	s.setStat(o, s.statFlagsOf(o))
}

func (s *State) setStat(o *object, f statFlags) {
	if f == o.stat {
		return
	}
	count := func(bit statFlags, n *int) {
		switch {
		case f&bit != 0 && o.stat&bit == 0:
			*n++
		case f&bit == 0 && o.stat&bit != 0:
			*n--
		}
	}
	count(statComplete, &s.stats.complete)
	count(statHardPinned, &s.stats.hardPinned)
	count(statDiskOnly, &s.stats.diskOnly)
	o.stat = f
}

// forgetStat removes o, which is leaving the state, from the counts and indexes.
func (s *State) forgetStat(o *object) {
	s.setStat(o, 0)
	delete(s.stats.softPinned, o)
	delete(s.stats.leased, o)
	o.indexed = 0
}

// noteTimed adds o to the indexes of pinned and leased objects where it is one of them at now.
func (s *State) noteTimed(o *object, now int64) {
	if s.softPinned(o, now) && o.indexed&inSoftPinned == 0 {
		s.stats.softPinned[o] = struct{}{}
		o.indexed |= inSoftPinned
		bound(s.stats.softPinned, inSoftPinned, &s.stats.softPinnedBound, func(o *object) bool { return s.softPinned(o, now) })
	}
	if o.leaseUntil > now && o.indexed&inLeased == 0 {
		s.stats.leased[o] = struct{}{}
		o.indexed |= inLeased
		bound(s.stats.leased, inLeased, &s.stats.leasedBound, func(o *object) bool { return o.leaseUntil > now })
	}
}

// bound prunes set once it holds more than *limit objects, and sets the next limit to twice
// what is left.
func bound(set map[*object]struct{}, which timedSets, limit *int, live func(o *object) bool) {
	if len(set) > *limit {
		*limit = max(minTimedBound, 2*countLive(set, which, live))
	}
}

// countLive counts the objects of set (the index which) whose pin or lease (live) still holds
// at now, dropping the others from it: a pin or a lease that is over does not come back without
// a new PutEnd or read, which adds the object again.
func countLive(set map[*object]struct{}, which timedSets, live func(o *object) bool) int {
	n := 0
	sweep(set, which, live, func(*object) { n++ })
	return n
}

// sweep calls f for every object of set (the index which) that keep accepts and drops the
// others from set: the indexes of objects here are supersets kept up where objects join them,
// pruned as they are walked.
func sweep(set map[*object]struct{}, which timedSets, keep func(o *object) bool, f func(o *object)) {
	for o := range set {
		if !keep(o) {
			delete(set, o)
			o.indexed &^= which
			continue
		}
		f(o)
	}
}
