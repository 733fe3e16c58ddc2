package pg

// Faults during ops: an op that meets a dead peer is agreed on and run again over the
// survivors (see membership.go's file comment).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/collective"
	"github.com/mooncake-go/mooncake/wire"
	"github.com/mooncake-go/mooncake/worker"
)

// isPeerFailure reports whether err is a failure a dead peer can explain (not a mismatch,
// not bad arguments, not a cancellation).
func isPeerFailure(err error) bool {
	var me *collective.MismatchError
	if errors.As(err, &me) {
		return false
	}
	var pe *collective.PeerError
	var ae *wire.AbortError
	return errors.As(err, &pe) || errors.As(err, &ae) || errors.Is(err, wire.ErrPeerDead)
}

// deadMembers probes the members of the op that failed and returns those that are gone.
// The probes run in parallel: they describe one moment (a partition that heals while they
// run must not leave a count of the dead that mixes before and after), and a cut-off rank
// learns it in one probe timeout, not one per member.
func (pg *Group) deadMembers(ctx context.Context, members []int) []int {
	isDead := make([]bool, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		if m == pg.cfg.Rank {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := pg.ep.PeerAlive(ctx, m)
			isDead[i] = err != nil && errors.Is(err, wire.ErrPeerDead)
		}()
	}
	wg.Wait()
	var dead []int
	for i, m := range members {
		if isDead[i] {
			dead = append(dead, m)
		}
	}
	return dead
}

