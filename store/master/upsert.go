package master

import "slices"

// Upsert: a put that replaces the key's value when it exists (OpPutStart with Entry.Upsert).
//
// The new version is written beside the old one: between its PutStart and PutEnd it lives in
// pending only, while objects keeps the old version readable. PutEnd swaps them in one entry,
// so a reader gets either the whole old value or the whole new one, never a mix. The old
// version's memory copies are freed at once when no reader holds a lease on them; otherwise
// they are kept (retired) until the lease is over, so a read in flight copies intact bytes.

// retiredRec is a memory copy of a replaced version, freed at until (its lease end).
type retiredRec struct {
	segID string
	addr  uint64
	size  uint64
	until int64
}

// retire forgets o, the readable version of its key, which an upsert is replacing at now.
func (s *State) retire(o *object, now int64) {
	if o.leaseUntil > now {
		for _, r := range o.replicas {
			if _, ok := s.segments[r.segID]; ok {
				s.retired = append(s.retired, retiredRec{segID: r.segID, addr: r.addr, size: o.size, until: o.leaseUntil})
			}
		}
		o.replicas = nil // kept allocated (and counted in used) in retired
	}
	s.deleteObject(o)
}

// freeRetired frees the retired copies whose lease is over at now and returns how many.
func (s *State) freeRetired(now int64) int {
	n := 0
	s.retired = slices.DeleteFunc(s.retired, func(r retiredRec) bool {
		if r.until > now {
			return false
		}
		if seg, ok := s.segments[r.segID]; ok {
			seg.alloc.release(r.addr-seg.Base, r.size)
			s.used -= alignUp(r.size)
		}
		n++
		return true
	})
	return n
}

// retiredDue reports whether a retired copy can be freed at now.
func (s *State) retiredDue(now int64) bool {
	return slices.ContainsFunc(s.retired, func(r retiredRec) bool { return r.until <= now })
}

// dropRetiredOn forgets the retired copies on a segment being unmounted (its memory goes with it).
func (s *State) dropRetiredOn(segID string) {
	s.retired = slices.DeleteFunc(s.retired, func(r retiredRec) bool {
		if r.segID != segID {
			return false
		}
		s.used -= alignUp(r.size)
		return true
	})
}

// dropPendingUpsertsOn revokes the upserts in progress (not yet in objects) with a replica on segID.
func (s *State) dropPendingUpsertsOn(segID string) {
	for _, key := range sortedMapKeys(s.pending) {
		o := s.pending[key]
		if s.objects[key] == o {
			continue // an ordinary put: dropSegment's object loop handles it
		}
		if slices.ContainsFunc(o.replicas, func(r replicaRec) bool { return r.segID == segID }) {
			s.deleteObject(o)
		}
	}
}

// pendingUpserts returns the upserts in progress whose old version is still in objects, by key.
func (s *State) pendingUpserts() []*object {
	var out []*object
	for _, key := range sortedMapKeys(s.pending) {
		if o := s.pending[key]; s.objects[key] != o {
			out = append(out, o)
		}
	}
	return out
}
