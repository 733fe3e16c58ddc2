package pg

// The ops: collectives on the group's ordered queue (run by runFT, ftrun.go) and
// point-to-point sends and receives outside it.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mooncake-go/mooncake/collective/reduce"
	"github.com/mooncake-go/mooncake/wire"
	"github.com/mooncake-go/mooncake/worker"
)

// submit queues a collective of n bytes (for the Observer); peer failures are handled by runFT (ftrun.go).
func (pg *Group) submit(op string, n int, fn func(ctx context.Context) error) *worker.Work {
	return pg.submitInPlace(op, n, nil, func(ctx context.Context, _ []byte) error { return fn(ctx) })
}

// submitTo queues an op of n bytes on q; with held starts (SetHeldStarts) the caller starts it.
func (pg *Group) submitTo(q *worker.Queue, op string, n int, fn func(ctx context.Context) error) *worker.Work {
	fn = pg.observed(op, n, fn) // observer hook (observer.go)
	if pg.heldStarts.Load() {
		return q.SubmitHeld(op, fn)
	}
	return q.Submit(op, fn)
}

// submitInPlace queues a collective that overwrites inplace with its result; fn gets the
// buffer that saves the input for a rerun (see runFT).
func (pg *Group) submitInPlace(op string, n int, inplace []byte, fn func(ctx context.Context, save []byte) error) *worker.Work {
	return pg.submitTo(pg.q, op, n, func(ctx context.Context) error {
		if d := pg.collectiveTimeout(); d < pg.cfg.Timeout {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		return Coded(pg.runFT(ctx, op, inplace, fn))
	})
}

// p2pCheck fails a send or receive at once when the peer is not a live member.
func (pg *Group) p2pCheck(op string, peer int) error {
	if err := pg.fencedErr(op); err != nil {
		return err
	}
	if peer < 0 || peer == pg.cfg.Rank {
		return nil
	}
	if !pg.g.ActiveRanks()[peer] {
		return opErr{fmt.Errorf("%s on rank %d: rank %d is not an active member of the group (epoch %d)", op, pg.cfg.Rank, peer, pg.g.Epoch())}
	}
	if err := pg.ep.Dead(peer); err != nil {
		return opErr{fmt.Errorf("%s on rank %d with rank %d: %w", op, pg.cfg.Rank, peer, err)}
	}
	return nil
}

// Send queues a send to dst behind earlier sends to dst (not behind collectives: a send never
// waits for a matching receive, and keeping it out of the collective queue lets programs mix
// p2p and collectives in any order that torch allows).
func (pg *Group) Send(buf []byte, dst int, tag int32) (*worker.Work, error) {
	if dst < 0 || dst >= pg.cfg.MaxSize {
		return nil, invalid(fmt.Sprintf("send: destination %d is not a rank of this group (size %d)", dst, pg.WorldSize()))
	}
	pg.sendMu.Lock()
	q := pg.sendQs[dst]
	if q == nil {
		q = worker.NewQueue(fmt.Sprintf("rank %d", pg.cfg.Rank), pg.cfg.Timeout)
		pg.sendQs[dst] = q
	}
	pg.sendMu.Unlock()
	return pg.submitTo(q, "send", len(buf), func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, pg.p2pDeadline())
		defer cancel()
		// A send to a rank that is dead or out of the group completes without error and
		// names that rank in its failed-ranks hint (get_local_success False), as upstream's:
		// the message is lost, the program decides what to do (peerfault.go).
		lost := func(why error) error { return pg.p2pLost("send", dst, tag, why) }
		if err := pg.p2pCheck("send", dst); err != nil {
			return lost(err)
		}
		if err := pg.ep.AliveRecently(ctx, dst, time.Second); err != nil && errors.Is(err, wire.ErrPeerDead) {
			return lost(err)
		}
		sctx, stop := pg.whileMember(ctx, dst) // a peer the group removes meanwhile (linkfault.go)
		defer stop()
		if err := pg.ep.Send(sctx, dst, wire.UserTag(tag), buf); err != nil {
			if left, ok := peerLeft(sctx); ok {
				return lost(left)
			}
			switch {
			case errors.Is(err, wire.ErrPeerDead) || errors.Is(pg.ep.PeerAlive(ctx, dst), wire.ErrPeerDead):
				return lost(err)
			case errors.Is(err, context.DeadlineExceeded):
				return opErr{fmt.Errorf("send on rank %d to rank %d (tag %d): rank %d did not take the message within %s", pg.cfg.Rank, dst, tag, dst, pg.p2pDeadline())}
			}
			return opErr{fmt.Errorf("send on rank %d to rank %d (tag %d): %w", pg.cfg.Rank, dst, tag, err)}
		}
		// Over shared memory a write into a dead peer's mailbox succeeds: a peer that did not
		// take the message within deadPeerCheck is probed.
		if !pg.ep.Delivered(ctx, dst, deadPeerCheck) {
			if err := pg.ep.PeerAlive(ctx, dst); err != nil && errors.Is(err, wire.ErrPeerDead) {
				return lost(err)
			}
		}
		if bad := pg.failedTransfers("send", []int{dst}, len(buf)); len(bad) > 0 {
			return pg.transfersFailedP2P("send", bad) // the transfer seam (linkfault.go)
		}
		return nil
	}), nil
}