// runFT runs a collective so that peer failures do not fail it: see the file comment.
// inplace is the buffer the op overwrites with its result (nil when inputs and outputs are
// separate); fn gets a save buffer for it (collective.Group.AllReduceOrRestore: a failed
// attempt leaves the input in place, and the same-host path saves it chunk by chunk as it
// reads it) unless Options.NoInputCopy (MOONCAKE_PG_FT_INPUT_COPY=0; then save is nil, and a
// peer failure during an all_reduce or reduce fails it, after the group agreed on the failure).
func (pg *Group) runFT(ctx context.Context, op string, inplace []byte, fn func(ctx context.Context, save []byte) error) error {
	// A process outside the group (before join_group, or dropped) runs the op over its view,
	// {itself}: an all_reduce returns its own input.
	if err := pg.fencedErr(op); err != nil {
		return err
	}
	var save []byte
	if len(inplace) > 0 && len(pg.g.Members()) > 1 && !pg.cfg.Options.NoInputCopy {
		save = pg.scratch(len(inplace))
	}
	var failed []int
	first := pg.g.Seq() // the op number of the first attempt: the call's number on every member
	retried := false    // retryOnce
	reran := false      // this attempt runs again, over a new view, an op the group agreed failed
	for {
		members := pg.g.Members()
		seq := pg.g.Seq()
		start := time.Now()
		kept := len(inplace) == 0 // the input survives a success (for a rerun, checkSucceeded)
		if pg.stall != nil && save != nil && len(inplace) <= 1<<20 {
			copy(save, inplace) // the op overwrites inplace; save keeps the input
			kept = true
		}
		err := fn(ctx, save)
		if err == nil {
			pg.keepDone(op, first, inplace) // for members that could not complete it (handover.go)
		}
		if err == nil && pg.stall != nil {
			if err := pg.confirmDelivered(ctx, op, seq, members); err != nil {
				return err // fenced, or it cannot complete here (the error says why)
			}
		}
		if err == nil && pg.cfg.Options.TransferCheck != nil { // the transfer seam (linkfault.go)
			if bad := pg.failedTransfers(op, without(members, []int{pg.cfg.Rank}), len(inplace)); len(bad) > 0 {
				return pg.transfersFailed(ctx, op, bad)
			}
		}
		if err == nil {
			rerun, cerr := pg.checkSucceeded(op, seq, start)
			if cerr != nil {
				return cerr
			}
			if rerun && kept {
				copy(inplace, save)
				failed = union(failed, pg.m.last.Ranks)
				pg.logf("%s (op #%d) succeeded here, but the group removed ranks %v during it: running it again over the new view", op, seq, pg.m.last.Ranks)
				pg.closeOp(seq, members, fmt.Errorf("the group removed ranks %v during it", pg.m.last.Ranks))
				reran = true
				continue
			}
			if rerun {
				return opErr{fmt.Errorf("%s (op #%d) on rank %d: the group removed ranks %v during the op, which completed here with them; this rank kept no copy of its input (over 1 MiB, or MOONCAKE_PG_FT_INPUT_COPY=0) to run it again over the new view, so it reports the op failed", op, seq, pg.cfg.Rank, pg.m.last.Ranks)}
			}
			if x := union(failed, pg.g.Excluded()); len(x) > 0 {
				return &worker.Degraded{Failed: x}
			}
			return nil
		}
		var fe *collective.FencedError
		if errors.As(err, &fe) {
			// A peer gave up on this rank in this op: the group may have gone on without it.
			// Learn its decision (the peer proposes it right after giving up) and report it.
			pg.logf("%s (op #%d): %v", op, seq, err)
			pg.awaitDecision(ctx, pg.probeTimeout()+time.Second)
			if ferr := pg.fencedErr(op); ferr != nil {
				return ferr
			}
			return err
		}
		var mm *collective.MismatchError
		if errors.As(err, &mm) && mm.Membership {
			// A member is ahead of this rank in the decision log (it saw a failure this rank
			// did not, or a membership call this rank did not make): catch up, so the next op
			// runs with the same view on every rank.
			before := pg.m.applied
			pg.catchUp()
			if ferr := pg.fencedErr(op); ferr != nil {
				return pg.orFenced(op, err)
			}
			if reran && pg.m.applied == before {
				// This rank runs again an op that failed here and meets members that have not
				// applied the decision: they completed the op before the failure was agreed
				// (the failed rank's last messages reached them) and run their next op now.
				// Running this one again with them would combine two different calls: it
				// takes their result of the op instead (or fails it), and this rank's next op
				// lines up with theirs (they catch up and run that op again).
				pg.closeOp(seq, members, err)
				return pg.takeOver(op, first, inplace, union(failed, pg.g.Excluded()), err) // handover.go
			}
			if pg.retryOnce(&retried, op, seq, err, save, inplace) {
				pg.closeOp(seq, members, err)
				continue
			}
			return err
		}
		if !isPeerFailure(err) || ctx.Err() != nil {
			pg.catchUp()
			return pg.orFenced(op, err)
		}
		// Probe the members, and take the group's decision instead when another member makes
		// it meanwhile (one that gave this op up because a member is gone: its abort ended
		// this op here before this rank's own probe of that member began).
		before := pg.m.applied
		dead, decided := pg.probeWatchingLog(ctx, members)
		if decided {
			pg.catchUp()
			if ferr := pg.fencedErr(op); ferr != nil {
				return pg.orFenced(op, err)
			}
			if gone := without(members, without(ranksOf(pg.g.ActiveRanks()), pg.g.Excluded())); len(gone) > 0 && pg.joined.Load() {
				failed = union(failed, gone)
				pg.logf("%s (op #%d) failed: %v; the group agreed meanwhile that ranks %v failed", op, seq, err, gone)
				pg.closeOp(seq, members, err)
				if pg.m.faultAt > first {
					// Made by members that failed a later op: they completed this one.
					return pg.takeOver(op, first, inplace, union(failed, pg.g.Excluded()), err)
				}
				if save == nil && len(inplace) > 0 {
					return fmt.Errorf("%w (MOONCAKE_PG_FT_INPUT_COPY=0: the op is not rerun over the survivors)", err)
				}
				reran = true
				continue
			}
			dead = pg.deadMembers(ctx, members)
		}
		if len(dead) == 0 {
			// Nobody died: the op failed for another reason (a member that aborted it, for
			// instance because it is behind in the decision log). Catch up and report it.
			pg.catchUp()
			if ferr := pg.fencedErr(op); ferr != nil {
				return pg.orFenced(op, err)
			}
			if reran && pg.m.applied == before {
				// A rerun given up by members that run their next op (see the mismatch above).
				pg.closeOp(seq, members, err)
				return pg.takeOver(op, first, inplace, union(failed, pg.g.Excluded()), err)
			}
			if pg.retryOnce(&retried, op, seq, err, save, inplace) {
				pg.closeOp(seq, members, err)
				continue
			}
			return err
		}
		pg.logf("%s (op #%d) failed: %v; ranks %v do not answer probes", op, seq, err, dead)
		if !hasMajority(len(members)-len(dead), len(members)) {
			// Cut off from most of the group: this rank does not decide. It learns what the
			// group decided (the group removes it, or the ranks it could not reach).
			wait := 2*pg.probeTimeout() + time.Second
			pg.logf("reaches only %d of the op's %d members: waiting for the group's decision", len(members)-len(dead), len(members))
			if pg.awaitDecision(ctx, wait) {
				if ferr := pg.fencedErr(op); ferr != nil {
					return ferr
				}
				if d := pg.m.last; pg.joined.Load() && d != nil && d.Kind == "fault" && d.FailedSeq == seq {
					failed = union(failed, d.Ranks)
					reran = true
					continue // the group removed the others: rerun over the new view
				}
			}
			return opErr{fmt.Errorf("%w; rank %d reaches only %d of the op's %d members, fewer than half, so it does not decide on the failure, and the group decided nothing about it within %s",
				err, pg.cfg.Rank, len(members)-len(dead), len(members), wait)}
		}
		dead = pg.reconcile(ctx, members, dead) // peerfault.go
		// (a fault agreed outside a collective has Seq == FailedSeq: peerfault.go)
		d, perr := pg.propose(pg.faultDecision(dead, seq),
			func(d *decision) bool { return d.Kind == "fault" && d.FailedSeq == seq && d.Seq > seq })
		if perr != nil {
			if ferr := pg.fencedErr(op); ferr != nil {
				return ferr
			}
			return fmt.Errorf("%w; agreeing on the failed ranks failed too: %w", err, perr)
		}
		if !pg.joined.Load() {
			if ferr := pg.fencedErr(op); ferr != nil {
				return ferr
			}
			return opErr{fmt.Errorf("%s on rank %d: the group declared this rank failed (epoch %d): %w", op, pg.cfg.Rank, pg.g.Epoch(), err)}
		}
		if d != nil {
			failed = union(failed, d.Ranks)
		} else {
			failed = union(failed, dead)
		}
		if pg.m.faultAt > first {
			// The group's decision was made by members that failed a later op: they completed
			// this one, which cannot run again with them (handover.go).
			pg.closeOp(seq, members, err)
			return pg.takeOver(op, first, inplace, union(failed, pg.g.Excluded()), err)
		}
		if save == nil && len(inplace) > 0 {
			// MOONCAKE_PG_FT_INPUT_COPY=0: the input may be half overwritten; the group
			// moved on without the dead ranks, this op reports the failure.
			return fmt.Errorf("%w (MOONCAKE_PG_FT_INPUT_COPY=0: the op is not rerun over the survivors)", err)
		}
		pg.closeOp(seq, members, err)
		reran = true
	}
}

