package client

import (
	"context"
	"sync"
)

// Single-key master calls from concurrent goroutines (threads of a serving process, each getting
// or putting one key) go together: while parallel calls of a kind are in flight, later ones of
// that kind wait, and when one returns the first of them sends all those waiting as one batch
// call (BatchGetReplicaList for GetReplicaList, BatchPutEnd for PutEnd). Up to parallel
// callers make their single calls at once, each on a socket of its own; callers beyond that,
// which would have queued behind each other on the master's state lock, share a round trip
// instead. Each caller gets its own key's result.
//
// How many single calls fly before batching is the client's SingleCallsInFlight. A batch
// costs each waiter a hand-off from its leader: cheap between goroutines, an OS thread's
// wake-up for a caller that is a thread of its own (a Python or Rust thread calling through
// the C ABI, which sets ForeignThreadCalls). Measured 2026-12-06 on a 2-core host, alternated
// in one run: 4 Python threads sharing a client, single 4 KiB gets 7.2-7.9k op/s batching
// behind one call, 12.5-16.1k with ForeignThreadCalls (puts alike either way); 16 goroutines
// of one Go client (BenchmarkConcurrentGets, in-process master) 26-43 µs a get batching behind
// one call, 50-79 µs with 4 in flight.

// ForeignThreadCalls is Config.SingleCallsInFlight for callers that are threads of their own.
const ForeignThreadCalls = 4

// coalescer runs the calls of one kind, each for a key and an argument of type A (what the
// call carries for that key besides its name); the zero value is ready (one call in flight at
// most).
type coalescer[A, R any] struct {
	parallel int // single calls in flight at most (0: 1)

	mu     sync.Mutex
	flying int // calls of this kind in flight
	queue  []*waiter[A, R]
}

type waiter[A, R any] struct {
	key  string
	arg  A
	lead chan []*waiter[A, R] // the batch this waiter is to send, when it is its turn
	done chan struct{}        // closed once res and err are set
	res  R
	err  error
}

// do returns key's result: one(ctx, key, arg) when fewer than parallel calls of this kind are
// in flight, else the key's part of a batch call many(keys, args) (len(keys) > 1) or one call,
// made by whichever waiter leads the next batch. Waiting is bounded by the in-flight call and
// the batch call, both bounded by the RPC timeout; a batch call runs without its leader's
// cancellation, for the others.
func (co *coalescer[A, R]) do(ctx context.Context, key string, arg A, one func(context.Context, string, A) (R, error),
	many func(context.Context, []string, []A) ([]R, []error)) (R, error) {
	co.mu.Lock()
	if co.flying < max(co.parallel, 1) {
		co.flying++
		co.mu.Unlock()
		res, err := one(ctx, key, arg)
		co.handOff()
		return res, err
	}
	w := &waiter[A, R]{key: key, arg: arg, lead: make(chan []*waiter[A, R], 1), done: make(chan struct{})}
	co.queue = append(co.queue, w)
	co.mu.Unlock()
	select {
	case batch := <-w.lead:
		co.run(context.WithoutCancel(ctx), batch, one, many)
		co.handOff()
	case <-w.done:
	}
	return w.res, w.err
}

// handOff ends a call: the waiters queued meanwhile become the next batch, led by the first
// (which takes the ended call's place in flight).
func (co *coalescer[A, R]) handOff() {
	co.mu.Lock()
	batch := co.queue
	co.queue = nil
	if len(batch) == 0 {
		co.flying--
	}
	co.mu.Unlock()
	if len(batch) > 0 {
		batch[0].lead <- batch
	}
}

// run makes the call for batch and gives every waiter its result.
func (co *coalescer[A, R]) run(ctx context.Context, batch []*waiter[A, R], one func(context.Context, string, A) (R, error),
	many func(context.Context, []string, []A) ([]R, []error)) {
	if len(batch) == 1 {
		batch[0].res, batch[0].err = one(ctx, batch[0].key, batch[0].arg)
		close(batch[0].done)
		return
	}
	keys := make([]string, len(batch))
	args := make([]A, len(batch))
	for i, w := range batch {
		keys[i], args[i] = w.key, w.arg
	}
	res, errs := many(ctx, keys, args)
	for i, w := range batch {
		w.res, w.err = res[i], errs[i]
		close(w.done)
	}
}
