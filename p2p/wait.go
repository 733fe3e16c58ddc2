package p2p

// How goroutines of the endpoint sleep: spin briefly, then futex-wait on the word, or park in
// the Go scheduler on the fabric's WordWatcher channel when the word's writers are all reached
// over the network (their writes come through this process's tcp server).

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/internal/futex"
)

// park waits in the Go scheduler (timer t reused) for a token on sig, for other (nil: none), for
// Close, or for d to pass. Its callers recheck their condition after it returns.
func (e *Endpoint) park(t *time.Timer, d time.Duration, sig, other <-chan struct{}) {
	t.Reset(d)
	select {
	case <-sig:
	case <-other:
	case <-t.C:
	case <-e.closed:
	}
	t.Stop()
}

// wake wakes the progress goroutine however it sleeps.
func (e *Endpoint) wake() {
	futex.Wake(e.bell, 1)
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// waitWord waits until cond() holds; word is the 32-bit word whose change makes it true.
// It spins a little, then futex-waits in short slices, watching ctx and Close. With sig (the
// word's WatchWord channel) it parks on sig instead while net() holds (the word's writer is
// reached over the network, so its writes come through this process's tcp server).
//
// Over the network (sig set and net() true) it does not yield while it spins: the word changes
// only after a round trip through our tcp server, far longer than the spin, and on the thread
// of a cgo call (the torch shim runs ops on its caller's thread, locked to it) every
// runtime.Gosched costs two thread hand-offs; it parks at once instead.
func (e *Endpoint) waitWord(ctx context.Context, word *uint32, cond func() bool, peer int, sig <-chan struct{}, net func() bool) error {
	yield := !(sig != nil && net())
	for i := 0; i < 64; i++ {
		if cond() {
			return nil
		}
		if i > 16 {
			if !yield {
				break
			}
			runtime.Gosched()
		}
	}
	lastProbe := time.Now()
	park := time.NewTimer(time.Hour)
	defer park.Stop()
	for {
		v := atomic.LoadUint32(word)
		if cond() {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if e.isClosed() {
			return ErrClosed
		}
		if peer >= 0 {
			if err := e.probeIfSilent(ctx, peer, &lastProbe); err != nil {
				return err
			}
		}
		d := 10 * time.Millisecond
		if dl, ok := ctx.Deadline(); ok {
			if left := time.Until(dl); left < d {
				d = max(left, time.Microsecond)
			}
		}
		if sig != nil && net() {
			e.park(park, d, sig, ctx.Done())
			continue
		}
		futex.Wait(word, v, d)
	}
}
