package transport

import (
	"context"
	"errors"
)

// ErrPeerGone is wrapped by transports when the target process is known to be dead.
var ErrPeerGone = errors.New("peer process is gone")

// Request is one one-sided operation inside a run.
type Request struct {
	Write  bool    // true: local -> remote (WRITE); false: remote -> local (READ)
	Local  uintptr // local address (source of a WRITE, destination of a READ)
	Remote uint64  // absolute virtual address in the target process
	Length uint64
}

// IsSignal reports whether r is a signal-word write: exactly 4 bytes to a 4-aligned address.
// The transport wakes futex waiters on that word once the bytes are in place.
func (r *Request) IsSignal() bool {
	return r.Write && r.Length == 4 && r.Remote%4 == 0
}

// Reporter receives progress of a run. i indexes the run's request slice. Done is called
// exactly once per request (err nil on success); Progress may be called any number of times
// before it with the number of additional bytes that landed.
type Reporter interface {
	Progress(i int, n uint64)
	Done(i int, err error)
}

// Target is what a transport needs to reach one remote segment.
type Target struct {
	Desc *SegmentDescriptor // the descriptor the engine validated the requests against
	Addr string             // "host:port" of the peer's listener
}

// Transport moves bytes to and from one kind of peer.
type Transport interface {
	// Name is a short name for logs and errors ("tcp", "shm").
	Name() string
	// Execute applies reqs against t in order and reports each one to r before returning.
	// Work stops at ctx's deadline: the remaining requests are reported with an error
	// wrapping context.DeadlineExceeded.
	Execute(ctx context.Context, t *Target, reqs []Request, r Reporter)
	// Close releases connections, mappings and goroutines.
	Close() error
}
