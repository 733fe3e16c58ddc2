package pg

// Transfers that the transfer-status seam reports failed (Options.TransferCheck; faultseam/ and
// docs/elastic.md, "Fault injection seam").
//
// Upstream's data path learns that a write to a peer failed from its transfer engine's status,
// and its tests fail chosen links by LD_PRELOADing a library that turns COMPLETED statuses into
// FAILED. Here, when the seam is set (only under such an injector), an op that moved its data
// reports the peers it sent to through the seam, and a transfer reported failed is handled so:
//   - a peer that does not answer a liveness probe is dead: the group agrees on it as on any dead
//     peer met outside a collective (agreeDead: the majority rule included);
//   - a peer that answers is alive and reachable on the control plane while this rank's data
//     path to it is broken (one direction is enough). This rank cannot show that what it sent
//     arrived, so with auto_deactivate_on_failure and auto_sync_on_failure it takes itself out
//     of the group: a fault decision naming itself, in the log like every decision. It is then
//     fenced (fence.go) until the members admit it again (join_group + activate_ranks or
//     recover_ranks). A rank removes only itself this way, so no majority is needed and no
//     fencing is weakened: if the other end of the link decided first for the same fault (a
//     link broken both ways, both ends report), that decision stands and this rank stays.
//     Its receives posted from the members then complete flagged (whileMember).
//     Without auto sync membership does not change (the program decides).
//
// Either way the op completes on this rank with the peers in its failed-ranks hint and
// get_local_success False, never an exception, as upstream's: what it computed is either
// correct or flagged.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/worker"
)

// failedTransfers reports to the seam that this rank sent n bytes to each of peers and returns
// those whose transfers failed (every peer when the seam itself fails). nil without a seam.
func (pg *Group) failedTransfers(op string, peers []int, n int) []int {
	check := pg.cfg.Options.TransferCheck
	if check == nil || len(peers) == 0 {
		return nil
	}
	failed, err := check(peers, n)
	if err != nil {
		pg.logf("%s: %v: those transfers count as failed", op, err)
		return peers
	}
	return failed
}

// transfersFailed runs on the op queue: it handles transfers to peers that the seam reported
// failed (see the file comment) and returns the op's outcome on this rank.
func (pg *Group) transfersFailed(ctx context.Context, op string, peers []int) error {
	me := pg.cfg.Rank
	outcome := &worker.Degraded{Failed: peers}
	if !pg.cfg.AutoDeactivate || !pg.joined.Load() {
		pg.logf("%s: transfers to ranks %v failed", op, peers)
		return outcome
	}
	if dead := pg.deadMembers(ctx, peers); len(dead) > 0 {
		pg.logf("%s: transfers to ranks %v failed, and ranks %v do not answer probes", op, peers, dead)
		if _, err := pg.agreeDead(ctx, dead); err != nil {
			pg.logf("%s: agreeing on the failure of ranks %v failed: %v", op, dead, err)
		}
		return outcome
	}
	if !pg.cfg.AutoSync {
		pg.logf("%s: transfers to ranks %v failed while they answer probes (auto_sync_on_failure is off: membership does not change)", op, peers)
		return outcome
	}
	pg.logf("%s: transfers to ranks %v failed while they answer probes: this rank's data path to them is broken, so it leaves the group", op, peers)
	_, err := pg.propose(pg.faultDecision([]int{me}, pg.g.Seq()), func(d *decision) bool {
		// Settled once a fault took out this rank or the other end of a failed link.
		return d.Kind == "fault" && (slices.Contains(d.Ranks, me) || len(without(d.Ranks, peers)) < len(d.Ranks))
	})
	if err != nil {
		pg.logf("%s: leaving the group failed: %v", op, err)
	}
	return outcome
}

// transfersFailedP2P is transfersFailed for a send, which runs outside the op queue: it runs
// there (the only goroutine that changes membership) and the send's Work waits for it.
func (pg *Group) transfersFailedP2P(op string, peers []int) error {
	var out error = &worker.Degraded{Failed: peers}
	w := pg.q.Submit("transfer_fault", func(ctx context.Context) error {
		out = pg.transfersFailed(ctx, op, peers)
		return nil
	})
	if err := w.Wait(-1); err != nil {
		pg.logf("%s: handling the failed transfers to ranks %v failed: %v", op, peers, err)
	}
	return out
}

// errLeft is the cause of a point-to-point op's context when the group removed its peer, or
// this rank, while the op waited on the peer (whileMember).
type errLeft struct{ peer, me int }

func (e errLeft) Error() string {
	if e.me >= 0 {
		return fmt.Sprintf("rank %d is out of the group (a membership decision) while this op waited on rank %d", e.me, e.peer)
	}
	return fmt.Sprintf("the group removed rank %d (a membership decision) while this op waited on it", e.peer)
}

// whileMember returns ctx, cancelled with errLeft when the group's decision log says peer is no
// longer an active member, or this rank is not (it left, or was fenced), and its stop function.
// A send or receive uses it: between a rank and a peer that one of them is out of the group
// nothing more is taken or sent, and the op completes then (flagged: p2pLost), as upstream's do
// when its coordinator's new view arrives, instead of at its deadline. The log is first read one probe interval after the op
// started and then every interval while it waits, on the op queue (the only goroutine that
// applies decisions); an op that completes sooner costs a timer.
func (pg *Group) whileMember(ctx context.Context, peer int) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	every := pg.cfg.Options.P2P.ProbeInterval
	if every <= 0 {
		every = 200 * time.Millisecond
	}
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(every, func() {
		if ctx.Err() != nil || pg.closed.Load() || peer < 0 || peer >= pg.cfg.MaxSize {
			return
		}
		if !pg.ActiveRanks()[peer] {
			cancel(errLeft{peer: peer, me: -1})
			return
		}
		if !pg.joined.Load() {
			cancel(errLeft{peer: peer, me: pg.cfg.Rank})
			return
		}
		mu.Lock()
		if !stopped {
			t.Reset(every)
		}
		mu.Unlock()
	})
	return ctx, func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
		cancel(nil)
	}
}

// peerLeft reports whether ctx (from whileMember) ended because the group removed its peer.
func peerLeft(ctx context.Context) (errLeft, bool) {
	var e errLeft
	ok := errors.As(context.Cause(ctx), &e)
	return e, ok
}

func isLeft(ctx context.Context) bool { _, ok := peerLeft(ctx); return ok }
