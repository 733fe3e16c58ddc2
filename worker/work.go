package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrRunning is returned by Work.Wait when its timeout passed before the op finished.
var ErrRunning = errors.New("worker: op still running")

// Work is the handle of one submitted op.
type Work struct {
	op     string
	once   sync.Once
	done   chan struct{}
	err    error
	source int
	failed []int
	q      *Queue // the queue it was submitted to (nil: finished by someone else)

	ranHere atomic.Bool // RunHere ran it: its caller completes it, no notify
	mu      sync.Mutex  // guards notify against a concurrent finish
	notify  func()
}

// NewWork returns an unfinished handle for op (a name used in messages).
func NewWork(op string) *Work { return &Work{op: op, source: -1, done: make(chan struct{})} }

// RunHere runs the op on the calling goroutine when it is the next op of its queue and has
// not started, and reports whether it did; then it has finished. A caller about to wait for
// the op saves the hand-offs to the queue's goroutine and back (each costs more than a small
// collective takes; docs/performance.md). Ops still run one at a time in submission order.
func (w *Work) RunHere() bool {
	if w.q == nil || w.Completed() {
		return false
	}
	return w.q.runHere(w)
}

// Start hands an op from Queue.SubmitHeld to its queue's goroutine (a no-op for others).
func (w *Work) Start() {
	if w.q != nil {
		w.q.kick()
	}
}

// Op is the op's name.
func (w *Work) Op() string { return w.op }

// Finish completes the work with err (nil: success). Only the first call counts.
func (w *Work) Finish(err error) { w.FinishFrom(-1, err) }

// FinishFrom completes a receive from source rank src. A *Degraded err completes the work
// successfully with its failed ranks as the hint.
func (w *Work) FinishFrom(src int, err error) {
	first := false
	w.once.Do(func() {
		first = true
		var d *Degraded
		if errors.As(err, &d) {
			w.source, w.failed = src, append([]int(nil), d.Failed...)
		} else {
			w.err, w.source = err, src
			var fr interface{ FailedRanks() []int }
			if err != nil && errors.As(err, &fr) {
				w.failed = fr.FailedRanks()
			}
		}
		close(w.done)
	})
	if !first || w.ranHere.Load() {
		return
	}
	w.mu.Lock()
	fn := w.notify
	w.mu.Unlock()
	if fn != nil {
		fn()
	}
}

// OnFinish sets fn to run once when the op finishes (at once if it has), on the goroutine
// that finishes it, unless RunHere ran the op: its caller knows it finished. The torch shim
// wakes its completion thread this way instead of parking a thread in Wait per op.
func (w *Work) OnFinish(fn func()) {
	w.mu.Lock()
	if !w.Completed() { // a finish that closes done later reads notify after this
		w.notify = fn
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	if !w.ranHere.Load() {
		fn()
	}
}

// Degraded is what an op returns when it completed, but not with every rank it should have
// had: the result covers the survivors, Failed lists the others. The Work then succeeds and
// reports Failed as its failed-ranks hint (torch: get_local_success is False).
type Degraded struct{ Failed []int }

func (d *Degraded) Error() string {
	return fmt.Sprintf("completed without ranks %v", d.Failed)
}

// Done is closed when the op finished.
func (w *Work) Done() <-chan struct{} { return w.done }

// Completed reports whether the op finished.
func (w *Work) Completed() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// Err is the op's error (nil while running or on success).
func (w *Work) Err() error {
	if !w.Completed() {
		return nil
	}
	return w.err
}

// Source is the source rank of a finished receive (-1 otherwise).
func (w *Work) Source() int {
	if !w.Completed() {
		return -1
	}
	return w.source
}

// FailedRanks is the per-op failed-ranks hint (nil when none).
func (w *Work) FailedRanks() []int {
	if !w.Completed() {
		return nil
	}
	return w.failed
}

// Wait blocks until the op finished (its error) or d passed (ErrRunning); d < 0 waits for ever.
func (w *Work) Wait(d time.Duration) error {
	if d < 0 {
		<-w.done
		return w.err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.done:
		return w.err
	case <-t.C:
		return fmt.Errorf("%w: %s did not finish within %s", ErrRunning, w.op, d)
	}
}

// WaitContext blocks until the op finished or ctx ended.
func (w *Work) WaitContext(ctx context.Context) error {
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		return ctx.Err()
	}
}
