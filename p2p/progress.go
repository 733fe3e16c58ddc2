package p2p

// The progress loop: one goroutine per endpoint waits on the doorbell and drains every peer's
// mailbox (drain), unless the tcp server goroutine that stored a bell write drained them already
// (drainHook). drainMu serialises passes.

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/internal/futex"
)

// progress drains every peer's mailbox into posted receives or the unexpected queue, when
// drainHook has not done it already.
func (e *Endpoint) progress() {
	defer e.wg.Done()
	idle := 0
	park := time.NewTimer(time.Hour)
	defer park.Stop()
	for {
		bell := atomic.LoadUint32(e.bell)
		e.drainMu.Lock() // a drainHook that holds it finishes its pass first
		did, _ := e.drain(true)
		e.drainMu.Unlock()
		if did {
			idle = 0
			continue
		}
		if e.isClosed() {
			return
		}
		idle++
		if idle < 64 {
			if idle > 16 {
				runtime.Gosched()
			}
			continue
		}
		if e.netPeers.Load() {
			// Every bell write comes through our tcp server, which runs drainHook after
			// storing it and signals bellCh when the hook left the write to us (a token stays
			// buffered, so a write since this pass began is not missed).
			e.park(park, 50*time.Millisecond, e.bellCh, e.kick)
			continue
		}
		futex.Wait(e.bell, bell, 50*time.Millisecond)
	}
}

// drainHook runs on the tcp server goroutine that stored a bell write: when every peer is
// reached over the network and nobody else is draining, it drains the mailboxes right there, so
// a chunk that arrives over tcp is delivered (copied or reduced into its receive) without
// waking the progress goroutine: one goroutine hand-off less per chunk, and no idle P woken
// to run it. It leaves the write to the progress goroutine (false) when a pass is under way
// (that goroutine passes again after it), when a peer's receive side awaits a reset, or after
// Close.
func (e *Endpoint) drainHook() bool {
	if !e.netPeers.Load() || !e.drainMu.TryLock() {
		return false
	}
	defer e.drainMu.Unlock()
	if e.isClosed() {
		return false
	}
	_, ok := e.drain(false)
	return ok
}

// drain is one pass over every peer's mailbox (under drainMu); did reports whether it consumed
// anything. Resets that Reconnect asked for are applied when resets is set; otherwise a peer
// that awaits one is skipped and ok is false.
func (e *Endpoint) drain(resets bool) (did, ok bool) {
	K := uint32(e.lay.K)
	ok = true
	for _, p := range e.peers {
		if p.rank == e.rank {
			continue
		}
		if rc := p.reset.Load(); rc != nil {
			if !resets {
				ok = false
				continue
			}
			e.resetRecv(p)
			p.reset.Store(nil)
			close(*rc)
		}
		if p.dead.Load() != nil {
			// Given up (MarkDead drained it first): what it writes now is not taken and not
			// credited, so its Delivered stays false until Reconnect resets the link.
			continue
		}
		h := atomic.LoadUint32(p.headWord)
		c := p.consumed.Load()
		if c == h || h-c > K {
			// h-c > K: no sender gets more than K cells ahead, so this head was written by a
			// new incarnation of the peer before Reconnect reset our side; draining from
			// the old count would walk ~2^32 cells of garbage. Wait for the reset.
			continue
		}
		for ; c != h; c++ {
			off := e.lay.mailbox(p.rank, int(c%K))
			cell := e.mem[off : off+e.lay.cellSize()]
			hd := getHeader(cell)
			if hd.n < 0 || hd.n > e.lay.S {
				hd.n = 0 // corrupt; drop
			}
			e.handleChunk(p, hd, cell[cellHdr:cellHdr+hd.n], p.early[c%K].Swap(0))
		}
		p.consumed.Store(c)
		p.lastAlive.Store(time.Now().UnixNano())
		select {
		case p.creditCh <- struct{}{}:
		default:
		}
		did = true
	}
	return did, ok
}
