package p2p

import (
	"context"
	"sync/atomic"
	"time"
)

// Delivered waits at most maxWait until rank has taken every message this endpoint sent it so
// far out of its mailbox (its credits came back), and reports whether it had. A same-host
// peer's mailbox takes a write whether or not the peer's process is alive, so a completed Send
// does not prove delivery; a message the peer took is one its process received (its progress
// goroutine moved it to a receive or to the unexpected messages). Callers probe the peer
// (PeerAlive) when it says false. The wait parks on the credit word, never spins for long.
func (e *Endpoint) Delivered(ctx context.Context, rank int, maxWait time.Duration) bool {
	if rank < 0 || rank >= len(e.peers) || rank == e.rank {
		return true
	}
	p := e.peers[rank]
	select {
	case p.sendSem <- struct{}{}:
	case <-ctx.Done():
		return false
	case <-e.closed:
		return false
	}
	sent := p.sent
	<-p.sendSem
	took := func() bool { return int32(atomic.LoadUint32(p.tailWord)-sent) >= 0 }
	ctx, cancel := context.WithTimeout(ctx, maxWait)
	defer cancel()
	return e.waitWord(ctx, p.tailWord, took, -1, p.tailCh, p.networked) == nil
}
