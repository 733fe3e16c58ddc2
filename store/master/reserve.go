package master

// Puts written into reservations: a put in two round trips instead of three.
//
// A client starts puts ahead, under names of its own (an ordinary BatchPutStart of keys no
// user can name, store/client/reserve.go), and keeps their replicas. A later put of the same
// size and replica settings writes its value into one of them and sends one PutEndReserved
// naming the reservation: applying it renames the pending object to the user's key and
// completes it, as PutEnd would. Nothing else is new to the state: until then a reservation is
// a pending put like any other, so the operation log, the snapshots, client expiry, revocation
// and the stale-put timeouts cover it, and it is neither listed, counted as a key, evicted nor
// removed. Two rules apply to reservations (keys with api.ReservationPrefix) alone: they take
// free room only (a reservation never evicts), and all of them together at most 1 % of the
// capacity.
//
// The entry has an oplog type of its own (ha.go, entryTypeJSONReserved), so that a standby of
// an older version stops with an error on it instead of applying an op it does not know as a
// failure and diverging from its leader.

import (
	"fmt"

	"github.com/mooncake-go/mooncake/store/api"
)

func (s *State) putEndReserved(e Entry) Result {
	if len(e.Keys) > 0 && e.ClientID != "" {
		s.confirmKeys(e.ClientID, e.Keys, e.Now) // confirmations sent along (unconfirmed.go)
	}
	if r, bad := keyFail(e.Key); bad {
		return r
	}
	if r, bad := keyFail(e.Reserved); bad {
		return r
	}
	if e.Reserved == e.Key {
		return fail(api.INVALID_PARAMS, fmt.Sprintf("key %q names itself as its reservation", e.Key))
	}
	o, ok := s.pending[e.Reserved]
	if !ok {
		if cur, ok := s.objects[e.Key]; ok && cur.complete && cur.putClient == e.ClientID {
			// A repeated PutEndReserved (a retry after a lost reply, or after a failover that
			// kept the entry): the rename is done.
			return Result{}
		}
		return fail(api.OBJECT_NOT_FOUND, fmt.Sprintf("reservation %q is not an open put of this master", e.Reserved))
	}
	if o.upsert || s.objects[e.Reserved] != o {
		return fail(api.INVALID_PARAMS, fmt.Sprintf("%q is an upsert in progress, not a reservation", e.Reserved))
	}
	if r, bad := otherPutter(Entry{ClientID: e.ClientID, Key: e.Reserved}, o); bad {
		return r
	}
	if cur, ok := s.objects[e.Key]; ok {
		if cur.complete {
			// Write-once: the key keeps its value and the reservation stays open for the
			// next put (what the client wrote into it is overwritten then).
			return fail(api.OBJECT_ALREADY_EXISTS, fmt.Sprintf("key %q already exists", e.Key))
		}
		return fail(api.OBJECT_REPLICA_BUSY, fmt.Sprintf("key %q is being written by another put", e.Key))
	}
	if _, ok := s.pending[e.Key]; ok {
		return fail(api.OBJECT_REPLICA_BUSY, fmt.Sprintf("key %q is being written by another put", e.Key))
	}
	if e.Unconfirmed {
		if r, bad := s.unconfirmedRefused(o, e.Value); bad {
			return r
		}
	}
	// Rename: out of the indexes kept by name, then back in under the new one.
	s.noteReservation(o, -1)
	s.dropResident(o)
	s.releaseName(o)
	delete(s.objects, o.key)
	delete(s.pending, o.key)
	o.key = e.Key
	s.objects[o.key] = o
	s.holdName(o)
	s.noteResident(o)
	s.pending[o.key] = o
	end := e
	end.Op, end.Reserved, end.Keys = OpPutEnd, "", nil
	return s.putEnd(end)
}

// reservationShare is the part of the store's capacity put reservations may hold: they are
// memory nothing can evict, so a small store (or a test's) keeps all of its room for values.
const reservationShare = 100 // 1 %

// reservationRefused refuses a reservation's PutStart (Result, true) that is an upsert or
// that would take the reservations past their share of the capacity. A reservation that does
// not fit in free room is refused too (putStart): it never evicts.
func (s *State) reservationRefused(e Entry, cfg api.ReplicateConfig) (Result, bool) {
	if e.Upsert {
		return fail(api.INVALID_PARAMS, "a put reservation cannot be an upsert"), true
	}
	need := alignUp(e.Size) * uint64(max(cfg.ReplicaNum, 1))
	if s.reserved+need > s.capacity/reservationShare {
		return fail(api.NO_AVAILABLE_HANDLE, fmt.Sprintf("put reservations hold %d bytes; %d more would pass their share (1/%d) of the %d-byte capacity",
			s.reserved, need, reservationShare, s.capacity)), true
	}
	return Result{}, false
}

// noteReservation adds (sign 1) or removes (-1) the pending object o to the bytes held by
// reservations, when o is one.
func (s *State) noteReservation(o *object, sign int) {
	switch {
	case sign > 0 && api.IsReservation(o.key):
		o.reservedBytes = alignUp(o.size) * uint64(len(o.replicas))
		s.reserved += o.reservedBytes
	case sign < 0:
		s.reserved -= o.reservedBytes // what was added, whatever became of its replicas since
		o.reservedBytes = 0
	}
}

// PutsInProgress is how many puts are between their PutStart and their end, reservations
// included.
func (s *State) PutsInProgress() int { return len(s.pending) }
