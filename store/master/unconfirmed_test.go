package master

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/store/api"
)

// endUnconfirmed ends the reservation rkey as key while its write is under way.
func (h *harness) endUnconfirmed(client, key, rkey string, v []byte, confirmed ...string) Result {
	return h.apply(Entry{Op: OpPutEndReserved, ClientID: client, Key: key, Reserved: rkey, Value: v, Unconfirmed: true, Keys: confirmed})
}

// readable is what a reader of key gets: its replicas and the bytes answered with them.
func (h *harness) readable(key string) ([]api.Replica, []byte) {
	h.t.Helper()
	r := h.apply(Entry{Op: OpGrantLease, ClientID: "reader", Key: key})
	if r.Code != api.OK {
		h.t.Fatalf("grant_lease %s: %v", key, r.Err())
	}
	return r.Replicas, r.Value
}

// TestUnconfirmedPutIsReadFromItsValueUntilConfirmed: an unconfirmed end makes the key readable
// at once from its bytes alone (no replica is handed out, in single and batch reads), its value
// stays through cache pressure that drops every other; a confirmation, alone or sent with the
// next end, makes the replicas readable and the value an ordinary cached one; repeated and
// foreign confirmations change nothing; replays and snapshots hold the same state throughout.
func TestUnconfirmedPutIsReadFromItsValueUntilConfirmed(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.SmallValueCacheBytes = 4 * 4096 })
	h.mount("holder", "s1", "h:1", 1<<20, 1<<20)
	r1, r2 := rname("c1", 1), rname("c1", 2)
	reps := h.reserve("c1", r1, 4096)
	h.reserve("c1", r2, 4096)
	v := val('u', 4096)
	expectCode(t, "unconfirmed end", h.endUnconfirmed("c1", "k", r1, v), api.OK)
	if ok, size := h.s.Exists("k"); !ok || size != 4096 {
		t.Fatalf("k after its unconfirmed end: exists %v, size %d", ok, size)
	}
	got, value := h.readable("k")
	if len(got) != 0 || !bytes.Equal(value, v) {
		t.Fatalf("reading k unconfirmed: %d replicas, %d bytes; want none and its value", len(got), len(value))
	}
	if info, _ := h.s.Query("k"); !info.Unconfirmed || len(info.Replicas) != 1 || info.Replicas[0].Status != api.ReplicaProcessing || info.Replicas[0].Addr != reps[0].Addr {
		t.Fatalf("the admin view of k unconfirmed: %+v", info)
	}
	b := h.apply(Entry{Op: OpBatch, Batch: []Entry{{Op: OpGrantLease, Key: "k"}}})
	if len(b.Batch[0].Replicas) != 0 || !bytes.Equal(b.Batch[0].Value, v) {
		t.Fatalf("a batch read of k unconfirmed: %d replicas, %d bytes", len(b.Batch[0].Replicas), len(b.Batch[0].Value))
	}
	if h.s.UnconfirmedPuts() != 1 || h.s.pinnedBytes != 4096 {
		t.Fatalf("%d unconfirmed puts, %d pinned bytes", h.s.UnconfirmedPuts(), h.s.pinnedBytes)
	}
	// Values put since fill the cache (4 x 4 KiB, one of them k's): k's stays.
	for _, x := range []string{"a", "b", "c", "d", "e"} {
		h.advance(time.Millisecond)
		h.putValue("holder", x, val(x[0], 4096), false)
	}
	checkValues(t, h.s)
	if _, value := h.readable("k"); !bytes.Equal(value, v) {
		t.Fatal("cache pressure dropped an unconfirmed put's value")
	}
	for _, s := range []*State{h.replayed(), h.snapshot()} {
		if s.Digest() != h.s.Digest() || s.UnconfirmedPuts() != 1 || s.pinnedBytes != 4096 {
			t.Fatalf("replay or snapshot: %d unconfirmed, %d pinned bytes, same digest %v", s.UnconfirmedPuts(), s.pinnedBytes, s.Digest() == h.s.Digest())
		}
		checkValues(t, s)
	}

	expectCode(t, "another client's confirmation", h.apply(Entry{Op: OpPutConfirm, ClientID: "c2", Keys: []string{"k"}}), api.OK)
	if h.s.UnconfirmedPuts() != 1 {
		t.Fatal("another client confirmed c1's put")
	}
	// The confirmation sent along with the next end (itself plain).
	expectCode(t, "end r2 with k's confirmation", h.apply(Entry{Op: OpPutEndReserved, ClientID: "c1", Key: "k2", Reserved: r2, Keys: []string{"k", "nope"}}), api.OK)
	got, value = h.readable("k")
	if len(got) != 1 || got[0].Addr != reps[0].Addr || got[0].Status != api.ReplicaComplete {
		t.Fatalf("k confirmed: replicas %+v, want its reservation's", got)
	}
	if h.s.UnconfirmedPuts() != 0 || h.s.pinnedBytes != 0 {
		t.Fatalf("after the confirmation: %d unconfirmed, %d pinned bytes", h.s.UnconfirmedPuts(), h.s.pinnedBytes)
	}
	if value != nil && !bytes.Equal(value, v) {
		t.Fatal("k's cached bytes changed at its confirmation")
	}
	checkValues(t, h.s)
	expectCode(t, "a repeated confirmation", h.apply(Entry{Op: OpPutConfirm, ClientID: "c1", Keys: []string{"k"}}), api.OK)
	expectCode(t, "a confirmation without a client", h.apply(Entry{Op: OpPutConfirm, Keys: []string{"k"}}), api.INVALID_PARAMS)
	if h.replayed().Digest() != h.s.Digest() || h.snapshot().Digest() != h.s.Digest() {
		t.Fatal("replay or snapshot differs after the confirmation")
	}
}

