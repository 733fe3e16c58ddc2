package p2p

// Links to peers: the per-peer state, Connect and Reconnect (a link points at one incarnation
// of a rank), and the choice of write stream.

import (
	"fmt"
	"sync/atomic"
	"time"
)

type peer struct {
	rank      int
	connected atomic.Bool
	seg       uint64
	remote    uint64 // peer's region base
	sendSem   chan struct{}
	sent      uint32 // cells sent (under sendSem)
	msgID     uint32
	broken    error
	headWord  *uint32 // local, written by the peer
	tailWord  *uint32 // local, written by the peer (credits)
	scratch   uintptr
	stage     []byte // K staging cells, one per cell of our mailbox at the peer
	stageAddr uintptr
	ws        []Write // the batch being sent (under sendSem)

	tailCh  <-chan struct{} // WatchWord of tailWord (nil: the fabric cannot watch words)
	unwatch func()

	// receive side, owned by whoever holds drainMu (self: by the self-sender)
	consumed atomic.Uint32
	cur      *inbound
	creditCh chan struct{}
	early    []atomic.Uint64 // per cell: what land.go did before the drain (its mark and flags)

	// liveness and incarnations (liveness.go)
	dead      atomic.Pointer[deadErr]
	lastAlive atomic.Int64 // unix ns of the last message or answered probe
	segName   atomic.Pointer[string]
	engineID  atomic.Pointer[string]
	instance  atomic.Uint64                 // the peer endpoint's Info.Instance
	link      atomic.Pointer[link]          // what the creditor writes to
	reset     atomic.Pointer[chan struct{}] // Reconnect asks progress to reset the receive side
}

// link is the peer's current incarnation as the creditor sees it.
type link struct {
	seg    uint64
	remote uint64
	stream WriteStream // ordered writes to it (StreamOpener fabrics; nil: Fabric.Write)
}

// Connect opens the segment of the peer described by info.
func (e *Endpoint) Connect(info Info) error {
	if err := e.checkInfo(info); err != nil {
		return err
	}
	if info.Rank == e.rank {
		return nil
	}
	p := e.peers[info.Rank]
	select {
	case p.sendSem <- struct{}{}:
	case <-e.closed:
		return ErrClosed
	}
	defer func() { <-p.sendSem }()
	if p.connected.Load() {
		if p.remote == info.Addr {
			return nil
		}
		return fmt.Errorf("p2p: rank %d is already connected", info.Rank)
	}
	seg, err := e.f.OpenSegment(info.Segment)
	if err != nil {
		return fmt.Errorf("p2p: rank %d cannot open the segment %q of rank %d: %w", e.rank, info.Segment, info.Rank, err)
	}
	e.linkTo(p, seg, info)
	p.connected.Store(true)
	e.linksChanged()
	e.wg.Add(1)
	go e.creditor(p)
	return nil
}

// linkTo points p at the endpoint info describes, open as segment seg (p's sendSem held).
func (e *Endpoint) linkTo(p *peer, seg uint64, info Info) {
	p.seg, p.remote = seg, info.Addr
	name := info.Segment
	p.segName.Store(&name)
	p.engineID.Store(&info.Engine)
	p.instance.Store(info.Instance)
	p.lastAlive.Store(time.Now().UnixNano())
	p.link.Store(&link{seg, info.Addr, e.openStream(seg)})
}

// networked reports whether p's current link reaches it over the network.
func (p *peer) networked() bool {
	l := p.link.Load()
	if l == nil || l.stream == nil {
		return false
	}
	n, ok := l.stream.(networked)
	return ok && n.Network()
}

// linksChanged decides again how the progress goroutine sleeps (after a Connect or Reconnect)
// and wakes it to apply that.
func (e *Endpoint) linksChanged() {
	e.linksMu.Lock()
	defer e.linksMu.Unlock()
	net := e.bellCh != nil
	for _, p := range e.peers {
		if p.rank == e.rank {
			continue
		}
		if !p.connected.Load() || !p.networked() {
			net = false
			break
		}
	}
	e.netPeers.Store(net)
	e.wake()
}

// openStream opens an ordered write stream to seg when the fabric has them (and
// Options.NoStreams is not set); nil sends with Fabric.Write, a round trip per batch.
func (e *Endpoint) openStream(seg uint64) WriteStream {
	so, ok := e.f.(StreamOpener)
	if !ok || e.noStreams {
		return nil
	}
	st, err := so.OpenStream(seg)
	if err != nil {
		return nil
	}
	return st
}

// Reconnect points rank's link at a new incarnation (a replacement process that published
// info): the old incarnation's partial and unclaimed messages are dropped, both directions'
// mailbox counters restart at zero, and the dead mark is cleared. The new process must not send
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
	// The same endpoint needs nothing; a new endpoint in the same process (a group
	// re-initialised after its rank left) has another Instance.
	if e.LinkedTo(info) && p.dead.Load() == nil {
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
	if old := p.link.Load(); old != nil && old.stream != nil {
		old.stream.Close()
	}
	p.dead.Store(nil)
	e.linkTo(p, seg, info)
	e.linksChanged()
	select {
	case p.creditCh <- struct{}{}:
	default:
	}
	return nil
}

// LinkedTo reports whether the link to info.Rank points at the endpoint info describes (the
// same segment, engine instance and endpoint Instance): false after the peer's process was
// replaced or its group re-initialised, until Reconnect.
func (e *Endpoint) LinkedTo(info Info) bool {
	if info.Rank < 0 || info.Rank >= len(e.peers) {
		return false
	}
	p := e.peers[info.Rank]
	seg, id := p.segName.Load(), p.engineID.Load()
	return seg != nil && *seg == info.Segment && id != nil && *id == info.Engine && p.instance.Load() == info.Instance
}
