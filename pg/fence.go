package pg

// Fencing and the majority rule: a rank the group went on without never completes an op of
// that group successfully, and a rank cut off from most of the group never decides on its own.
//
//   - Same-host ops are fenced per op in package collective (a peer that gives up on a rank
//     marks the rank's arena word; the rank then fails that op with a FencedError). The rank
//     then learns the group's decision from the log and reports it.
//   - A decision that removes failed ranks is proposed only by a rank that still reaches at
//     least half of the op's members (itself included). A rank that reaches fewer (a minority
//     side of a partition, or a rank that was frozen while the others went on) does not
//     propose: it waits for the group's decision and applies it. When both sides are exactly
//     half (1 of 2, 2 of 4), both may propose and the rendezvous store's atomic claim of the
//     log entry decides: the first proposal wins, the other side applies it and is fenced. So
//     a lone survivor of a group of two goes on, as upstream's does.
//   - A rank removed by a fault decision is fenced: its ops fail with an error naming the
//     decision (epoch, the rank that made it, the op), get_active_ranks shows the group's view
//     (not a group of one), and it comes back with join_group when the members call
//     recover_ranks (or activate_ranks).

import (
	"context"
	"fmt"
	"time"
)

// fencedErr is the error of an op on a fenced rank, nil when the rank is not fenced.
func (pg *Group) fencedErr(op string) error {
	d := pg.fenced.Load()
	if d == nil {
		return nil
	}
	at := ""
	if d.FailedSeq > 0 || d.Kind == "fault" {
		at = fmt.Sprintf(" at op #%d", d.FailedSeq)
	}
	return opErr{fmt.Errorf("%s on rank %d: fenced out of the group: membership decision #%d by rank %d declared this rank failed%s and the group went on without it (epoch %d, active %v); no op of this group completes here until the members call recover_ranks([%d]) and this rank calls join_group",
		op, pg.cfg.Rank, d.Index, d.By, at, d.Epoch, d.Active, pg.cfg.Rank)}
}

// hasMajority reports whether survivors of members may decide on a failure: at least half
// (see the file comment for ties).
func hasMajority(survivors, members int) bool { return 2*survivors >= members }

// probeTimeout is the endpoint's detection timeout of a stopped or cut-off peer.
func (pg *Group) probeTimeout() time.Duration {
	if d := pg.cfg.Options.P2P.ProbeTimeout; d > 0 {
		return d
	}
	return 2 * time.Second
}

// awaitDecision waits up to wait (and ctx) for the next decision of the log, applies it and
// every later one; it reports whether one was applied.
func (pg *Group) awaitDecision(ctx context.Context, wait time.Duration) bool {
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl))
	}
	before := pg.m.applied
	if wait > 0 {
		if d, err := pg.readDecision(pg.m.applied+1, wait); err == nil {
			pg.apply(d)
		}
	}
	pg.catchUp()
	return pg.m.applied > before
}

// rejoinLinks resets this rank's links to the group's members before a fenced rank asks to
// join again: the members reset theirs to it when they admit it (they marked it dead), so
// both directions restart from zero and nothing either side left behind is read.
func (pg *Group) rejoinLinks() error {
	for r, a := range pg.g.ActiveRanks() {
		if !a || r == pg.cfg.Rank {
			continue
		}
		info, err := pg.endpointOf(r, 10*time.Second)
		if err != nil {
			return err
		}
		pg.ep.MarkDead(r, fmt.Errorf("rank %d rejoins the group", pg.cfg.Rank))
		if err := pg.ep.Reconnect(info); err != nil {
			return fmt.Errorf("rank %d rejoining: %w", pg.cfg.Rank, err)
		}
	}
	return nil
}