// orFenced returns the fenced error when this rank was fenced, else err.
func (pg *Group) orFenced(op string, err error) error {
	if ferr := pg.fencedErr(op); ferr != nil {
		return fmt.Errorf("%w (the op failed with: %v)", ferr, err)
	}
	return err
}

// retryOnce says whether an op that failed without a dead member (a membership mismatch, or a
// member that gave it up) runs again, once: members behind in the decision log (a dead rank
// another survivor agreed on over p2p, peerfault.go) meet the failure they had not seen, give the
// op up, and run it again over the agreed view at the next op number, so this rank, ahead, does
// too. A rank that skipped a membership call meets the mismatch again and the op fails. Not for
// an in-place op without its input copy (MOONCAKE_PG_FT_INPUT_COPY=0).
func (pg *Group) retryOnce(retried *bool, op string, seq uint64, err error, save, inplace []byte) bool {
	if *retried || (save == nil && len(inplace) > 0) || !pg.joined.Load() {
		return false
	}
	*retried = true
	pg.logf("%s (op #%d): %v; running it again with the group's view (decision #%d)", op, seq, err, pg.m.applied)
	return true
}

// closeOp closes op #seq's tag space on every member before this rank runs the op again at the
// next op number: a member that waits for it over the Conn path (its view differs, so it did not
// take the shared-memory path this rank failed on, or this rank failed before sending it
// anything) fails it at once and runs it again too, instead of waiting out its deadline.
func (pg *Group) closeOp(seq uint64, members []int, err error) {
	ab := &wire.AbortError{Peer: pg.cfg.Rank, Reason: fmt.Sprintf("rank %d runs op #%d again: %v", pg.cfg.Rank, seq, err)}
	pg.ep.Abort(wire.SpaceOf(wire.Tag(seq, 0)), without(members, []int{pg.cfg.Rank}), ab)
}

// catchUp applies the decisions in the log that this rank has not applied.
func (pg *Group) catchUp() {
	for {
		k := pg.m.applied + 1
		if ok, err := pg.st.Check(pg.key("dec", k)); err != nil || !ok {
			return
		}
		d, err := pg.readDecision(k, decisionWait)
		if err != nil || pg.apply(d) != nil {
			return
		}
	}
}

// scratch returns a reusable buffer of n bytes for input copies.
func (pg *Group) scratch(n int) []byte {
	if cap(pg.save) < n {
		pg.save = make([]byte, n)
	}
	return pg.save[:n]
}

// collectiveTimeout is the op deadline of collectives: set_collective_timeout_us when set,
// else Options.CollectiveTimeout, else the group's timeout.
func (pg *Group) collectiveTimeout() time.Duration {
	if d := time.Duration(pg.collTimeout.Load()); d > 0 {
		return min(d, pg.cfg.Timeout)
	}
	if d := pg.cfg.Options.CollectiveTimeout; d > 0 {
		return min(d, pg.cfg.Timeout)
	}
	return pg.cfg.Timeout
}
