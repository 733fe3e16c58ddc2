package master

import (
	"fmt"

	"github.com/mooncake-go/mooncake/store/api"
)

// Unconfirmed puts: a single small put in one round trip.
//
// A put written into a reservation (reserve.go) is the write to its replicas and then one
// PutEndReserved. For a value the value cache can hold, a client may send the end while its
// write is still under way (PutEndUnconfirmed: an OpPutEndReserved entry with Unconfirmed), and
// wait for both answers together. Applying it completes the key as PutEnd would, but:
//
//   - the replicas stay ReplicaProcessing, so describe lists none of them: no reader, single,
//     batch, range or session, is ever sent to memory that may not hold the value yet;
//   - the value (Entry.Value, the whole value) is kept beside the object and pinned: it counts
//     in the cache's budget (pinnedBytes within valueBytes) but the cache never drops it for
//     another, and gets answer with it (grantLease), so the key is readable at once;
//   - the object counts as in memory (inMemory), it is not offloaded to a disk tier yet (an
//     eviction drops it rather than move it down: canOffload), its copies are not cleared by
//     replica_clear, and a segment unmounted under it takes the whole object.
//
// The client then names the key in an OpPutConfirm (ConfirmPuts, or Keys sent along with its
// next end) once its write completed: the replicas become ReplicaComplete, the value
// joins the cache's least-recently-used list like any other, and the object is offloaded as
// a put would have been. A write that failed is revoked instead (PutRevoke of the key): the
// object goes, as it would have never been readable before (readers had the value only,
// exactly the bytes the client put). A client that expires (client_ttl) before confirming
// leaves its unconfirmed puts as they are: readable from their values, which are exactly what
// was put, with their replicas never handed out, since whether their writes completed is
// unknown. So a put acknowledged just before its client died is kept, as a plain put would be
// (the values stay pinned until the objects are removed or evicted; a client that comes back
// under the same id may still confirm them). Eviction and removal treat an unconfirmed object
// like any other.
//
// An unconfirmed end is refused (REPLICA_IS_NOT_READY, before any change) when the value is
// not the object's size, is larger than maxCachedValue, or would take the pinned values past
// half of --small_value_cache_bytes: the client then ends the put after its write, the plain way.
//
// Everything is in the entries (the value, the keys confirmed) and decided in Apply, so a
// standby and a restored snapshot hold the same unconfirmed puts and pinned values; after a
// failover the client sends its confirmations to the new leader. The entries have an oplog
// type of their own (ha.go, entryTypeJSONUnconfirmed): a standby of the version before stops on
// them rather than make such a key readable from replicas not yet written.

// pinShare is the part of --small_value_cache_bytes the values of unconfirmed puts may hold.
const pinShare = 2 // a half

// unconfirmedRefused refuses an unconfirmed end of o with v (Result, true) that the cache
// cannot pin.
func (s *State) unconfirmedRefused(o *object, v []byte) (Result, bool) {
	switch {
	case uint64(len(v)) != o.size:
		return fail(api.REPLICA_IS_NOT_READY, fmt.Sprintf("an unconfirmed end of %q carries %d bytes of a %d-byte value", o.key, len(v), o.size)), true
	case o.size > maxCachedValue || len(o.replicas) == 0:
		return fail(api.REPLICA_IS_NOT_READY, fmt.Sprintf("%q cannot be read before its replicas are written: end it after the write", o.key)), true
	case s.pinnedBytes+o.size > s.cfg.SmallValueCacheBytes/pinShare:
		return fail(api.REPLICA_IS_NOT_READY, fmt.Sprintf("unconfirmed puts hold %d bytes of the value cache; end %q after its write", s.pinnedBytes, o.key)), true
	}
	return Result{}, false
}

// pin makes the object o, just completed (so holding no value yet), unconfirmed, read from v
// (checked by unconfirmedRefused).
func (s *State) pin(o *object, v []byte) {
	budget := s.cfg.SmallValueCacheBytes
	for s.valueBytes+o.size > budget && s.values.head != nil {
		s.dropValue(s.values.head) // pinned values come first; the cache keeps fewer others
		s.counters.ValueCacheDrops++
	}
	o.unconfirmed = true
	o.value = v
	s.valueBytes += o.size
	s.pinnedBytes += o.size
	s.unconfirmed[o.key] = o
}

// confirm makes o's replicas readable and its value an ordinary cached one.
func (s *State) confirm(o *object, now int64) {
	delete(s.unconfirmed, o.key)
	v := o.value
	s.dropValue(o) // out of the pinned bytes, while o is still unconfirmed
	o.unconfirmed = false
	for i := range o.replicas {
		o.replicas[i].status = api.ReplicaComplete
	}
	s.cacheValue(o, v)
	s.offloadAfterPut(o, now)
	s.restat(o)
}

// confirmKeys confirms the unconfirmed puts of client among keys; others are left alone (a
// repeated confirmation, a key removed or evicted since, another client's).
func (s *State) confirmKeys(client string, keys []string, now int64) {
	for _, k := range keys {
		if o := s.unconfirmed[k]; o != nil && o.putClient == client {
			s.confirm(o, now)
		}
	}
}

func (s *State) putConfirm(e Entry) Result {
	if e.ClientID == "" {
		return fail(api.INVALID_PARAMS, "put confirmation without a client id")
	}
	s.confirmKeys(e.ClientID, e.Keys, e.Now)
	return Result{}
}

// UnconfirmedPuts is how many puts are readable from their values alone, their replicas' writes
// not yet confirmed.
func (s *State) UnconfirmedPuts() int { return len(s.unconfirmed) }