// p2pDeadline bounds a send or receive: set_p2p_timeout_us when set, else the group's timeout.
func (pg *Group) p2pDeadline() time.Duration {
	if d := time.Duration(pg.p2pTimeout.Load()); d > 0 {
		return d
	}
	return pg.cfg.Timeout
}

// deadPeerCheck is how long a send waits for its peer to take the message before it probes the peer.
const deadPeerCheck = 10 * time.Millisecond

// Recv posts the receive now (so receives match in call order) and completes the work when a
// message of exactly len(buf) bytes arrived.
func (pg *Group) Recv(buf []byte, src int, tag int32) (*worker.Work, error) {
	if src < -1 || src >= pg.cfg.MaxSize {
		return nil, invalid(fmt.Sprintf("recv: source %d is not a rank of this group (size %d; -1 = any)", src, pg.WorldSize()))
	}
	w := worker.NewWork("recv")
	peer := src
	if src < 0 {
		peer = wire.AnySource
	}
	if pg.closed.Load() {
		w.Finish(fmt.Errorf("recv: %w", worker.ErrClosed))
		return w, nil
	}
	if err := pg.p2pCheck("recv", src); err != nil {
		// Like a send's: completes with the peer in the hint (peerfault.go).
		pg.recvs.Add(1)
		go func() {
			defer pg.recvs.Done()
			w.FinishFrom(src, pg.p2pLost("recv", src, tag, err))
		}()
		return w, nil
	}
	r := pg.ep.PostRecv(peer, wire.UserTag(tag), buf)
	from := "any rank"
	if src >= 0 {
		from = fmt.Sprintf("rank %d", src)
	}
	pg.recvs.Add(1)
	start := pg.observeStart() // observer hook (observer.go)
	go func() {
		defer pg.recvs.Done()
		wait := pg.p2pDeadline()
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if src >= 0 {
			var stop func()
			ctx, stop = pg.whileMember(ctx, src) // a peer the group removes meanwhile (linkfault.go)
			defer stop()
		}
		n, s, err := r.Wait(ctx)
		switch {
		case src >= 0 && err != nil && !pg.closed.Load() && isLeft(ctx):
			left, _ := peerLeft(ctx)
			err = pg.p2pLost("recv", src, tag, left)
			s = src
		case src >= 0 && err != nil && !pg.closed.Load() &&
			(errors.Is(err, wire.ErrPeerDead) || errors.Is(pg.ep.PeerAlive(ctx, src), wire.ErrPeerDead)):
			// The peer died before its message came: completes with the peer in the hint.
			err = pg.p2pLost("recv", src, tag, err)
			s = src
		case errors.Is(err, context.DeadlineExceeded):
			err = opErr{fmt.Errorf("recv on rank %d: no message from %s (tag %d) within %s: %w", pg.cfg.Rank, from, tag, wait, worker.ErrTimeout)}
		case err != nil:
			err = opErr{fmt.Errorf("recv on rank %d from %s (tag %d): %w", pg.cfg.Rank, from, tag, err)}
		case n != len(buf):
			err = opErr{fmt.Errorf("recv on rank %d: rank %d sent %d bytes (tag %d), the receive expects %d", pg.cfg.Rank, s, n, tag, len(buf))}
		}
		pg.observeRecv(len(buf), start, err) // observer hook (observer.go)
		w.FinishFrom(s, err)
	}()
	return w, nil
}

// checkRank fails when r is not a rank below the group's world size.
func (pg *Group) checkRank(op, what string, r int) error {
	if n := pg.WorldSize(); r < 0 || r >= n {
		return invalid(fmt.Sprintf("%s: %s %d is not a rank of this group (size %d)", op, what, r, n))
	}
	return nil
}

// byRank lays out a list of per-rank buffers (all_gather's outputs, reduce_scatter's and
// scatter's inputs, all_to_all's lists) by rank. A list of WorldSize() entries is by rank already.
// After a failure upstream sizes these lists by the active ranks, so a list with one entry per
// active rank is taken in rank order of the active mask: entry i belongs to the i-th active rank,
// and inactive ranks get no buffer (a dead rank's slot cannot be read or written anyway). nil
// (a non-root's list of gather and scatter) stays nil.
func (pg *Group) byRank(op, what string, bufs [][]byte) ([][]byte, error) {
	n := pg.WorldSize()
	if bufs == nil || len(bufs) == n {
		return bufs, nil
	}
	act := ranksOf(pg.g.ActiveRanks())
	if len(bufs) != len(act) || !pg.joined.Load() {
		return nil, invalid(fmt.Sprintf("%s: %d %s for a group of %d ranks (%d active): give one per rank or one per active rank", op, len(bufs), what, n, len(act)))
	}
	out := make([][]byte, n)
	for i, r := range act {
		out[r] = bufs[i]
	}
	return out, nil
}

