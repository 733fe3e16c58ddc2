package p2p

// Collective aborts (wire.AbortTag): the op's pending and later receives fail, its queued
// messages are dropped, and peers are told.

import (
	"context"
	"time"

	"github.com/mooncake-go/mooncake/wire"
)

// Abort ends the op whose tags are in tag space space (wire.SpaceOf): its pending and later
// receives here fail with ab, its queued messages are dropped, and every connected rank in peers
// is told (best effort, without blocking the caller).
//
// Peers are told even when a peer's abort already reached this rank: members that disagree on
// the membership do not share one member list, so the first aborter may not know them all.
func (e *Endpoint) Abort(space uint64, peers []int, ab *wire.AbortError) {
	e.abortLocal(space, ab)
	e.mu.Lock()
	if e.abortSent[space] {
		e.mu.Unlock()
		return
	}
	e.abortSent[space] = true
	e.mu.Unlock()
	msg := wire.EncodeAbort(ab)
	if max := e.lay.S; len(msg) > max {
		msg = msg[:max]
	}
	for _, p := range peers {
		if p == e.rank || p < 0 || p >= e.lay.P || !e.peers[p].connected.Load() {
			continue
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			e.Send(ctx, p, wire.AbortTag(space), msg)
		}()
	}
}

// abortLocal marks space aborted; false if it already was.
func (e *Endpoint) abortLocal(space uint64, ab *wire.AbortError) bool {
	e.mu.Lock()
	if _, ok := e.aborted[space]; ok {
		e.mu.Unlock()
		return false
	}
	e.aborted[space] = ab
	e.abortOrder = append(e.abortOrder, space)
	if len(e.abortOrder) > 4096 {
		delete(e.aborted, e.abortOrder[0])
		delete(e.abortSent, e.abortOrder[0])
		e.abortOrder = e.abortOrder[1:]
	}
	var fail []*Request
	keep := e.posted[:0]
	for _, r := range e.posted {
		if wire.SpaceOf(r.tag) == space {
			fail = append(fail, r)
		} else {
			keep = append(keep, r)
		}
	}
	e.posted = keep
	for r, in := range e.inflight {
		if wire.SpaceOf(r.tag) == space {
			in.discard.Store(true)
			fail = append(fail, r)
		}
	}
	u := e.unexpected[:0]
	for _, in := range e.unexpected {
		if wire.SpaceOf(in.tag) == space {
			in.discard.Store(true)
		} else {
			u = append(u, in)
		}
	}
	e.unexpected = u
	e.mu.Unlock()
	for _, r := range fail {
		r.cancel(ab)
	}
	return true
}
