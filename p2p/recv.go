package p2p

// The receive side, run by whoever drains the mailboxes: a chunk goes into its posted receive, or
// into the unexpected queue (stash) until a receive claims it (adopt); and the receive
// operations that post, match and take messages.

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/mooncake-go/mooncake/wire"
)

// inbound is a message being received.
type inbound struct {
	peer     int
	tag      uint64
	msgID    uint32
	total    int
	got      int
	req      *Request // matched posted receive
	parts    [][]byte // unexpected: the payload so far, one pooled buffer per chunk
	done     bool
	claimer  atomic.Pointer[Request] // a receive that took this unexpected message before it completed
	discard  atomic.Bool             // dropped (aborted op, too long for its receive)
	arrivals uint64
}

// handleChunk delivers one chunk from p; early says what land.go did with it already (the
// message's start, the payload).
func (e *Endpoint) handleChunk(p *peer, hd chunkHdr, payload []byte, early uint64) {
	if t := e.tap.Load(); t != nil && t.chunk != nil {
		t.chunk(hd)
	}
	if hd.off == 0 && early&earlyStarted == 0 {
		if in := p.cur; in != nil {
			p.cur = nil
			e.cutOff(in)
		}
		if wire.IsAbortTag(hd.tag) {
			ab := wire.DecodeAbort(payload)
			ab.Peer = p.rank
			e.abortLocal(wire.SpaceOf(hd.tag), ab)
			return
		}
		in := &inbound{peer: p.rank, tag: hd.tag, msgID: hd.id, total: hd.total}
		e.mu.Lock()
		if _, ok := e.aborted[wire.SpaceOf(hd.tag)]; ok {
			in.discard.Store(true)
		} else if r := e.matchPosted(p.rank, hd.tag); r != nil {
			if hd.total > len(r.buf) {
				in.discard.Store(true)
				e.mu.Unlock()
				r.finish(0, p.rank, tooLong(p.rank, hd.tag, hd.total, len(r.buf)))
				e.mu.Lock()
			} else {
				in.req = r
				e.inflight[r] = in
			}
		} else {
			e.unexpected = append(e.unexpected, in)
		}
		e.mu.Unlock()
		p.cur = in
	} else if in := p.cur; in == nil || in.msgID != hd.id || in.got != hd.off {
		return // the rest of a message whose start we never saw; drop
	}
	in := p.cur
	if in.req == nil && !in.discard.Load() {
		if c := in.claimer.Load(); c != nil {
			e.adopt(in, c)
		}
	}
	if !in.discard.Load() {
		if in.req != nil {
			if early&earlyLanded == 0 {
				in.req.copyIn(hd.off, payload)
			}
		} else {
			in.parts = append(in.parts, e.stash(payload))
		}
	}
	in.got += len(payload)
	if in.got < in.total {
		return
	}
	p.cur = nil
	if in.discard.Load() {
		return
	}
	if in.req != nil {
		e.mu.Lock()
		delete(e.inflight, in.req)
		e.mu.Unlock()
		in.req.finish(in.total, in.peer, nil)
		return
	}
	e.mu.Lock()
	in.done = true
	c := in.claimer.Load()
	if c != nil {
		delete(e.inflight, c)
	}
	e.mu.Unlock()
	if c != nil {
		c.fillFrom(in)
	}
}

// adopt hands an unexpected message that a receive claimed while it was arriving over to that
// receive (progress goroutine): the chunks so far are copied (or reduced) into its buffer once,
// and the rest of the message lands there straight from the mailbox, as if the receive had been
// posted first. (A send and its receive posted at about the same time, as torch's
// batch_isend_irecv does, used to copy the whole message twice: into the stash, then out.)
func (e *Endpoint) adopt(in *inbound, c *Request) {
	if in.total > len(c.buf) {
		in.discard.Store(true)
		e.mu.Lock()
		delete(e.inflight, c)
		in.claimer.Store(nil)
		e.mu.Unlock()
		e.freeParts(in)
		c.finish(0, in.peer, tooLong(in.peer, in.tag, in.total, len(c.buf)))
		return
	}
	off := 0
	for _, b := range in.parts {
		c.copyIn(off, b)
		off += len(b)
	}
	e.freeParts(in)
	e.mu.Lock()
	in.req = c
	in.claimer.Store(nil)
	e.mu.Unlock()
}

// stash copies a chunk of an unexpected message: full cells into pooled cell-size buffers,
// anything shorter (small messages, last chunks, a message to self, which arrives as one chunk)
// into an exact allocation. Memory grows with the bytes that arrived, not with the length a
// header claims, a queue of small messages holds only their bytes, and a large message makes
// no message-sized allocation (zeroed, then faulted in) each time.
func (e *Endpoint) stash(b []byte) []byte {
	if t := e.tap.Load(); t != nil {
		t.stash(len(b))
	}
	if len(b) != e.lay.S {
		return append([]byte(nil), b...)
	}
	var buf []byte
	if v := e.parts.Get(); v != nil {
		buf = *(v.(*[]byte))
	} else {
		buf = make([]byte, e.lay.S)
	}
	return buf[:copy(buf, b)]
}