// Broadcast sends root's buf to every member's buf.
func (pg *Group) Broadcast(buf []byte, root int) (*worker.Work, error) {
	if err := pg.checkRank("broadcast", "root", root); err != nil {
		return nil, err
	}
	return pg.submit("broadcast", len(buf), func(ctx context.Context) error { return pg.g.Broadcast(ctx, buf, root) }), nil
}

// AllReduce reduces buf (elements of dt) with op across the members, in place.
func (pg *Group) AllReduce(buf []byte, dt reduce.DType, op reduce.Op) (*worker.Work, error) {
	return pg.submitInPlace("all_reduce", len(buf), buf, func(ctx context.Context, save []byte) error {
		return pg.g.AllReduceOrRestore(ctx, buf, save, dt, op)
	}), nil
}

// Reduce reduces buf across the members into root's buf.
func (pg *Group) Reduce(buf []byte, dt reduce.DType, op reduce.Op, root int) (*worker.Work, error) {
	if err := pg.checkRank("reduce", "root", root); err != nil {
		return nil, err
	}
	return pg.submitInPlace("reduce", len(buf), buf, func(ctx context.Context, save []byte) error {
		return pg.g.ReduceOrRestore(ctx, buf, save, dt, op, root)
	}), nil
}

// AllGather gathers every member's in into outs[rank] on every member (len(outs) ==
// WorldSize()).
func (pg *Group) AllGather(in []byte, outs [][]byte) (*worker.Work, error) {
	layout, err := pg.byRankWhenRun("all_gather", "outputs", outs) // peerfault.go
	if err != nil {
		return nil, err
	}
	return pg.submit("all_gather", len(in), func(ctx context.Context) error {
		outs, err := layout(ctx)
		if err != nil {
			return err
		}
		return pg.g.AllGather(ctx, in, outs)
	}), nil
}

// Gather gathers every member's in into root's outs (nil on the other ranks).
func (pg *Group) Gather(in []byte, outs [][]byte, root int) (*worker.Work, error) {
	if err := pg.checkRank("gather", "root", root); err != nil {
		return nil, err
	}
	layout, err := pg.byRankWhenRun("gather", "outputs", outs)
	if err != nil {
		return nil, err
	}
	return pg.submit("gather", len(in), func(ctx context.Context) error {
		outs, err := layout(ctx)
		if err != nil {
			return err
		}
		return pg.g.Gather(ctx, in, outs, root)
	}), nil
}

// Scatter sends root's ins[rank] to every member's out (ins nil on the other ranks).
func (pg *Group) Scatter(ins [][]byte, out []byte, root int) (*worker.Work, error) {
	if err := pg.checkRank("scatter", "root", root); err != nil {
		return nil, err
	}
	layout, err := pg.byRankWhenRun("scatter", "inputs", ins)
	if err != nil {
		return nil, err
	}
	return pg.submit("scatter", len(out), func(ctx context.Context) error {
		ins, err := layout(ctx)
		if err != nil {
			return err
		}
		return pg.g.Scatter(ctx, ins, out, root)
	}), nil
}

// ReduceScatter reduces ins[rank] across the members into each member's out.
func (pg *Group) ReduceScatter(ins [][]byte, out []byte, dt reduce.DType, op reduce.Op) (*worker.Work, error) {
	layout, err := pg.byRankWhenRun("reduce_scatter", "inputs", ins)
	if err != nil {
		return nil, err
	}
	return pg.submit("reduce_scatter", sizeOf(ins), func(ctx context.Context) error {
		ins, err := layout(ctx)
		if err != nil {
			return err
		}
		return pg.g.ReduceScatter(ctx, ins, out, dt, op)
	}), nil
}

// AllToAll sends ins[r] to rank r, which receives it in outs[sender].
func (pg *Group) AllToAll(ins, outs [][]byte) (*worker.Work, error) {
	ins, err := pg.byRank("all_to_all", "inputs", ins)
	if err != nil {
		return nil, err
	}
	if outs, err = pg.byRank("all_to_all", "outputs", outs); err != nil {
		return nil, err
	}
	return pg.submit("all_to_all", sizeOf(ins), func(ctx context.Context) error { return pg.g.AllToAll(ctx, ins, outs) }), nil
}

// Barrier completes once every member reached it.
func (pg *Group) Barrier() (*worker.Work, error) {
	return pg.submit("barrier", 0, func(ctx context.Context) error { return pg.g.Barrier(ctx) }), nil
}