// TestUnconfirmedEndRefusalsChangeNothing: an unconfirmed end the cache cannot pin (no cache,
// a value not the object's size, pinned values at half the cache) is refused with
// REPLICA_IS_NOT_READY and leaves the reservation open for the plain end.
func TestUnconfirmedEndRefusalsChangeNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cache uint64
		v     []byte
	}{
		{"no cache", 0, val('x', 4096)},
		{"short value", 1 << 20, val('x', 4095)},
		{"no value", 1 << 20, nil},
		{"pinned at half the cache", 3 * 4096, val('x', 4096)}, // one pinned already
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.SmallValueCacheBytes = tc.cache })
			h.mount("holder", "s1", "h:1", 1<<20, 1<<20)
			h.reserve("c1", rname("c1", 1), 4096)
			h.reserve("c1", rname("c1", 2), 4096)
			if tc.cache == 3*4096 {
				expectCode(t, "the first", h.endUnconfirmed("c1", "first", rname("c1", 2), val('f', 4096)), api.OK)
			}
			digest := h.s.Digest()
			expectCode(t, tc.name, h.endUnconfirmed("c1", "k", rname("c1", 1), tc.v), api.REPLICA_IS_NOT_READY)
			h.s.applied-- // the entry itself counts
			if h.s.Digest() != digest {
				t.Fatal("a refused unconfirmed end changed the state")
			}
			expectCode(t, "the plain end", h.endReserved("c1", "k", rname("c1", 1), nil), api.OK)
			if got, _ := h.readable("k"); len(got) != 1 {
				t.Fatalf("k ended the plain way: %d replicas", len(got))
			}
		})
	}
}

