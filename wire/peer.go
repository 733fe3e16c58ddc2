package wire

import (
	"context"
	"errors"
)

// ErrPeerDead marks a failure caused by a peer that is gone: its process does not answer a
// liveness probe, or the membership protocol declared it failed. Transports wrap it; the
// fault-tolerance layer tells a dead peer (exclude it, go on) from a slow one (keep waiting).
var ErrPeerDead = errors.New("its process does not answer liveness probes")

// PostedRecv is a receive posted before it is waited for (p2p's Request).
type PostedRecv interface {
	// Wait waits for the message: bytes received, source rank, error. When ctx ends first the
	// receive is withdrawn.
	Wait(ctx context.Context) (n, src int, err error)
	// Cancel withdraws the receive: after it returns nothing more is written into its buffer.
	Cancel(err error)
}