// freeParts returns an unexpected message's buffers to the pool.
func (e *Endpoint) freeParts(in *inbound) {
	for _, b := range in.parts {
		if cap(b) == e.lay.S {
			b = b[:cap(b)]
			e.parts.Put(&b)
		}
	}
	in.parts = nil
}

// cutOff ends a message whose sender started a new one before finishing it (its send was
// canceled half way).
func (e *Endpoint) cutOff(in *inbound) {
	err := fmt.Errorf("message from rank %d was cut off after %d of %d bytes (the sender gave up)", in.peer, in.got, in.total)
	e.mu.Lock()
	var r *Request
	if in.req != nil {
		r = in.req
		delete(e.inflight, r)
	} else {
		r = in.claimer.Load()
		if r != nil {
			delete(e.inflight, r)
		}
		for i, u := range e.unexpected {
			if u == in {
				e.unexpected = append(e.unexpected[:i], e.unexpected[i+1:]...)
				break
			}
		}
	}
	e.mu.Unlock()
	if r != nil {
		r.finish(0, in.peer, err)
	}
}

func tooLong(peer int, tag uint64, n, have int) error {
	return fmt.Errorf("message from rank %d (tag %#x) has %d bytes, the receive buffer holds %d", peer, tag, n, have)
}

// matchPosted removes and returns the first posted receive for (peer, tag). e.mu held.
func (e *Endpoint) matchPosted(peer int, tag uint64) *Request {
	for i, r := range e.posted {
		if r.tag == tag && (r.peer == wire.AnySource || r.peer == peer) {
			e.posted = append(e.posted[:i], e.posted[i+1:]...)
			return r
		}
	}
	return nil
}

// PostRecv posts a receive of the first message from peer (wire.AnySource: any) with
// tag into buf and returns at once; receives are matched in the order they were posted.
func (e *Endpoint) PostRecv(peer int, tag uint64, buf []byte) *Request {
	return e.postRecv(peer, tag, buf, nil)
}

func (e *Endpoint) postRecv(peer int, tag uint64, buf []byte, into func(dst, src []byte)) *Request {
	r := &Request{e: e, peer: peer, tag: tag, buf: buf, into: into, src: -1, done: make(chan struct{})}
	if peer != wire.AnySource && (peer < 0 || peer >= e.lay.P) {
		r.finish(0, -1, fmt.Errorf("p2p: rank %d does not exist (group of %d)", peer, e.lay.P))
		return r
	}
	if e.isClosed() {
		r.finish(0, -1, ErrClosed)
		return r
	}
	e.mu.Lock()
	if ab, ok := e.aborted[wire.SpaceOf(tag)]; ok && wire.IsCollective(tag) {
		e.mu.Unlock()
		r.finish(0, -1, ab)
		return r
	}
	for i, in := range e.unexpected {
		if in.tag == tag && (peer == wire.AnySource || peer == in.peer) {
			e.unexpected = append(e.unexpected[:i], e.unexpected[i+1:]...)
			if in.done {
				e.mu.Unlock()
				r.fillFrom(in)
				return r
			}
			in.claimer.Store(r)
			e.inflight[r] = in
			e.mu.Unlock()
			return r
		}
	}
	if peer != wire.AnySource {
		if d := e.peers[peer].dead.Load(); d != nil {
			e.mu.Unlock()
			r.finish(0, -1, d.err)
			return r
		}
	}
	e.posted = append(e.posted, r)
	e.mu.Unlock()
	return r
}

// Post is PostRecv as the collective algorithms' Poster interface has it.
func (e *Endpoint) Post(peer int, tag uint64, buf []byte) wire.PostedRecv {
	return e.PostRecv(peer, tag, buf)
}

// PostReduce posts a receive whose message is combined into buf (combine(dst, src), the
// caller's reduction: dst = dst op src) by the progress goroutine chunk by chunk, straight
// from the cell of the mailbox, instead of being copied into a scratch buffer for the caller to
// reduce (the collective algorithms' ReducePoster). A message of another length than buf fails
// the receive's caller (the collective checks the length).
func (e *Endpoint) PostReduce(peer int, tag uint64, buf []byte, combine func(dst, src []byte)) wire.PostedRecv {
	return e.postRecv(peer, tag, buf, combine)
}

// Recv takes the first message from peer (wire.AnySource: any) with tag into buf.
func (e *Endpoint) Recv(ctx context.Context, peer int, tag uint64, buf []byte) (int, error) {
	n, _, err := e.PostRecv(peer, tag, buf).Wait(ctx)
	return n, err
}

// resetRecv forgets the receive state of p's old incarnation (progress goroutine only).
func (e *Endpoint) resetRecv(p *peer) {
	if in := p.cur; in != nil {
		p.cur = nil
		e.cutOff(in)
	}
	atomic.StoreUint32(p.headWord, 0)
	p.consumed.Store(0)
	for i := range p.early {
		p.early[i].Store(0)
	}
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
