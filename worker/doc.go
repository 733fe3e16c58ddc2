// Package worker runs a group's ops: an ordered Queue that executes submitted ops one at a
// time, in submission order, on its own goroutine (so every rank issues its collectives to
// the transport in the same order), and Work, the handle the caller holds: a Done channel,
// the error, the source rank of a receive and the failed-ranks hint.
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