// TestUnconfirmedPutsGoWithARevokeNotWithTheirClient: a put whose write failed is revoked by
// its client alone (its space freed, leased or not); an expired client's unconfirmed puts stay
// readable from their values, their replicas still never handed out, while its reservations
// go; removal takes unconfirmed puts like any other.
func TestUnconfirmedPutsGoWithARevokeNotWithTheirClient(t *testing.T) {
	h := newHarness(t)
	h.mount("holder", "s1", "h:1", 1<<20, 16<<20)
	for i := 1; i <= 4; i++ {
		h.reserve("c1", rname("c1", i), 4096)
	}
	used := h.s.used
	expectCode(t, "end a", h.endUnconfirmed("c1", "a", rname("c1", 1), val('a', 4096)), api.OK)
	expectCode(t, "end b", h.endUnconfirmed("c1", "b", rname("c1", 2), val('b', 4096)), api.OK)
	expectCode(t, "end c", h.endUnconfirmed("c1", "c", rname("c1", 3), val('c', 4096)), api.OK)
	h.readable("a") // leased
	expectCode(t, "another client's revoke", h.apply(Entry{Op: OpPutRevoke, ClientID: "c2", Key: "a"}), api.INVALID_WRITE)
	expectCode(t, "revoke a", h.apply(Entry{Op: OpPutRevoke, ClientID: "c1", Key: "a"}), api.OK)
	if ok, _ := h.s.Exists("a"); ok || h.s.used != used-alignUp(4096) {
		t.Fatalf("after a's revoke: exists %v, used %d (was %d)", ok, h.s.used, used)
	}
	expectCode(t, "remove b", h.apply(Entry{Op: OpRemove, Key: "b"}), api.OK)
	expectCode(t, "confirm a removed key", h.apply(Entry{Op: OpPutConfirm, ClientID: "c1", Keys: []string{"a", "b"}}), api.OK)
	expectCode(t, "expire c1", h.apply(Entry{Op: OpExpireClient, ClientID: "c1"}), api.OK)
	if ok, _ := h.s.Exists("c"); !ok || h.s.UnconfirmedPuts() != 1 || h.s.pinnedBytes != 4096 || h.s.used != alignUp(4096) { // its last reservation went
		t.Fatalf("after c1 expired: c exists %v, %d unconfirmed, %d pinned bytes, %d used", ok, h.s.UnconfirmedPuts(), h.s.pinnedBytes, h.s.used)
	}
	if reps, v := h.readable("c"); len(reps) != 0 || !bytes.Equal(v, val('c', 4096)) {
		t.Fatalf("c after its client expired: %d replicas handed out, %d bytes answered", len(reps), len(v))
	}
	checkValues(t, h.s)
	if h.replayed().Digest() != h.s.Digest() {
		t.Fatal("a replay differs")
	}
	// The client back under its id, confirming: c's replicas become readable.
	expectCode(t, "confirm c", h.apply(Entry{Op: OpPutConfirm, ClientID: "c1", Keys: []string{"c"}}), api.OK)
	if reps, _ := h.readable("c"); len(reps) != 1 || h.s.UnconfirmedPuts() != 0 || h.s.pinnedBytes != 0 {
		t.Fatalf("c confirmed after the expiry: %d replicas, %d unconfirmed, %d pinned bytes", len(reps), h.s.UnconfirmedPuts(), h.s.pinnedBytes)
	}
	expectCode(t, "remove c", h.apply(Entry{Op: OpRemove, Key: "c", Force: true}), api.OK) // leased by the reads above
	if h.s.used != 0 {
		t.Fatalf("%d bytes used after every key went", h.s.used)
	}
	checkValues(t, h.s)
	if h.replayed().Digest() != h.s.Digest() {
		t.Fatal("a replay differs")
	}
}

// TestUnconfirmedEntriesHaveTheirOwnLogType: entries that make or confirm unconfirmed puts are
// of a type the version before does not read.
func TestUnconfirmedEntriesHaveTheirOwnLogType(t *testing.T) {
	for _, e := range []Entry{
		{Op: OpPutEndReserved, ClientID: "c", Key: "k", Reserved: "r", Value: []byte{1}, Unconfirmed: true},
		{Op: OpPutEndReserved, ClientID: "c", Key: "k", Reserved: "r", Keys: []string{"j"}},
		{Op: OpPutConfirm, ClientID: "c", Keys: []string{"j"}},
	} {
		he, err := encodeEntry(9, e)
		if err != nil || he.Type != entryTypeJSONUnconfirmed {
			t.Fatalf("%+v encoded as type %d (%v), want %d", e, he.Type, err, entryTypeJSONUnconfirmed)
		}
		if back, err := decodeEntry(he); err != nil || !reflect.DeepEqual(back, e) {
			t.Fatalf("%+v decoded as %+v (%v)", e, back, err)
		}
	}
}

// TestUnconfirmedPutsStayOutOfTierMovesAndCopyClears: an unconfirmed object is never moved down
// a tier (its replicas may not hold it yet), replica_clear refuses it as still being written,
// and the unmount of a segment under it removes it.
func TestUnconfirmedPutsStayOutOfTierMovesAndCopyClears(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.RootFSDir = t.TempDir() })
	h.mount("holder", "s1", "h:1", 1<<20, 16<<20)
	h.reserve("c1", rname("c1", 1), 4096)
	expectCode(t, "end k", h.endUnconfirmed("c1", "k", rname("c1", 1), val('k', 4096)), api.OK)
	if h.s.canOffload(h.s.objects["k"]) {
		t.Fatal("an unconfirmed object may move to G3")
	}
	expectCode(t, "replica_clear", h.apply(Entry{Op: OpReplicaClear, ClientID: "c1", Key: "k"}), api.REPLICA_IS_NOT_READY)
	expectCode(t, "unmount s1", h.apply(Entry{Op: OpUnmountSegment, ClientID: "holder", SegmentID: "s1"}), api.OK)
	if ok, _ := h.s.Exists("k"); ok || h.s.UnconfirmedPuts() != 0 {
		t.Fatalf("after its segment went: k exists %v, %d unconfirmed", ok, h.s.UnconfirmedPuts())
	}
	checkValues(t, h.s)
}
