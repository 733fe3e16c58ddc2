package p2p

// A posted receive and its completion: Wait (which probes a silent peer while it waits),
// Cancel, and how a message lands in its buffer.

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Request is a posted receive.
type Request struct {
	e    *Endpoint
	peer int
	tag  uint64
	buf  []byte

	mu       sync.Mutex // guards writes into buf against cancel
	canceled bool
	into     func(dst, src []byte) // how a message lands in buf; nil: copied (PostReduce: reduced)

	// A chunk read from the network straight into buf (land.go), and the end of such reads.
	landing   atomic.Pointer[landing]
	withdrawn atomic.Bool

	once sync.Once
	done chan struct{}
	n    int
	src  int
	err  error
}

// Done is closed when the receive finished.
func (r *Request) Done() <-chan struct{} { return r.done }

// Result is the outcome of a finished receive: bytes received, source rank, error.
func (r *Request) Result() (n, src int, err error) {
	<-r.done
	return r.n, r.src, r.err
}

// finish completes the receive; a failed one first withdraws it (nothing is written into buf
// once its caller sees the error).
func (r *Request) finish(n, src int, err error) {
	if err != nil {
		r.withdraw()
	}
	r.once.Do(func() {
		r.n, r.src, r.err = n, src, err
		close(r.done)
	})
}

func (r *Request) copyIn(off int, b []byte) {
	r.mu.Lock()
	if !r.canceled && off <= len(r.buf) {
		r.put(r.buf[off:min(off+len(b), len(r.buf))], b)
	}
	r.mu.Unlock()
}

// put lands src (cut to len(dst)) in dst: a copy, or the receive's own function.
func (r *Request) put(dst, src []byte) {
	src = src[:len(dst)]
	if r.into != nil {
		r.into(dst, src)
		return
	}
	copy(dst, src)
}

func (r *Request) fillFrom(in *inbound) {
	defer r.e.freeParts(in)
	if in.total > len(r.buf) {
		r.finish(0, in.peer, tooLong(in.peer, in.tag, in.total, len(r.buf)))
		return
	}
	r.mu.Lock()
	ok := !r.canceled
	if ok {
		off := 0
		for _, b := range in.parts {
			r.put(r.buf[off:off+len(b)], b)
			off += len(b)
		}
	}
	r.mu.Unlock()
	if ok {
		r.finish(in.total, in.peer, nil)
	}
}

// cancel withdraws the receive: after it returns nothing more is written into its buffer.
func (r *Request) cancel(err error) {
	e := r.e
	e.mu.Lock()
	for i, p := range e.posted {
		if p == r {
			e.posted = append(e.posted[:i], e.posted[i+1:]...)
			break
		}
	}
	delete(e.inflight, r)
	e.mu.Unlock()
	r.finish(0, -1, err)
}

// withdraw stops writes into buf: a chunk being read into it from the network is waited for
// (interrupted after landingGrace: a sender that stopped half way), copies from the mailbox
// are stopped.
func (r *Request) withdraw() {
	r.withdrawn.Store(true)
	if l := r.landing.Load(); l != nil {
		t := time.NewTimer(landingGrace)
		select {
		case <-l.done:
		case <-t.C:
			l.interrupt()
			<-l.done
		}
		t.Stop()
	}
	r.mu.Lock()
	r.canceled = true
	r.mu.Unlock()
}

// Wait waits for the receive; when ctx ends first the receive is withdrawn.
func (r *Request) Wait(ctx context.Context) (n, src int, err error) {
	select {
	case <-r.done:
		return r.n, r.src, r.err
	default:
	}
	if r.peer < 0 || r.peer == r.e.rank {
		select {
		case <-r.done:
		case <-ctx.Done():
			r.cancel(ctx.Err())
		}
		return r.n, r.src, r.err
	}
	// A receive from one peer watches that peer's liveness while it waits.
	every := r.e.probeEvery
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-r.done:
			return r.n, r.src, r.err
		case <-ctx.Done():
			r.cancel(ctx.Err())
			return r.n, r.src, r.err
		case <-t.C:
			var last time.Time
			if err := r.e.probeIfSilent(ctx, r.peer, &last); err != nil {
				r.cancel(err)
				return r.n, r.src, r.err
			}
			t.Reset(every)
		}
	}
}

// Cancel withdraws the receive with err (if it has not finished).
func (r *Request) Cancel(err error) { r.cancel(err) }
