package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrClosed fails ops submitted to a closed queue.
var ErrClosed = errors.New("worker: the group was destroyed")

// ErrTimeout marks ops that exceeded the op timeout.
var ErrTimeout = errors.New("timed out")

// watchdogGrace is how long after its deadline an op that ignores its context is reported as
// timed out anyway.
const watchdogGrace = 2 * time.Second

type item struct {
	w  *Work
	fn func(ctx context.Context) error
}

// Queue runs ops one at a time in submission order.
type Queue struct {
	name    string
	timeout time.Duration

	mu      sync.Mutex
	items   []item // items[0] is running when running is set
	running bool
	closed  bool
	wake    chan struct{}
	done    chan struct{}
}

// NewQueue starts a queue whose ops each get timeout (<= 0: none). name prefixes errors.
func NewQueue(name string, timeout time.Duration) *Queue {
	q := &Queue{name: name, timeout: timeout, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go q.run()
	return q
}

// Timeout is the per-op timeout.
func (q *Queue) Timeout() time.Duration { return q.timeout }

// Submit queues fn as op and returns its handle at once. fn runs after every op submitted
// before it finished; it gets a context carrying the op timeout.
func (q *Queue) Submit(op string, fn func(ctx context.Context) error) *Work {
	return q.submit(op, fn, true)
}

// SubmitHeld is Submit for a caller that starts the op itself: the queue's goroutine is not
// woken for it. Work.RunHere runs it on the caller (a synchronous op: no hand-off to another
// thread and back), Work.Start hands it to the queue. The queue's goroutine still runs it if
// it is awake anyway (an op queued behind others runs in its turn), so who runs a held op is a
// matter of speed, never of correctness.
func (q *Queue) SubmitHeld(op string, fn func(ctx context.Context) error) *Work {
	return q.submit(op, fn, false)
}

func (q *Queue) submit(op string, fn func(ctx context.Context) error, wake bool) *Work {
	w := NewWork(op)
	w.q = q
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		w.Finish(fmt.Errorf("%s: %w", op, ErrClosed))
		return w
	}
	q.items = append(q.items, item{w, fn})
	q.mu.Unlock()
	if wake {
		q.kick()
	}
	return w
}

// kick wakes the queue's goroutine.
func (q *Queue) kick() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Pending is the number of ops queued or running.
func (q *Queue) Pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// Close stops accepting ops and waits until the queued ones finished (each is bounded by the
// op timeout).
func (q *Queue) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.kick()
	<-q.done
}

func (q *Queue) run() {
	defer close(q.done)
	for {
		q.mu.Lock()
		if len(q.items) == 0 || q.running {
			closed := q.closed && len(q.items) == 0
			q.mu.Unlock()
			if closed {
				return
			}
			<-q.wake
			continue
		}
		it := q.items[0]
		q.running = true
		q.mu.Unlock()
		q.exec(it)
		q.pop()
	}
}

// pop removes the op that ran and lets the run loop go on.
func (q *Queue) pop() {
	q.mu.Lock()
	q.items[0] = item{}
	q.items = q.items[1:]
	q.running = false
	more := len(q.items) > 0
	q.mu.Unlock()
	if more {
		q.kick() // ops queued behind a RunHere op (the run loop itself would loop anyway)
	}
}

// runHere runs w on the calling goroutine if it is next in line and has not started; see
// Work.RunHere.
func (q *Queue) runHere(w *Work) bool {
	q.mu.Lock()
	if q.running || len(q.items) == 0 || q.items[0].w != w {
		q.mu.Unlock()
		return false
	}
	it := q.items[0]
	q.running = true
	q.mu.Unlock()
	w.ranHere.Store(true)
	q.exec(it)
	q.pop()
	return true
}

func (q *Queue) exec(it item) {
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	var dog *time.Timer
	if q.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, q.timeout)
		dog = time.AfterFunc(q.timeout+watchdogGrace, func() {
			it.w.Finish(fmt.Errorf("%s: %s did not finish within %s: %w", q.name, it.w.op, q.timeout, ErrTimeout))
		})
	}
	err := run(ctx, it.fn)
	if dog != nil {
		dog.Stop()
	}
	if err != nil && errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrTimeout) && ctx.Err() != nil {
		err = fmt.Errorf("%s: %s timed out after %s: %w", q.name, it.w.op, q.timeout, errors.Join(ErrTimeout, err))
	}
	cancel()
	it.w.Finish(err)
}

// run calls fn, turning a panic into an error so one bad op cannot kill the process.
func run(ctx context.Context, fn func(ctx context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("internal error: %v", r)
		}
	}()
	return fn(ctx)
}
