package master

import (
	"fmt"
	"slices"

	"github.com/mooncake-go/mooncake/store/api"
)

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

// replicaClear drops e.Key's memory copies on the segment named e.SegName (an engine segment
// name or a mount id), or the whole object when e.SegName is empty (upstream's
// BatchReplicaClear). Only the client that wrote the object may clear it, and only when it is
// complete and no reader holds a lease; the object goes when its last copy does. Count is 1
// when something was cleared.
func (s *State) replicaClear(e Entry) Result {
	o, r := s.lookup(e, "not found")
	if o == nil {
		return r
	}
	switch {
	case !o.complete || o.unconfirmed:
		return fail(api.REPLICA_IS_NOT_READY, fmt.Sprintf("key %q is still being written", e.Key))
	case e.ClientID != "" && o.putClient != e.ClientID:
		return fail(api.ILLEGAL_CLIENT, fmt.Sprintf("key %q was written by another client", e.Key))
	case o.leaseUntil > e.Now:
		return fail(api.OBJECT_HAS_LEASE, fmt.Sprintf("key %q is leased to a reader", e.Key))
	case o.offload != nil || o.promote != nil:
		return fail(api.OBJECT_REPLICA_BUSY, fmt.Sprintf("key %q is moving between tiers", e.Key))
	}
	if e.SegName == "" {
		s.deleteObject(o)
		return Result{Count: 1}
	}
	cleared := false
	for i := len(o.replicas) - 1; i >= 0; i-- {
		seg, ok := s.segments[o.replicas[i].segID]
		if ok && (seg.Name == e.SegName || seg.ID == e.SegName) {
			s.releaseReplica(o, i)
			cleared = true
		}
	}
	if !cleared {
		return fail(api.REPLICA_NOT_FOUND, fmt.Sprintf("key %q has no copy on segment %s", e.Key, e.SegName))
	}
	if len(o.replicas) == 0 && o.disk == nil {
		s.deleteObject(o)
	}
	return Result{Count: 1}
}
