package collective

import (
	"context"
	"fmt"

	"github.com/mooncake-go/mooncake/wire"
)

// Poster is implemented by Conns that can post a receive before waiting for it
// (p2p.Endpoint). Algorithms that know their next receives post them early: a message that
// arrives before the loop gets to it then lands in its buffer, instead of being set aside (an
// allocation and a second copy) until the receive is made.
type Poster interface {
	Post(peer int, tag uint64, buf []byte) wire.PostedRecv
}

// ReducePoster is a Poster that can also post a receive whose message is combined into its
// buffer as it arrives, piece by piece (combine(dst, src): dst = dst op src, the reduction
// kernel the algorithm chose), with no copy into scratch in between (p2p: straight from the
// cell of its mailbox).
type ReducePoster interface {
	Poster
	PostReduce(peer int, tag uint64, buf []byte, combine func(dst, src []byte)) wire.PostedRecv
}

// Lander is a Poster whose plain receives from some peers are read straight from the network
// into their buffers (p2p over tcp): a copy into a receive's buffer then costs no pass over
// memory, and an algorithm gains nothing by doing other work in it.
type Lander interface {
	LandsFrom(peer int) bool
}

// recvAhead receives a known sequence of messages from one peer with one step into buffers
// given in order, keeping up to depth of them posted ahead when the Conn is a Poster (else
// each is a plain receive when waited for).
type recvAhead struct {
	o     *opState
	ctx   context.Context
	peer  int
	step  uint16
	p     Poster
	depth int
	queue []ahead           // receives given, not yet waited for (the first len(reqs) are posted)
	reqs  []wire.PostedRecv // posted, oldest first
}

// ahead is one queued receive: into buf, or (combine != nil) combined into buf.
type ahead struct {
	buf     []byte
	combine func(dst, src []byte)
}

func (o *opState) recvAhead(ctx context.Context, peer int, step uint16, depth int) *recvAhead {
	q := &recvAhead{o: o, ctx: ctx, peer: peer, step: step, depth: max(depth, 1)}
	q.p, _ = o.g.conn.(Poster)
	return q
}

// add queues the buffer of the next message; it is written only by that message.
func (q *recvAhead) add(buf []byte) {
	q.queue = append(q.queue, ahead{buf: buf})
	q.fill()
}

// reducer is the Conn as a ReducePoster, nil when it cannot reduce on arrival.
func (q *recvAhead) reducer() ReducePoster {
	rp, _ := q.p.(ReducePoster)
	return rp
}

// lands reports whether the Conn reads plain receives from the peer straight into their
// buffers (Lander).
func (q *recvAhead) lands() bool {
	l, ok := q.p.(Lander)
	return ok && l.LandsFrom(q.peer)
}

// addReduce queues the next message to be combined into buf on arrival (reducer() != nil).
func (q *recvAhead) addReduce(buf []byte, combine func(dst, src []byte)) {
	q.queue = append(q.queue, ahead{buf: buf, combine: combine})
	q.fill()
}

func (q *recvAhead) fill() {
	for q.p != nil && len(q.reqs) < q.depth && len(q.reqs) < len(q.queue) {
		a := q.queue[len(q.reqs)]
		var r wire.PostedRecv
		if a.combine != nil {
			r = q.reducer().PostReduce(q.peer, q.o.tag(q.step), a.buf, a.combine)
		} else {
			r = q.p.Post(q.peer, q.o.tag(q.step), a.buf)
		}
		q.reqs = append(q.reqs, r)
	}
}

// next waits for the oldest queued message, which must fill its buffer exactly.
func (q *recvAhead) next() error {
	if len(q.queue) == 0 {
		return fmt.Errorf("%s: internal error: no receive queued", q.o.name)
	}
	buf := q.queue[0].buf
	var err error
	if len(q.reqs) == 0 {
		err = q.o.recvFullCtx(q.ctx, q.peer, q.step, buf)
	} else {
		var n int
		n, _, err = q.reqs[0].Wait(q.ctx)
		q.reqs[0] = nil
		q.reqs = q.reqs[1:]
		err = q.o.wrap(q.ctx, q.peer, err)
		if err == nil && n != len(buf) {
			err = &PeerError{Op: q.o.name, Rank: q.o.g.rank, Peer: q.peer,
				Err: fmt.Errorf("got %d bytes, expected %d", n, len(buf))}
		}
	}
	q.queue[0] = ahead{}
	q.queue = q.queue[1:]
	if err == nil {
		q.fill()
	}
	return err
}

// stop withdraws the receives still posted (after an error), so none writes into its buffer
// once the op returned.
func (q *recvAhead) stop(err error) {
	for _, r := range q.reqs {
		r.Cancel(err)
	}
	q.reqs, q.queue = nil, nil
}

// recvEach is one receive per peer (peers[i] into bufs[i]), all posted before any is waited
// for: messages from several peers that arrive in any order land in their buffers.
type recvEach []*recvAhead

func (o *opState) recvEach(peers []int, step uint16, bufs [][]byte) recvEach {
	qs := make(recvEach, len(peers))
	for i, p := range peers {
		qs[i] = o.recvAhead(o.ctx, p, step, 1)
		qs[i].add(bufs[i])
	}
	return qs
}

// wait waits for every message in turn; after an error it withdraws the receives not yet
// complete.
func (qs recvEach) wait() error {
	for i, q := range qs {
		if err := q.next(); err != nil {
			qs[i:].stop(err)
			return err
		}
	}
	return nil
}

// stop withdraws the receives not yet complete (after an error elsewhere in the op).
func (qs recvEach) stop(err error) {
	for _, q := range qs {
		q.stop(err)
	}
}
