// Package master is mooncake_master: the metadata-only service of Mooncake Store.
//
// # Shape
//
// The metadata — mounted segments (each with a deterministic range allocator over
// [base, base+size)), objects (key, size, replicas, lease deadline, soft/hard pin, last access)
// and clients — lives in a [State]. A State changes only through [State.Apply], which takes one
// [Entry] and returns a [Result]. An Entry carries everything the change depends on, including
// the time (Entry.Now) and the seed of any random choice (Entry.Seed), and Apply reads no clock,
// no randomness and does no I/O. So the same entries applied in the same order to the same
// starting state yield the same state and results: the serving master applies what it
// proposes, a hot standby applies what it receives from the operation log, a restore applies
// what a snapshot holds — one code path, tested without any network (state_test.go), in the
// style of etcd's raft package.
//
// Around it, [Server] does the I/O: gRPC (store/api), client liveness, timers and metrics. It
// turns each RPC into an Entry, stamps Now/Seed, applies it under one mutex and (when a [Log]
// is installed — the HA feature) appends it to the log before answering. Client liveness
// (last ping per client) is deliberately outside the state: pings would flood the log. When a
// client is silent for longer than client_ttl the server proposes an expire_client entry; a
// newly promoted leader gives every known client a fresh client_ttl of grace.
//
// # Semantics (Mooncake's)
//
//   - Put is two-phase: put_start allocates replica_num replicas on distinct segments (distinct
//     engines first), all or nothing (NO_AVAILABLE_HANDLE), running eviction passes when space
//     is short; the client writes the bytes through the transfer engine; put_end makes the key
//     visible; put_revoke undoes. A put of a key that is already complete answers
//     OBJECT_ALREADY_EXISTS, which clients treat as success (write-once). An unfinished put may
//     be pre-empted after put_start_discard_timeout (30 s) and is reclaimed after
//     put_start_release_timeout (600 s), or at once when its client expires.
//   - An upsert (put_start with Entry.Upsert) inserts or replaces: the new version is written
//     beside the readable old one (it waits in pending, out of objects) and put_end swaps them;
//     the old version's memory is freed at once, or when the readers' lease ends (upsert.go).
//     A put_start may carry its own soft-pin TTL, and on an upsert keep (PRESERVE) or drop
//     (DISABLE) the old version's pin.
//   - replica_clear drops a key's copies on one segment (or the whole object) for the client
//     that wrote it, when no reader holds a lease (upstream's BatchReplicaClear).
//   - A get (grant_lease) returns the replicas and extends the lease to now+default_kv_lease_ttl.
//     Leased objects are neither evicted nor removed without force (OBJECT_HAS_LEASE).
//   - Hard-pinned objects are never evicted and are removed only by force or remove_all.
//     Soft pins last default_kv_soft_pin_ttl (or the put's own TTL) from put_end (capped by max_kv_soft_pin_ttl), are not
//     extended by reads, and soft-pinned objects are evicted last and only when
//     allow_evict_soft_pinned_objects.
//   - Eviction runs above eviction_high_watermark_ratio (a tick entry) and when an allocation
//     fails; each pass evicts ceil(eviction_ratio × evictable) objects, least recently used
//     first.
//
// This package must not import the store client or the transfer engine: the master never
// touches data.
package master
