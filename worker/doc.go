// Package worker runs a group's ops: an ordered Queue that executes submitted ops one at a
// time, in submission order, on its own goroutine (so every rank issues its collectives to
// the transport in the same order), and Work, the handle the caller holds: a Done channel,
// the error, the source rank of a receive and the failed-ranks hint.
//
// Who runs an op: normally the queue's goroutine. A caller that is about to wait can take the
// op itself (Queue.SubmitHeld, then Work.RunHere on the caller, or Work.Start to hand it to the
// queue): the torch shim runs synchronous ops on the thread that called it, because on a small
// VM each thread hand-off (to the queue's goroutine and back through a completion thread) costs
// tens of microseconds, more than a small collective. Order is unchanged: RunHere only takes an
// op that is next in line and not running. Work.OnFinish tells the shim's completion thread that
// an op it did not run finished, so that thread sleeps instead of parking in Wait per op.
//
// Timeouts: every op runs under a context with the queue's op timeout. Ops (the collective
// algorithms, p2p) honour it and fail with an error that names the peer that did not answer.
// As a last resort a watchdog finishes the Work with a timeout error shortly after the deadline
// even if the op has not returned, so a waiter never hangs; the queue itself stays ordered
// behind the op.
//
// This package knows nothing about collectives or transports; errors that carry a per-op
// failed-ranks hint implement interface{ FailedRanks() []int }.
package worker
