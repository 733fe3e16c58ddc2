// Package engine is the transfer engine: one-sided READ and WRITE of registered memory
// between processes and hosts, by segment name, in batches (Mooncake's TransferEngine).
//
// It owns:
//
//   - the local segment: one per Engine, named by Config.LocalServerName (host:rpc_port
//     with P2PHANDSHAKE), holding the buffers registered with RegisterLocalMemory or made by
//     AllocateShared. Zero-length registrations fail with ErrInvalidArgument (-1), overlaps
//     with ErrAddressOverlapped (-7), unknown addresses with ErrAddressNotRegistered (-3).
//     The descriptor (transport.SegmentDescriptor, Mooncake's JSON) is republished to the
//     metadata store, when there is one, on every change; P2P peers ask the listener.
//   - remote segments: OpenSegment resolves a name (the peer's listener address with
//     P2PHANDSHAKE; otherwise mooncake/[cluster/]rpc_meta/<name> and
//     mooncake/[cluster/]ram/<name> in the store, see keys.go) and caches the descriptor,
//     refetching it when a request falls outside it or after a failure.
//   - batches: AllocateBatchID, SubmitTransfer (all-or-nothing validation: local range inside
//     a local buffer, target range inside a target buffer), GetTransferStatus,
//     GetBatchStatus, WaitBatch (blocks on a channel, never spins), FreeBatchID (busy while
//     tasks run), TransferSync, and notifications (SubmitTransferWithNotify, SendNotify,
//     GetNotifies, ProbePeer).
//   - transport selection, per request, from the target's descriptor: the local segment is
//     a memcpy; a target on the same host (HostID: boot id + network namespace) whose range
//     lies in a shared buffer goes through engine/transport/shm (a memcpy into a mapping of
//     the peer's memfd); everything else (plain registered memory, another host, or
//     MC_FORCE_TCP=1) goes through engine/transport/tcp. Protocols this build cannot drive
//     (rdma, nvlink, cxl, efa, ...) and device-memory locations ("cuda:N", "npu:N", ...) fail
//     with ErrNotSupported, worded with what the host has (hardware.go: "it needs an RDMA NIC
//     and this host has none (/sys/class/infiniband lists none)", or "this host has ..., but
//     this build has no rdma transport yet").
//
// Mapping peers' memory. MapRemote returns a view of a same-host peer's shared buffer that
// lasts while the peer lives; MapRemotePinned returns one with a release function that stays
// mapped until released, even when the shm transport finds the peer dead and forgets it, the
// owner frees the buffer (LocalSegment) or the engine closes: a dead peer's memfd pages stay
// valid while mapped, so a held view never faults. The collective fast path keeps its views of
// peers' arenas this way.
//
// Ordering and signal words. The requests of one batch to one target run in one "target
// worker": a goroutine that applies them in submission order (across SubmitTransfer calls,
// too), and stops applying (marks FAILED) the rest once one fails. A WRITE of exactly 4 bytes to a
// 4-aligned address wakes futex waiters on that word after the bytes land (shm: the
// initiator wakes through its mapping; tcp: the server wakes after applying the write, and
// also signals the word's WatchWord channel, if a goroutine of this process watches it). So
// a batch [data..., signal] makes the signal visible only after the data. Different target
// workers run in parallel.
//
// Write streams. OpenStream gives an ordered channel of WRITEs to one segment (Stream): its
// Writes apply in order; over tcp it owns a connection whose frames are all quiet (the server
// answers only failures), so a Write returns once its bytes are in the socket, without a round
// trip, and a failure reported later breaks the stream (the next Write returns it). Same-host
// and local targets are written before Write returns. p2p sends its mailbox cells and credits this way.
//
// Landing zones. LandOn lets the owner of registered memory redirect the payload of a large
// WRITE that arrives over tcp into that memory: its hook, run on the server goroutine before
// the payload is read, may name another buffer of this process, and the bytes go from the
// socket straight there (p2p: a mailbox cell's payload into the receive it is for, one copy
// less). The hook can also interrupt the read, which drops the connection.
//
// Timeouts. Every run of requests has a deadline of Config.TransferTimeout (default 30 s;
// MC_TRANSFER_TIMEOUT) plus 1 ns per byte; a dead or silent peer gives
// FAILED or TIMEOUT, never a hang. Close stops the listener and waits for its goroutines.
//
// Authentication (auth.go, docs/security.md). With a token (Config.AuthToken, MC_AUTH_TOKEN)
// every connection, in and out, proves it with package auth's handshake before its first
// frame; groups sharing the engine add tokens of their own (AddToken) that guard their shared
// buffers (AllocateSharedGuarded) and are proved to the segments they open (OpenSegmentAuth).
//
// Configuration: the package reads no environment. Config's fields carry the knobs
// MC_FORCE_TCP, MC_TCP_BIND_ADDRESS, MC_HANDSHAKE_PORT, MC_MIN_RPC_PORT, MC_MAX_RPC_PORT,
// MC_TRANSFER_TIMEOUT, MC_SLICE_SIZE (tcp chunk size, at least 8 MiB), MC_TCP_SOCKET_BUFFER
// (SO_SNDBUF/SO_RCVBUF, default: kernel autotuning), MC_METADATA_SERVER,
// MC_METADATA_CLUSTER_ID, MC_CUSTOM_TOPO_JSON, the Redis ones and MC_AUTH_TOKEN(_FILE); capi/ and cmd/ fill them
// with config.Engine when an engine is created.
//
// The engine never touches metadata store implementations (engine/metadata) beyond the Store
// interface and Open, and never imports the packages built on it (p2p, collective, store).
package engine
