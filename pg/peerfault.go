package pg

// Faults met outside a collective: a send or receive whose peer is dead or out of the group,
// and an op whose buffers are laid out for fewer ranks than this rank's view has (its caller
// knows of a failure this rank has not met yet).
//
// As upstream's, such a point-to-point op completes without an exception: its Work succeeds with
// the peer in its failed-ranks hint and get_local_success False (the message is lost; the
// program decides what to do). When the peer is dead (a liveness probe says so) and
// auto_deactivate_on_failure is on, the group first agrees on the failure with the same fault
// decision a failed collective makes (faultDecision), so with auto_sync_on_failure the new view
// (get_active_ranks, get_current_epoch) is in place before the op completes. The agreement runs
// on the op queue, the only goroutine that changes membership, and the Work waits for it.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/mooncake-go/mooncake/wire"
	"github.com/mooncake-go/mooncake/worker"
)

// faultDecision builds the fault decision for the dead ranks met at op #seq (failedSeq: the op
// that failed and is run again at the decision's seq; equal to the current seq when nothing is
// rerun): with auto_deactivate+auto_sync they become inactive in a new epoch, otherwise they are
// excluded from ops (and pending for sync_after_failure under auto_deactivate). nil: they are
// out already (a decision this rank applied meanwhile).
func (pg *Group) faultDecision(dead []int, failedSeq uint64) func(cur *decision) (*decision, string) {
	return func(cur *decision) (*decision, string) {
		participating := without(cur.Active, cur.Excluded)
		if len(without(dead, participating)) == len(dead) {
			return nil, ""
		}
		cur.Kind, cur.Ranks, cur.FailedSeq = "fault", dead, failedSeq
		if pg.cfg.AutoDeactivate && pg.cfg.AutoSync {
			cur.Epoch++
			cur.Active = without(cur.Active, dead)
			cur.Excluded = without(cur.Excluded, dead)
		} else {
			cur.Excluded = union(cur.Excluded, dead)
			if pg.cfg.AutoDeactivate {
				cur.Pending = union(cur.Pending, dead)
			}
		}
		return cur, ""
	}
}

// agreeDead runs on the op queue: it applies the decisions this rank has not seen, probes the
// given ranks that still take part in ops, and has the group agree that those a probe finds
// dead failed (no decision when none is). It returns the ranks agreed dead.
func (pg *Group) agreeDead(ctx context.Context, ranks []int) ([]int, error) {
	pg.catchUp()
	if !pg.joined.Load() {
		return nil, nil
	}
	participating := without(ranksOf(pg.g.ActiveRanks()), pg.g.Excluded())
	var dead []int
	for _, r := range ranks {
		if r == pg.cfg.Rank || !slices.Contains(participating, r) {
			continue
		}
		if err := pg.ep.PeerAlive(ctx, r); err != nil && errors.Is(err, wire.ErrPeerDead) {
			dead = append(dead, r)
		}
	}
	if len(dead) == 0 {
		return nil, nil
	}
	// The majority rule (fence.go): a rank that reaches fewer than half of the group (a minority
	// side of a partition) does not decide; it applies what the group decides.
	if lost := pg.deadMembers(ctx, participating); !hasMajority(len(participating)-len(lost), len(participating)) {
		pg.logf("ranks %v do not answer, and this rank reaches only %d of the group's %d members: waiting for the group's decision",
			dead, len(participating)-len(lost), len(participating))
		pg.awaitDecision(ctx, 2*pg.probeTimeout()+time.Second)
		return nil, fmt.Errorf("rank %d reaches only %d of the group's %d members, fewer than half, so it does not decide that ranks %v failed",
			pg.cfg.Rank, len(participating)-len(lost), len(participating), dead)
	}
	dead = pg.reconcile(ctx, participating, dead)
	seq := pg.g.Seq()
	_, err := pg.propose(pg.faultDecision(dead, seq), func(d *decision) bool {
		return len(without(dead, without(d.Active, d.Excluded))) == len(dead)
	})
	return dead, err
}

// reconcile waits out the fault reconciliation window (set_fault_reconciliation_window_us;
// upstream's coordinator waits so for the reports of every rank before it decides) once dead
// ranks were found among members, then probes the members again: ranks that failed meanwhile
// are agreed on in the same decision (one epoch) instead of one after another. Bounded by ctx;
// without a window (the default: a probe has proved the ranks dead) it returns dead at once.
func (pg *Group) reconcile(ctx context.Context, members, dead []int) []int {
	w := time.Duration(pg.faultWindow.Load())
	if w <= 0 {
		return dead
	}
	pg.logf("ranks %v failed; waiting the fault reconciliation window (%s) before the group decides", dead, w)
	pg.reconciling.Store(true)
	t := time.NewTimer(w)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	pg.reconciling.Store(false)
	return union(dead, pg.deadMembers(ctx, members))
}

// p2pLost ends a send or receive with peer that cannot complete because peer is dead or out of
// the group (why says how it was found): see the file comment.
func (pg *Group) p2pLost(op string, peer int, tag int32, why error) error {
	pg.logf("%s with rank %d (tag %d) not completed: %v", op, peer, tag, why)
	if pg.cfg.AutoDeactivate && pg.joined.Load() && !pg.closed.Load() {
		w := pg.q.Submit("p2p_fault", func(ctx context.Context) error {
			_, err := pg.agreeDead(ctx, []int{peer})
			return err
		})
		if err := w.Wait(-1); err != nil {
			pg.logf("%s with rank %d: agreeing on its failure failed: %v", op, peer, err)
		}
	}
	return &worker.Degraded{Failed: []int{peer}}
}

// byRankWhenRun lays out a per-rank list like byRank, at the time the op runs. A list with
// fewer entries than this rank's view has active ranks is one per active rank of a view in
// which ranks failed that this rank has not met yet (its caller's peers saw them go): when the
// op runs, the ranks of the view are probed and the dead ones agreed on first (agreeDead), then
// the list is laid out by the new view, or the op fails as byRank does.
func (pg *Group) byRankWhenRun(op, what string, bufs [][]byte) (func(ctx context.Context) ([][]byte, error), error) {
	laid, err := pg.byRank(op, what, bufs)
	if err == nil {
		return func(context.Context) ([][]byte, error) { return laid, nil }, nil
	}
	if len(bufs) == 0 || len(bufs) >= len(ranksOf(pg.g.ActiveRanks())) || !pg.joined.Load() {
		return nil, err
	}
	return func(ctx context.Context) ([][]byte, error) {
		if _, err := pg.agreeDead(ctx, ranksOf(pg.g.ActiveRanks())); err != nil {
			return nil, fmt.Errorf("%s on rank %d: %d %s for a group of %d active ranks; agreeing on the failed ranks failed: %w",
				op, pg.cfg.Rank, len(bufs), what, len(ranksOf(pg.g.ActiveRanks())), err)
		}
		return pg.byRank(op, what, bufs)
	}, nil
}
