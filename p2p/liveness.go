package p2p

// Liveness: a peer that stops sending is probed through the fabric (the transfer engine's
// ping); a peer that does not answer is marked dead, and every wait on it and every send to it
// fails at once with an error wrapping collective.ErrPeerDead. Probes run only while a
// receive or a send has waited on that peer for a while (ProbeAfter) and then every
// ProbeEvery, so the hot path never pays for them.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/collective"
)

// Prober is implemented by fabrics that can check that a peer's process answers
// (EngineFabric: the engine's ping to the segment's RPC port).
type Prober interface {
	// Probe checks that segment answers and, when engine is not empty, that the engine
	// instance engine (Info.Engine) serves it.
	Probe(ctx context.Context, segment, engine string) error
}

// probeEvery is how long a wait on a silent peer lasts between two liveness probes
// (MC_PG_PROBE_MS, default 200 ms).
func probeEvery() time.Duration {
	if v, err := strconv.Atoi(os.Getenv("MC_PG_PROBE_MS")); err == nil && v > 0 {
		return time.Duration(v) * time.Millisecond
	}
	return 200 * time.Millisecond
}

// probeTimeout bounds one probe: a process that is stopped or unreachable counts as dead
// once it has not answered for this long.
const probeTimeout = 2 * time.Second

type deadErr struct{ err error }

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

// MarkDead declares rank dead (the membership layer does it for ranks the group agreed have
// failed): waits on it and sends to it fail at once, until Reconnect gives it a new endpoint.
func (e *Endpoint) MarkDead(rank int, why error) {
	if rank < 0 || rank >= len(e.peers) || rank == e.rank {
		return
	}
	if why == nil {
		why = fmt.Errorf("rank %d is gone: %w", rank, collective.ErrPeerDead)
	} else if !errors.Is(why, collective.ErrPeerDead) {
		why = fmt.Errorf("rank %d is gone: %w (%w)", rank, collective.ErrPeerDead, why)
	}
	e.peers[rank].dead.CompareAndSwap(nil, &deadErr{why})
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
// fabric cannot probe), else an error wrapping collective.ErrPeerDead; a failed probe marks
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
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var id string
	if v := p.engineID.Load(); v != nil {
		id = *v
	}
	err := pr.Probe(ctx, *seg, id)
	if err == nil {
		p.lastAlive.Store(time.Now().UnixNano())
		return nil
	}
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ctx.Err() // the caller gave up; says nothing about the peer
	}
	e.MarkDead(rank, fmt.Errorf("rank %d is gone: %w (%v)", rank, collective.ErrPeerDead, err))
	return e.Dead(rank)
}

// AliveRecently is PeerAlive with a cache: a peer heard from (a message or a probe) within
// maxAge is alive without a new probe. User point-to-point sends use it to fail fast on a
// dead peer whose ring still has room.
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
	every := probeEvery()
	now := time.Now()
	if now.Sub(time.Unix(0, p.lastAlive.Load())) < every || now.Sub(*last) < every {
		return nil
	}
	*last = now
	if err := e.PeerAlive(ctx, peer); err != nil && errors.Is(err, collective.ErrPeerDead) {
		return err
	}
	return nil
}

// Reconnect points rank's link at a new incarnation (a replacement process that published
// info): the old incarnation's partial and unclaimed messages are dropped, both directions'
// ring counters restart at zero, and the dead mark is cleared. The new process must not send
// to this endpoint before Reconnect returned (the membership layer's join acknowledgement
// orders that). Reconnecting to the incarnation already connected is a no-op.
func (e *Endpoint) Reconnect(info Info) error {
	if err := e.checkInfo(info); err != nil {
		return err
	}
	if info.Rank == e.rank {
		return nil
	}
	p := e.peers[info.Rank]
	if !p.connected.Load() {
		return e.Connect(info)
	}
	if cur, id := p.segName.Load(), p.engineID.Load(); cur != nil && *cur == info.Segment &&
		id != nil && *id == info.Engine && p.dead.Load() == nil {
		return nil
	}
	seg, err := e.f.OpenSegment(info.Segment)
	if err != nil {
		return fmt.Errorf("p2p: rank %d cannot open the segment %q of rank %d: %w", e.rank, info.Segment, info.Rank, err)
	}
	select {
	case p.sendSem <- struct{}{}:
	case <-e.closed:
		return ErrClosed
	}
	defer func() { <-p.sendSem }()
	// Receive side: the progress goroutine owns it; it resets it at its next pass.
	done := make(chan struct{})
	p.reset.Store(&done)
	e.wake()
	select {
	case <-done:
	case <-e.closed:
		return ErrClosed
	}
	p.sent, p.msgID, p.broken = 0, 0, nil
	atomic.StoreUint32(p.tailWord, 0)
	p.seg, p.remote = seg, info.Addr
	if old := p.link.Load(); old != nil && old.stream != nil {
		old.stream.Close()
	}
	name := info.Segment
	p.segName.Store(&name)
	p.engineID.Store(&info.Engine)
	p.lastAlive.Store(time.Now().UnixNano())
	p.dead.Store(nil)
	p.link.Store(&link{seg, info.Addr, e.openStream(seg)})
	e.linksChanged()
	select {
	case p.creditCh <- struct{}{}:
	default:
	}
	return nil
}

// resetRecv forgets the receive state of p's old incarnation (progress goroutine only).
func (e *Endpoint) resetRecv(p *peer) {
	if in := p.cur; in != nil {
		p.cur = nil
		e.cutOff(in)
	}
	atomic.StoreUint32(p.headWord, 0)
	p.consumed.Store(0)
	e.mu.Lock()
	u := e.unexpected[:0]
	for _, in := range e.unexpected {
		if in.peer == p.rank && in.claimer.Load() == nil {
			in.discard.Store(true)
			continue
		}
		u = append(u, in)
	}
	e.unexpected = u
	e.mu.Unlock()
}

// Incarnation is the segment name and engine id of the process rank's link points at
// (empty when not connected).
func (e *Endpoint) Incarnation(rank int) (segment, engine string) {
	if rank < 0 || rank >= len(e.peers) {
		return "", ""
	}
	if s := e.peers[rank].segName.Load(); s != nil {
		segment = *s
	}
	if s := e.peers[rank].engineID.Load(); s != nil {
		engine = *s
	}
	return segment, engine
}
