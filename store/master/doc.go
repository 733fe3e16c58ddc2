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
// newly promoted leader gives every known client a fresh client_ttl of grace, counted from one
// discovery allowance after its takeover.
//
// # Failover without unmounting live clients
//
// A takeover must not cost a live client its segments (and every object on them) merely
// because the client had not found the new leader yet. Two ways were possible: clients that
// re-register (re-mount) when they reach the new leader, or a grace period. Re-registering
// comes too late: by the time an expired client re-mounts, its objects are already gone from
// the state, and the oplog has replicated that. So the new leader waits: a client it has not
// heard from counts as seen at takeover + discoveryAllowance (lease TTL + 4 s), and is expired
// only client_ttl after that. The allowance covers the time a live client needs to find the
// leader: a watch on the leader key (an etcd:// client, or a plain-address client that learned
// the cluster's HA discovery from ServiceStatus when it connected) sees the new view at once,
// or within a poll or a re-established watch (at most about a lease TTL); an attempt still
// stuck on the deposed leader gives up within 3 s (store/client's haAttemptTimeout); then the
// next heartbeat (every second) reaches the new leader. A client that really died keeps its
// segments that much longer after a failover (with the defaults 9 s + 10 s instead of 10 s),
// which costs nothing but space. Clients also re-mount any segment the master no longer lists
// in a Ping answer, so a client that was expired anyway (a network partition longer than the
// grace) comes back, empty.
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
//     first, or under eviction_policy=prefix chain tails first (evictpolicy.go; its indexes,
//     derived from the state: chains.go, and orphans.go for the G3 tier's order).
//
// Beyond Mooncake's: a PutEnd may carry a small value's bytes, which the master keeps beside the
// object within --small_value_cache_bytes and returns with GetReplicaList, so that such a get
// is one round trip (valuecache.go). A PutEndReserved completes a put a client started ahead
// under a reservation name (api.ReservationPrefix) as another key: the rename that makes a
// single small put two round trips (reserve.go). With Unconfirmed, that end comes while the
// client's write is under way: the key is read from its value alone until the client confirms
// the write (OpPutConfirm), so the write and the master call overlap (unconfirmed.go).
//
// This package must not import the store client or the transfer engine: the master moves no
// data (the value cache's bytes come and go inside the RPC messages).
package master
