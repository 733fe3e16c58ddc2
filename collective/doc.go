// Package collective is the group and its collective algorithms: broadcast, all_reduce,
// reduce, all_gather, gather, scatter, reduce_scatter, all_to_all and barrier, written once
// against a small transport interface (Conn) the way gloo writes its algorithms against a
// Pair. The p2p package implements Conn over transfer-engine writes; MemNetwork implements it
// in memory for tests.
//
// # Group
//
// A Group has a rank, a size, a fixed count of rank slots (max group size), an active-rank mask
// and an epoch. Ops run over the active members in rank order; every op gets the next sequence
// number, and all its messages carry tags in the op's own tag space (package wire's layout), so
// ops never mix and a late message of one op is never taken by another. A Group runs one op at a time: callers
// (the worker package) submit ops in the same order on every rank.
//
// # Validation, errors, aborts
//
// Every op starts by exchanging a small header {op, seq, dtype, reduce op, count, root, extra}
// with every member. Each rank then holds every rank's header and checks them the same way, so
// a mismatch (different op, dtype, size, root, all_to_all split sizes) fails the op on all
// ranks with the same error, e.g. "all_reduce: rank 1 has 20 float32 elements, rank 0 has 10".
// The header exchange doubles as the barrier. Ops whose outputs are not their inputs
// (all_gather, all_to_all, reduce_scatter, gather, scatter) do not wait for it: they post their receives and send their data
// right after their header (Group.announce) and check the members' headers while the data
// moves (opState.collect), a round trip less; none returns success before the check, and a
// failed check drops the op's messages on every rank (opState.finish: an argument
// mismatch sends no abort, so each rank drops them itself). Their outputs then hold whatever
// arrived, as after any failed op. all_reduce above Options.FusedBytes, in place, sends its first
// data (which only reads its buffer) before the check too and writes into the buffer only after
// it; broadcast and reduce wait for the check. So a mismatch never touches an in-place op's
// buffer.
// Every op that took a sequence number ends through opState.finish, its empty cases too, so
// that each success makes the fencing commit (fence.go).
//
// An op that fails on one rank (timeout, transfer failure) calls Conn.Abort for its tag space:
// every member's pending and later receives in that space fail at once with a
// wire.AbortError, so a failure never leaves the other ranks hanging until their own timeout. Errors that involve a
// peer are PeerErrors naming the op, the local rank and the peer; FailedRanks gives the
// per-op failed-ranks hint.
//
// # Algorithms
//
// Small messages (at most Options.SmallBytes): latency-optimal exchanges — recursive doubling
// all_reduce (with the usual fold for non-powers of two), binomial-tree broadcast and reduce,
// direct all_gather and reduce_scatter. An all_reduce of at most Options.FusedBytes (16 KiB)
// among at most 8 members is fused with its header: every rank's input rides in its header
// message, and after that single exchange each rank reduces all inputs in member order (one
// message per peer and one round instead of a header round plus log2(n) rounds; over tcp that
// halved the latency of an 8-byte all_reduce). Between two members an all_reduce of at most
// Options.PairBytes (512 KiB) is one exchange of whole buffers, the receive posted before the
// send: as many bytes as the ring moves, in one dependent step instead of two. Large messages:
// ring reduce-scatter + all-gather in chunks of Options.ChunkBytes, where the reduction of one
// chunk overlaps the transfer of the next (a sender goroutine streams chunks as the receiving
// loop makes them ready), and a pipelined chain for broadcast. The ring posts its next three
// receives ahead when the Conn is a Poster (p2p), so chunks that arrive early land in their
// buffers instead of being set aside and copied again; all-gather chunks are received straight
// into the output. An in-place all_reduce that a caller may rerun (AllReduceOrRestore) saves
// each chunk just before the ring first overwrites it and puts those back if the op fails.
// gather, scatter and all_to_all are direct. Results are identical on every rank (the ring
// reduces each element once, then copies it; the exchanges combine the same two operands on
// both sides of a pair, and a two-operand reduction commutes exactly). AVG is SUM followed by
// reduce.Divide; the reductions themselves are collective/reduce's kernels.
//
// # Same-host fast path (shm.go, shm_ops.go)
//
// When every member runs on one host, EnableSharedMemory (a collective call right after
// NewGroup; capi makes it for every process group unless MC_PG_SHM=0) gives each rank one
// shared "arena" (SharedMemory.Alloc: an engine memfd buffer) and maps every peer's arena once
// (SharedMemory.Map: engine.MapRemotePinned, a view that stays mapped until released even if
// the peer dies). Ranks agree over Conn whether every mapping worked, so either all ranks take
// the fast path or none does; other hosts, another network namespace or MC_FORCE_TCP=1 keep
// the Conn (p2p) path. An arena holds control words on separate cache lines (step counter,
// sleep flag, futex "bell", abort record), two op headers and two data halves of
// SharedOptions.CopyBytes (MC_PG_SHM_COPY_CHUNK, default 2 MiB). Reductions pipeline in units
// of SharedOptions.ChunkBytes (MC_PG_SHM_CHUNK, default 256 KiB: stages that stay in cache);
// ops that only copy take rounds of a quarter of their size, from ChunkBytes up to CopyBytes
// (fewer rounds, fewer barriers, which matters most when ranks share cores; figures in
// docs/performance.md).
//
// Every op is a fixed sequence of rounds, the same on every rank. In a round a rank writes
// into its own arena's current half, then sync: it bumps its step counter (waking peers that
// sleep) and waits until every member's counter reached it; then it reads peers' halves of that
// round directly (single copy). Halves alternate by round, and a rank posts round r+1 only after
// its reads of round r, so nobody overwrites data a peer still reads and nothing is ever reset
// (counters only grow, compared modulo 2^32). Waiting polls for SharedOptions.Spin (20 µs,
// 2 µs when ranks outnumber CPUs; sched_yield between polls), then sleeps on the futex bell:
// ranks may outnumber cores and nothing burns one. Polls do not call runtime.Gosched (except
// when the ranks are goroutines of one process, in tests): the op may run on a C thread that
// called into Go, where each Gosched costs two thread hand-offs.
//
// Algorithms: all_reduce/reduce up to SmallBytes: one round, every rank publishes its input and
// reduces all inputs in member order with reduce.ReduceMany (bit-identical on every rank).
// Larger: a pipeline with one round per chunk: in round r a rank copies out the reduced slices
// of chunk r-2, reduces its slice of chunk r-1 (its own input in place plus the peers'
// published slices, one ReduceMany pass reading their arenas) into its arena, and publishes the
// slices of chunk r the others reduce. AllReduceOrRestore (what capi uses, so that a failed op
// can be rerun over the survivors) also copies chunk r into a save buffer in round r, with
// non-temporal stores, and restores the overwritten prefix if the op fails. That is cheaper than
// a copy of the whole input up front, though dearer than no save at all
// (MOONCAKE_PG_FT_INPUT_COPY=0): a large all_reduce is memory-bandwidth bound, and the save
// adds a third of its memory traffic (figures in docs/performance.md). broadcast, all_gather, gather: the writer copies a
// round's bytes into its arena, readers copy them straight into their outputs. scatter,
// reduce_scatter, all_to_all: ChunkBytes is cut into one part per member (larger rounds did not
// help all_to_all: it is bound by its two copies). barrier is one round.
//
// Validation rides along: the first round of every op carries its header in the arena, and
// after that round's sync every rank checks every member's header exactly as the Conn path
// does, before it reads any data, so mismatches fail on all ranks with the same MismatchError
// and the rounds stay in lockstep. A wait past the op deadline fails with a PeerError naming
// every member that did not arrive (FailedRanks: all of them). Any other failure is recorded
// in the failing rank's arena (reason and failed-ranks hint) and wakes the peers, whose waits
// fail at once with that wire.AbortError; the group then leaves the fast path for good and
// later ops use Conn. The hot path does not allocate.
//
// # Fencing (fence.go)
//
// Every arena also holds an outcome word: a rank commits each op with a compare-and-swap before
// it reports success, and a peer that gives up on it in that op (dead, or past the deadline)
// fences it with a compare-and-swap first, so a rank frozen while the others went on can never
// complete that op from the contributions still in their arenas: it fails with a FencedError.
// The words outlive the fast path (the Conn path of the same ranks uses them too).
//
// # Membership
//
// SetMembership installs a view (the number of membership decisions applied, the epoch, the
// active mask, and active ranks that ops leave out); every op header carries the number of
// decisions, so members with different views fail the op with a MismatchError{Membership: true}
// (which, unlike an argument mismatch, aborts the op on every member: they disagree on who the
// members are). A view change ends the fast path. While the fast path waits on a silent peer it
// asks the Conn (LivenessChecker) whether the peer is alive, so a dead peer fails the op at once
// with a PeerError wrapping wire.ErrPeerDead.
//
// This package does not own the transport (p2p), the op queue or timeouts (worker), the
// membership protocol (package pg: the decision log), or the reduction kernels
// (collective/reduce).
package collective
