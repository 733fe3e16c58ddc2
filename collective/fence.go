package collective

// Fencing: an op that a peer gave up on (and that the group may then complete without this
// rank) never completes successfully on this rank.
//
// Without it a rank frozen (SIGSTOP, a long stall) before an op could resume after the others
// gave up on it, find their contributions to that op still published (in their shared-memory
// arenas, or in its mailboxes), and complete the op with a value its group never computed.
//
// On one host every rank's arena has a 64-bit outcome word (offFence) that both sides of the
// race change with compare-and-swap, so exactly one of them wins:
//   - the owner commits op s before it reports success: committed(s, view);
//   - a peer that gives up on the owner in op s (found it dead, or its deadline passed while the
//     owner had not arrived) fences it first: fenced(s, view, by).
//
// An owner that finds itself fenced for its op (same view, s at or after the fence) fails the
// op with a FencedError naming the peer and the op; a peer whose fence finds the owner
// committed the op knows the owner arrived and looks again instead of giving up. The view (the
// number of membership decisions applied) scopes a fence: a stale rank that gives up on ranks
// that moved on to a newer view cannot fence them. An owner whose op failed consumes the
// fence (failed(s)), so that, when the group keeps it (a deadline, not a death), its next op
// runs normally. The words stay mapped after the fast path is left for the Conn path, and
// that path uses them too, so fencing holds on one host whichever path an op takes.
//
// Word layout: bits 0-1 the state (committed 0, fenced 1, failed 2), bits 2-15 the fencer's
// rank+1, bits 16-31 the view (mod 2^16), bits 32-63 the op's sequence number (mod 2^32).

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/mooncake-go/mooncake/wire"
)

const (
	fenceCommitted = 0
	fenceFenced    = 1
	fenceFailed    = 2
)

type fenceWord uint64

// s32 is seq as the word stores it: +1, so that the zero word (a fresh arena) commits nothing.
func s32(seq uint64) uint32 { return uint32(seq + 1) }

// cmp compares the word's op with seq (modulo 2^32): <0 earlier, 0 the same, >0 later.
func (w fenceWord) cmp(seq uint64) int32 { return int32(w.seq() - s32(seq)) }

func mkFence(state int, seq uint64, view uint32, by int) fenceWord {
	return fenceWord(uint64(s32(seq))<<32 | uint64(uint16(view))<<16 | uint64(uint16(by+1)&0x3fff)<<2 | uint64(state))
}

func (w fenceWord) state() int   { return int(w & 3) }
func (w fenceWord) by() int      { return int(w>>2&0x3fff) - 1 }
func (w fenceWord) view() uint16 { return uint16(w >> 16) }
func (w fenceWord) seq() uint32  { return uint32(w >> 32) }

// FencedError: a peer gave up on this rank in an op (found it dead or unresponsive), so the op's
// result here is discarded: the group may complete the op without this rank.
type FencedError struct {
	Op   string
	Rank int    // this rank
	By   int    // the peer that gave up on it
	Seq  uint64 // the op this rank ran
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("%s (op #%d) on rank %d: fenced: rank %d gave up waiting for this rank in this op (it found it dead or unresponsive), so the result here is discarded; the group may go on without this rank",
		e.Op, e.Seq, e.Rank, e.By)
}

// FailedRanks is the failed-ranks hint: the rank that gave up.
func (e *FencedError) FailedRanks() []int { return []int{e.By} }

// fences is the outcome word of every rank whose arena this rank maps (nil where unmapped).
type fences struct {
	rank  int
	words []*uint64
}

func newFences(rank int, views [][]byte) *fences {
	f := &fences{rank: rank, words: make([]*uint64, len(views))}
	for r, v := range views {
		if v != nil {
			f.words[r] = (*uint64)(unsafe.Pointer(&v[offFence]))
		}
	}
	return f
}

// commit records that this rank completes op seq, unless a peer fenced it for that op first.
func (f *fences) commit(op string, seq uint64, view uint32) error {
	w := f.words[f.rank]
	for {
		v := fenceWord(atomic.LoadUint64(w))
		if v.state() == fenceFenced && v.view() == uint16(view) {
			if v.cmp(seq) <= 0 {
				return &FencedError{Op: op, Rank: f.rank, By: v.by(), Seq: seq}
			}
			return nil // fenced for a later op (this rank is behind): keep the fence for it
		}
		if atomic.CompareAndSwapUint64(w, uint64(v), uint64(mkFence(fenceCommitted, seq, view, -1))) {
			return nil
		}
	}
}

// failed records that this rank's op seq failed, consuming a fence for it or an earlier op.
func (f *fences) failed(seq uint64) {
	w := f.words[f.rank]
	for {
		v := fenceWord(atomic.LoadUint64(w))
		if v.state() == fenceFenced && v.cmp(seq) > 0 {
			return // a fence for a later op stays
		}
		if atomic.CompareAndSwapUint64(w, uint64(v), uint64(mkFence(fenceFailed, seq, 0, -1))) {
			return
		}
	}
}

// fence marks that this rank gives up on peer in op seq; it reports false when the peer
// committed that op already (it arrived: the caller must not give up on it).
func (f *fences) fence(peer int, seq uint64, view uint32) bool {
	if peer == f.rank || peer < 0 || peer >= len(f.words) || f.words[peer] == nil {
		return true
	}
	w := f.words[peer]
	for {
		v := fenceWord(atomic.LoadUint64(w))
		switch {
		case v.state() == fenceCommitted && v.view() == uint16(view) && v.cmp(seq) >= 0 && v != 0:
			return false
		case v.state() == fenceFenced && v.view() == uint16(view) && v.cmp(seq) <= 0:
			return true // fenced already, for this op or an earlier one
		case v.state() == fenceFailed && v.cmp(seq) >= 0:
			return true // it failed this op itself
		}
		if atomic.CompareAndSwapUint64(w, uint64(v), uint64(mkFence(fenceFenced, seq, view, f.rank))) {
			return true
		}
	}
}

// fenceAll fences every peer in ranks; it reports false when one of them committed op seq.
func (f *fences) fenceAll(ranks []int, seq uint64, view uint32) bool {
	ok := true
	for _, r := range ranks {
		if !f.fence(r, seq, view) {
			ok = false
		}
	}
	return ok
}

// reset forgets a fence of this rank (it is admitted to the group again).
func (f *fences) reset() { atomic.StoreUint64(f.words[f.rank], 0) }

// gaveUpOn returns the peers an op failure gives up on: those that did not answer within the
// deadline or were found dead (not the ranks an aborting peer named: that peer fenced them).
func gaveUpOn(err error) []int {
	var pe *PeerError
	if !errors.As(err, &pe) {
		return nil
	}
	var ae *wire.AbortError
	if errors.As(pe.Err, &ae) {
		return nil
	}
	if pe.Timeout != "" || errors.Is(pe.Err, wire.ErrPeerDead) {
		return append([]int{pe.Peer}, pe.More...)
	}
	return nil
}

// ResetFence forgets a fence of this rank: call it when the group admits the rank again.
func (g *Group) ResetFence() {
	if f := g.fence.Load(); f != nil {
		f.reset()
	}
}

// FencesOnHost reports whether this group's ops are fenced through the same-host outcome words
// (every member maps every other's arena); without them the caller fences by other means.
func (g *Group) FencesOnHost() bool { return g.fence.Load() != nil }
