// Package client is the Mooncake Store client library: what MooncakeDistributedStore (Python),
// the mc_store_* C functions and mooncake_client are built on.
//
// A Client
//
//   - contributes a segment of global_segment_size bytes to the store: memory the transfer
//     engine allocates as shared memory (engine.AllocateShared, so same-host peers map it and
//     copy directly) and mounts on the master under the engine's segment name;
//   - keeps a staging buffer of local_buffer_size bytes, also engine-registered, split into
//     chunks, through which values that are not in registered memory travel to and from remote
//     segments over tcp;
//   - puts in two phases (PutStart on the master, write every replica through the engine,
//     PutEnd — or PutRevoke on any failure, so a failed or interrupted put is never visible;
//     except that a single small put through a reservation ends while its write is under way,
//     readable from the value the master holds until the write is confirmed, and revoked if the
//     write fails: a failed put of that kind may be read for a moment, with its own bytes) and
//     gets by asking the master for replicas (granting a lease) and reading the best one: the
//     local segment, then any same-host segment (a memcpy through MapRemote), then tcp;
//   - upserts the same way (the master swaps versions at PutEnd), reads byte ranges
//     (ranges.go), and mounts more segments than the first (segments.go: a mapped file or more
//     shared memory);
//   - reads ranges in sessions (ranges_snapshot.go: a Snapshot queries a set of keys once and
//     serves batches from those descriptors while the master's read lease holds, querying again
//     at half the lease; ranges_plan.go: RangeTemplate and RangePlan, geometry checked once and
//     reused by batches), with staging of objects that have no memory copy;
//   - moves ranges in transfer sessions (sessions.go: a get session reads ranges through one
//     query's replicas until its lease ends; a put session reserves an object, is filled by
//     ranged writes to every replica and ended or revoked);
//   - pings the master every second and re-mounts its segments when the master no longer lists
//     them (after a client_ttl expiry or a master restart);
//   - talks to the master through store/api with a per-call timeout, so a master that is down
//     gives a clear RPC_FAIL/RPC_TIMEOUT error, never a hang.
//
// Data calls are requests of items (an [Item] is a key and its value's memory in parts): [Client.Put]
// and [Client.Get] take any number of items with [PutOptions] (replication, upsert) or
// [GetOptions] (an allocator instead of the items' own buffers), and [Client.Exists] and
// [Client.Remove] any number of keys. One item takes the single-key master calls, several one
// batch call; each item gets its own error. A part lying in a buffer registered with
// [Client.RegisterBuffer] is transferred without staging (zero copy).
//
// Files: client.go (configuration, New), lifecycle.go (heartbeat, health, Close), buffers.go
// (registered buffers), transfer.go (moving bytes to and from a replica), transfer_many.go (the
// values of a batch moved together, one engine batch per segment), coalesce.go (concurrent single
// calls sharing master round trips), put.go, get.go and
// read.go (the data requests), smallvalue.go (small values sent with their PutEnd and read back
// from the master's answer, one round trip), reserve.go (puts started ahead, so that a single
// small put is the write and one master call), unconfirmed.go (a small put's write and master
// call overlapped, its write confirmed later), keys.go (exists, removal, tenant keys).
//
// The Client uses a transfer engine through the small [Engine] interface that *engine.Engine
// satisfies; in a process with the C library that is the process-wide engine. Every error is
// an *api.Error (errors.As) with a Mooncake code.
//
// This package must not import store/master.
package client
