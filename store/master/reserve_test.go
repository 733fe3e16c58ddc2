package master

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/ha"
)

// reserve starts a put of size bytes under the reservation name rkey for client.
func (h *harness) reserve(client, rkey string, size uint64) []api.Replica {
	h.t.Helper()
	r := h.apply(Entry{Op: OpPutStart, ClientID: client, Key: rkey, Size: size, Config: &api.ReplicateConfig{}})
	if r.Code != api.OK || len(r.Replicas) == 0 {
		h.t.Fatalf("reserve %s: %v (%d replicas)", rkey, r.Err(), len(r.Replicas))
	}
	return r.Replicas
}

// rname is the name a client gives its n-th reservation.
func rname(client string, n int) string {
	return fmt.Sprintf("%s%s/%d", api.ReservationPrefix, client, n)
}

func (h *harness) endReserved(client, key, rkey string, v []byte) Result {
	return h.apply(Entry{Op: OpPutEndReserved, ClientID: client, Key: key, Reserved: rkey, Value: v})
}

// TestPutEndReservedRenamesThePendingPut: a put completed through a reservation is the
// reservation's object under the user's key (its replicas, its bytes cached), the reservation
// is gone; every refusal leaves the state as it was and the reservation usable; the result
// survives a replay of the log and a snapshot.
func TestPutEndReservedRenamesThePendingPut(t *testing.T) {
	for _, policy := range []string{EvictionLRU, EvictionPrefix} {
		t.Run(policy, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.EvictionPolicy = policy })
			h.mount("c1", "s1", "h:1", 1<<20, 1<<20)
			r1, r2, r3 := rname("c1", 1), rname("c1", 2), rname("c1", 3)
			reps := h.reserve("c1", r1, 100)
			h.reserve("c1", r2, 100)
			h.reserve("c1", r3, 100)

			v := val('v', 100)
			expectCode(t, "end r1 as k", h.endReserved("c1", "k|parent", r1, v), api.OK)
			if ok, size := h.s.Exists("k|parent"); !ok || size != 100 {
				t.Fatalf("k|parent after its PutEndReserved: exists %v, size %d", ok, size)
			}
			if got := h.cached("k|parent"); !bytes.Equal(got, v) {
				t.Fatalf("k|parent's cached value: %d bytes, want the 100 sent", len(got))
			}
			info, _ := h.s.Query("k|parent")
			if !reflect.DeepEqual(info.Replicas[0].Addr, reps[0].Addr) {
				t.Fatalf("k|parent lies at %#x, the reservation at %#x", info.Replicas[0].Addr, reps[0].Addr)
			}
			if keys := h.s.Keys(); !slices.Equal(keys, []string{"k|parent"}) {
				t.Fatalf("keys %q: want only k|parent (reservations are puts in progress)", keys)
			}
			expectCode(t, "revoke r1 (renamed)", h.apply(Entry{Op: OpPutRevoke, ClientID: "c1", Key: r1}), api.OBJECT_NOT_FOUND)
			expectCode(t, "a retry after a lost reply", h.endReserved("c1", "k|parent", r1, v), api.OK)

			// Refusals: nothing changes, the reservation stays open.
			used := h.s.used
			expectCode(t, "write-once", h.endReserved("c1", "k|parent", r2, val('w', 100)), api.OBJECT_ALREADY_EXISTS)
			expectCode(t, "another client's", h.endReserved("c2", "x", r2, nil), api.ILLEGAL_CLIENT)
			expectCode(t, "unknown", h.endReserved("c1", "x", "nope", nil), api.OBJECT_NOT_FOUND)
			expectCode(t, "itself", h.endReserved("c1", r2, r2, nil), api.INVALID_PARAMS)
			expectCode(t, "bad key", h.endReserved("c1", "", r2, nil), api.INVALID_KEY)
			expectCode(t, "no reservation", h.endReserved("c1", "x", "", nil), api.INVALID_KEY)
			expectCode(t, "start busy", h.apply(Entry{Op: OpPutStart, ClientID: "c2", Key: "busy", Size: 100, Config: &api.ReplicateConfig{}}), api.OK)
			expectCode(t, "a key being put", h.endReserved("c1", "busy", r2, nil), api.OBJECT_REPLICA_BUSY)
			h.put("c1", "old", 100, api.ReplicateConfig{})
			expectCode(t, "upsert start", h.apply(Entry{Op: OpPutStart, ClientID: "c1", Key: "old", Size: 100, Config: &api.ReplicateConfig{}, Upsert: true}), api.OK)
			expectCode(t, "an upsert is no reservation", h.endReserved("c1", "y", "old", nil), api.INVALID_PARAMS)
			if h.s.used != used+2*alignUp(100)+alignUp(100) {
				t.Fatalf("used %d after the refusals, want %d plus busy, old and its upsert", h.s.used, used)
			}
			if ok, _ := h.s.Exists("x"); ok {
				t.Fatal("a refused PutEndReserved made x visible")
			}

			// r2 is still usable after every refusal; r3 is revoked unused.
			expectCode(t, "end r2 as k2|k", h.endReserved("c1", "k2|k", r2, val('2', 100)), api.OK)
			expectCode(t, "revoke r3", h.apply(Entry{Op: OpPutRevoke, ClientID: "c1", Key: r3}), api.OK)
			if keys := h.s.Keys(); !slices.Equal(keys, []string{"k2|k", "k|parent", "old"}) {
				t.Fatalf("keys %q", keys)
			}
			if policy == EvictionPrefix {
				checkChains(t, 0, h.s)
			}

			// The same state from a replay of the log (as a standby applies it) and from a snapshot.
			s2 := h.replayed()
			if s2.Digest() != h.s.Digest() {
				t.Fatal("a replay of the log differs from the state")
			}
			if h.snapshot().Digest() != h.s.Digest() {
				t.Fatal("the snapshot differs from the state")
			}
			if policy == EvictionPrefix {
				checkChains(t, 1, s2)
			}
			// Removing the renamed object frees the reservation's space.
			before := h.s.used
			expectCode(t, "remove k|parent", h.apply(Entry{Op: OpRemove, Key: "k|parent", Force: true}), api.OK)
			if h.s.used != before-alignUp(100) {
				t.Fatalf("used %d after removing k|parent, want %d", h.s.used, before-alignUp(100))
			}
		})
	}
}

