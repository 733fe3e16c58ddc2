package p2p

// Liveness: a peer that stops sending is probed through the fabric (the transfer engine's
// ping); a peer that does not answer is marked dead, and every wait on it and every send to it
// fails at once with an error wrapping wire.ErrPeerDead. Probes run only while a
// receive or a send has waited on a peer that stayed silent for Options.ProbeInterval, and
// then once per interval, so the hot path never pays for them.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mooncake-go/mooncake/engine/transport"
	"github.com/mooncake-go/mooncake/wire"
)

// Prober is implemented by fabrics that can check that a peer's process answers
// (EngineFabric: the engine's ping to the segment's RPC port).
type Prober interface {
	// Probe checks that segment answers and, when engine is not empty, that the engine
	// instance engine (Info.Engine) serves it.
	Probe(ctx context.Context, segment, engine string) error
}

type deadErr struct {
	err  error
	gone bool // its process is known to have ended (Gone)
}

// Dead returns why rank was marked dead, or nil.
func (e *Endpoint) Dead(rank int) error {
	if rank < 0 || rank >= len(e.peers) {
		return nil
	}
	if d := e.peers[rank].dead.Load(); d != nil {
		return d.err
	}
	return nil
}

// Gone reports whether rank was marked dead because its process is known to have ended: a
// probe failed before its timeout (the host refused or reset the connection, the process is
// no longer on this host, or another process serves its segment), as opposed to a peer that
// did not answer, which may be stopped or cut off and still running.
func (e *Endpoint) Gone(rank int) bool {
	if rank < 0 || rank >= len(e.peers) {
		return false
	}
	d := e.peers[rank].dead.Load()
	return d != nil && d.gone
}

// MarkDead declares rank dead (the membership layer does it for ranks the group agreed have
// failed): waits on it and sends to it fail at once, until Reconnect gives it a new endpoint.
func (e *Endpoint) MarkDead(rank int, why error) { e.markDead(rank, why, false) }

func (e *Endpoint) markDead(rank int, why error, gone bool) {
	if rank < 0 || rank >= len(e.peers) || rank == e.rank {
		return
	}
	if why == nil {
		why = fmt.Errorf("rank %d is gone: %w", rank, wire.ErrPeerDead)
	} else if !errors.Is(why, wire.ErrPeerDead) {
		why = fmt.Errorf("rank %d is gone: %w (%w)", rank, wire.ErrPeerDead, why)
	}
	// What the peer wrote before it died is delivered first: a peer may finish an op, exit,
	// and be found dead by a probe before this side's progress goroutine drained its last
	// message; that message must complete its receive, not be failed with the peer.
	e.drainMu.Lock()
	if !e.isClosed() {
		e.drain(false)
	}
	e.drainMu.Unlock()
	e.peers[rank].dead.CompareAndSwap(nil, &deadErr{err: why, gone: gone})
	e.failPosted(rank, why)
	e.wake()
}

// failPosted fails the posted receives addressed to rank (not any-source ones).
func (e *Endpoint) failPosted(rank int, err error) {
	e.mu.Lock()
	var fail []*Request
	keep := e.posted[:0]
	for _, r := range e.posted {
		if r.peer == rank {
			fail = append(fail, r)
		} else {
			keep = append(keep, r)
		}
	}
	e.posted = keep
	for r, in := range e.inflight {
		if in.peer == rank {
			in.discard.Store(true)
			fail = append(fail, r)
		}
	}
	e.mu.Unlock()
	for _, r := range fail {
		r.cancel(err)
	}
}

// PeerAlive implements collective.LivenessChecker: nil when rank answers a probe (or the
// fabric cannot probe), else an error wrapping wire.ErrPeerDead; a failed probe marks
// the peer dead.
func (e *Endpoint) PeerAlive(ctx context.Context, rank int) error {
	if rank < 0 || rank >= len(e.peers) {
		return fmt.Errorf("p2p: rank %d does not exist (group of %d)", rank, len(e.peers))
	}
	if rank == e.rank {
		return nil
	}
	if err := e.Dead(rank); err != nil {
		return err
	}
	p := e.peers[rank]
	pr, ok := e.f.(Prober)
	seg := p.segName.Load()
	if !ok || seg == nil {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, e.probeTimeout)
	defer cancel()
	var id string
	if v := p.engineID.Load(); v != nil {
		id = *v
	}
	err := pr.Probe(pctx, *seg, id)
	if err == nil {
		p.lastAlive.Store(time.Now().UnixNano())
		return nil
	}
	if ctx.Err() != nil {
		// The caller gave up (canceled, or its own deadline passed during the probe): that
		// says nothing about the peer, which must not be marked dead for it.
		return ctx.Err()
	}
	// A probe that failed before its timeout was answered by the peer's host: its process is
	// gone (refused, reset, closed, or replaced). A stopped or cut-off peer times out.
	gone := errors.Is(err, transport.ErrPeerGone) || !errors.Is(err, context.DeadlineExceeded)
	e.markDead(rank, fmt.Errorf("rank %d is gone: %w (%v)", rank, wire.ErrPeerDead, err), gone)
	return e.Dead(rank)
}

// AliveRecently is PeerAlive with a cache: a peer heard from (a message or a probe) within
// maxAge is alive without a new probe. User point-to-point sends use it to fail fast on a
// dead peer whose mailbox still has room.
func (e *Endpoint) AliveRecently(ctx context.Context, rank int, maxAge time.Duration) error {
	if rank < 0 || rank >= len(e.peers) || rank == e.rank {
		return e.PeerAlive(ctx, rank)
	}
	if err := e.Dead(rank); err != nil {
		return err
	}
	if time.Since(time.Unix(0, e.peers[rank].lastAlive.Load())) < maxAge {
		return nil
	}
	return e.PeerAlive(ctx, rank)
}

// probeIfSilent probes peer when it has been silent for a probe interval and the caller's
// last probe (*last, updated) is that old too; it returns the peer's death, else nil.
func (e *Endpoint) probeIfSilent(ctx context.Context, peer int, last *time.Time) error {
	p := e.peers[peer]
	if d := p.dead.Load(); d != nil {
		return d.err
	}
	every := e.probeEvery
	now := time.Now()
	if now.Sub(time.Unix(0, p.lastAlive.Load())) < every || now.Sub(*last) < every {
		return nil
	}
	*last = now
	if err := e.PeerAlive(ctx, peer); err != nil && errors.Is(err, wire.ErrPeerDead) {
		return err
	}
	return nil
}
