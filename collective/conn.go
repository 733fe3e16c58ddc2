package collective

import (
	"context"
	"errors"
	"fmt"

	"github.com/mooncake-go/mooncake/wire"
)

// Conn is the transport the algorithms run on: tagged, ordered point-to-point messages between
// ranks. Messages from one peer with one tag arrive in the order they were sent.
//
// Send may return before the peer posts the matching Recv: the transport buffers (and drains
// its receive side on its own), so Send waits at most for flow control, never for a matching
// Recv. Recv takes the first message from peer with tag (peer wire.AnySource: from any peer);
// a message longer than buf is an error, a shorter one returns its length. Tags follow package
// wire's layout.
//
// Abort ends the op whose tags are in tag space space (see wire.SpaceOf): pending and later
// Recvs for tags in that space fail with a *wire.AbortError, on this rank and on every rank in peers
// (told best effort, without blocking the caller), and messages in that space are dropped.
// The peers get abort with Peer set to this rank (the transport fills it in on arrival).
type Conn interface {
	Send(ctx context.Context, peer int, tag uint64, data []byte) error
	Recv(ctx context.Context, peer int, tag uint64, buf []byte) (n int, err error)
	Abort(space uint64, peers []int, abort *wire.AbortError)
}

// ErrTimeout marks errors caused by the op's deadline passing.
var ErrTimeout = errors.New("timed out")

// PeerError is an op failure that involves a peer rank (it did not answer, a transfer to it
// failed, it aborted the op).
type PeerError struct {
	Op      string
	Rank    int // local rank
	Peer    int
	More    []int  // further peers that did not answer (the shared-memory path names them all)
	Timeout string // non-empty: the peer did not answer within this long
	Err     error
}

func (e *PeerError) Error() string {
	var ae *wire.AbortError
	switch {
	case e.Timeout != "" && len(e.More) > 0:
		ranks := fmt.Sprint(e.Peer)
		for _, r := range e.More {
			ranks += fmt.Sprintf(", %d", r)
		}
		return fmt.Sprintf("%s on rank %d: peer ranks %s did not answer within %s", e.Op, e.Rank, ranks, e.Timeout)
	case e.Timeout != "":
		return fmt.Sprintf("%s on rank %d: peer rank %d did not answer within %s", e.Op, e.Rank, e.Peer, e.Timeout)
	case errors.As(e.Err, &ae):
		return fmt.Sprintf("%s on rank %d: %v", e.Op, e.Rank, ae)
	default:
		return fmt.Sprintf("%s on rank %d: with peer rank %d: %v", e.Op, e.Rank, e.Peer, e.Err)
	}
}

func (e *PeerError) Unwrap() error {
	if e.Timeout != "" {
		return errors.Join(ErrTimeout, e.Err)
	}
	return e.Err
}

// FailedRanks is the failed-ranks hint: the peer, or, when the peer aborted the op, the
// ranks the peer found failed.
func (e *PeerError) FailedRanks() []int {
	var ae *wire.AbortError
	if errors.As(e.Err, &ae) {
		return append([]int(nil), ae.Failed...)
	}
	return append([]int{e.Peer}, e.More...)
}

// MismatchError is an op whose ranks disagree on its arguments; every rank reports the same one.
type MismatchError struct {
	Msg string
	// Membership: the members had applied different numbers of membership decisions.
	Membership bool
}

func (e *MismatchError) Error() string { return e.Msg }

// LivenessChecker is implemented by transports that can tell whether a peer is alive
// (p2p.Endpoint). The same-host fast path calls PeerAlive while it waits on a silent peer.
type LivenessChecker interface {
	// PeerAlive returns nil when rank answers, else an error wrapping wire.ErrPeerDead.
	PeerAlive(ctx context.Context, rank int) error
}
