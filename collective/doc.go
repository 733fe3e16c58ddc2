// Package collective is the group and its collective algorithms: broadcast, all_reduce,
// reduce, all_gather, gather, scatter, reduce_scatter, all_to_all and barrier, written once
// against a small transport interface (Conn) the way gloo writes its algorithms against a
// Pair. The p2p package implements Conn over transfer-engine writes; MemNetwork implements it
// in memory for tests.
//
// # Group
//
// A Group has a rank, a size, a fixed slot count (max group size), an active-rank mask and an
// epoch. Ops run over the active members in rank order; every op gets the next sequence number,
// and all its messages carry tags in the op's own tag space (see Tag), so ops never mix and a
// late message of one op is never taken by another. A Group runs one op at a time: callers
// (the worker package) submit ops in the same order on every rank.
//
// # Validation, errors, aborts
//
// Every op starts by exchanging a small header {op, seq, dtype, reduce op, count, root, extra}
// with every member. Each rank then holds every rank's header and checks them the same way, so
// a mismatch (different op, dtype, size, root, all_to_all split sizes) fails the op on all
// ranks with the same error, e.g. "all_reduce: rank 1 has 20 float32 elements, rank 0 has 10".
// The header exchange doubles as the barrier.
//
// An op that fails on one rank (timeout, transfer failure) calls Conn.Abort for its tag space:
// every member's pending and later receives in that space fail at once with an AbortError, so
// a failure never leaves the other ranks hanging until their own timeout. Errors that involve a
// peer are PeerErrors naming the op, the local rank and the peer; FailedRanks gives the
// per-op failed-ranks hint.
//
// # Algorithms
//
// Small messages (at most Options.SmallBytes): latency-optimal exchanges — recursive doubling
// all_reduce (with the usual fold for non-powers of two), binomial-tree broadcast and reduce,
// direct all_gather and reduce_scatter. Large messages: ring reduce-scatter + all-gather in
// chunks of Options.ChunkBytes, where the reduction of one chunk overlaps the transfer of the
// next (a sender goroutine streams chunks as the receiving loop makes them ready), and a
// pipelined chain for broadcast. gather, scatter and all_to_all are direct. Results are
// identical on every rank (each element is reduced once, then copied). AVG is SUM followed by
// reduce.Divide; the reductions themselves are collective/reduce's kernels.
//
// This package does not own the transport (p2p), the op queue or timeouts (worker), the
// membership protocol, or the reduction kernels (collective/reduce).
package collective