// TestClientExpiryRevokesReservations: a reservation is a put in progress, so a client that
// expires takes its reservations with it.
func TestClientExpiryRevokesReservations(t *testing.T) {
	h := newHarness(t)
	h.mount("holder", "s1", "h:1", 1<<20, 1<<20)
	h.mount("c1", "s2", "h:2", 1<<30, 1<<20)
	h.reserve("c1", rname("c1", 1), 4096)
	h.reserve("c1", rname("c1", 2), 4096)
	if h.s.used != 2*alignUp(4096) {
		t.Fatalf("used %d with two reservations", h.s.used)
	}
	expectCode(t, "expire c1", h.apply(Entry{Op: OpExpireClient, ClientID: "c1"}), api.OK)
	if h.s.used != 0 || len(h.s.pending) != 0 {
		t.Fatalf("after c1 expired: used %d, %d puts in progress", h.s.used, len(h.s.pending))
	}
	expectCode(t, "end an expired reservation", h.endReserved("c1", "k", rname("c1", 1), nil), api.OBJECT_NOT_FOUND)
	if h.s.reserved != 0 {
		t.Fatalf("reservations hold %d bytes after their client expired", h.s.reserved)
	}
}

// TestReservationsTakeFreeRoomWithinTheirShare: reservations never evict and together hold at
// most 1 % of the capacity (counted through renames, revokes and a snapshot); a reservation
// cannot be an upsert.
func TestReservationsTakeFreeRoomWithinTheirShare(t *testing.T) {
	h := newHarness(t)
	h.mount("holder", "s1", "h:1", 1<<20, 1<<20) // share: 10485 bytes, two reservations of 4 KiB
	h.reserve("c1", rname("c1", 1), 4096)
	h.reserve("c1", rname("c1", 2), 4096)
	expectCode(t, "a third", h.apply(Entry{Op: OpPutStart, ClientID: "c1", Key: rname("c1", 3), Size: 4096, Config: &api.ReplicateConfig{}}), api.NO_AVAILABLE_HANDLE)
	if h.s.reserved != 2*alignUp(4096) {
		t.Fatalf("reservations hold %d bytes", h.s.reserved)
	}
	if h.snapshot().reserved != h.s.reserved {
		t.Fatal("a snapshot counts the reservations differently")
	}
	expectCode(t, "end 1", h.endReserved("c1", "k", rname("c1", 1), nil), api.OK)
	expectCode(t, "revoke 2", h.apply(Entry{Op: OpPutRevoke, ClientID: "c1", Key: rname("c1", 2)}), api.OK)
	if h.s.reserved != 0 {
		t.Fatalf("reservations hold %d bytes after a rename and a revoke", h.s.reserved)
	}
	expectCode(t, "upsert", h.apply(Entry{Op: OpPutStart, ClientID: "c1", Key: rname("c1", 4), Size: 4096, Config: &api.ReplicateConfig{}, Upsert: true}), api.INVALID_PARAMS)
	// Full memory: a plain put evicts, a reservation does not.
	for i := 0; ; i++ {
		if r := h.put("c2", fmt.Sprintf("v%d", i), 64<<10, api.ReplicateConfig{}); r.Code != api.OK || h.s.counters.EvictedObjects > 0 {
			break
		}
	}
	for i := 0; i < 1000 && h.s.used+alignUp(4096) <= h.s.capacity; i++ { // fill the last room
		h.put("c2", fmt.Sprintf("f%d", i), 4096, api.ReplicateConfig{})
	}
	if h.s.used+alignUp(4096) <= h.s.capacity {
		t.Fatalf("memory not full: %d of %d bytes used", h.s.used, h.s.capacity)
	}
	keys, evicted := len(h.s.Keys()), h.s.counters.EvictedObjects
	expectCode(t, "a reservation in full memory", h.apply(Entry{Op: OpPutStart, ClientID: "c1", Key: rname("c1", 5), Size: 4096, Config: &api.ReplicateConfig{}}), api.NO_AVAILABLE_HANDLE)
	if len(h.s.Keys()) != keys || h.s.counters.EvictedObjects != evicted {
		t.Fatalf("a refused reservation evicted: %d keys (was %d), %d evicted (was %d)", len(h.s.Keys()), keys, h.s.counters.EvictedObjects, evicted)
	}
}

// TestReservedEntriesHaveTheirOwnLogType: an older standby stops on a PutEndReserved entry
// (an unknown oplog type) rather than applying it as an unknown op and diverging; this version
// reads both types.
func TestReservedEntriesHaveTheirOwnLogType(t *testing.T) {
	for _, e := range []Entry{
		{Op: OpPutEnd, ClientID: "c", Key: "k"},
		{Op: OpPutEndReserved, ClientID: "c", Key: "k", Reserved: "r", Value: []byte{1, 2}},
	} {
		he, err := encodeEntry(7, e)
		if err != nil {
			t.Fatal(err)
		}
		want := entryTypeJSON
		if e.Op == OpPutEndReserved {
			want = entryTypeJSONReserved
		}
		if he.Type != want {
			t.Fatalf("%s encoded as type %d, want %d", e.Op, he.Type, want)
		}
		back, err := decodeEntry(he)
		if err != nil || !reflect.DeepEqual(back, e) {
			t.Fatalf("%s decoded as %+v (%v)", e.Op, back, err)
		}
	}
	if _, err := decodeEntry(ha.Entry{Seq: 3, Type: 4, Payload: []byte("{}")}); err == nil {
		t.Fatal("an entry of an unknown type decoded")
	}
}
