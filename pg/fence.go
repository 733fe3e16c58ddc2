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
//   - Between hosts (no shared words) an op that completed here completes only once every
//     member took what this rank sent it (its credits came back: confirmDelivered). A rank cut
//     off after the others' contributions reached it and before its own left (it entered a
//     one-round op last, at the moment of the cut) would otherwise return a value the group
//     never computed; a member that gave this rank up no longer takes its messages (package
//     p2p does not drain a peer it marked dead), so such an op waits and probes the members
//     that did not take it: on the minority side it waits for the group's decision and is
//     fenced; on the majority side the result stands and the rank has the group agree at once
//     that they failed after the op (members that could not complete it take its result:
//     handover.go).
//   - Then the op is checked against the decision log
//     when the others may have given up on this rank during it: it ran for at least half the
//     detection timeout (a partition, a peer that stalls), or this process stalled that long
//     since shortly before it (SIGSTOP; a watcher goroutine ticks every 100 ms and notes gaps).
//     A decision the rank has not applied then fails the op (fenced) or, when the group removed
//     others, reruns it over the new view as the survivors do.
//   - A rank removed by a fault decision is fenced: its ops fail with an error naming the
//     decision (epoch, the rank that made it, the op), get_active_ranks shows the group's view
//     (not a group of one), and it comes back with join_group when the members call
//     recover_ranks (or activate_ranks).

import (
	"context"
	"fmt"
	"sync/atomic"
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
// A member it cannot reach yet (a partition that just healed) is tried again until ctx ends.
func (pg *Group) rejoinLinks(ctx context.Context) error {
	for r, a := range pg.g.ActiveRanks() {
		if !a || r == pg.cfg.Rank {
			continue
		}
		info, err := pg.endpointOf(r, 10*time.Second)
		if err != nil {
			return err
		}
		pg.ep.MarkDead(r, fmt.Errorf("rank %d rejoins the group", pg.cfg.Rank))
		for {
			err := pg.ep.Reconnect(info)
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("rank %d rejoining: %w", pg.cfg.Rank, err)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}

// stallWatch notes when this process stopped running for a while (SIGSTOP, a stalled host): a
// goroutine ticks every stallTick and records a gap of at least min between two ticks.
type stallWatch struct {
	min     time.Duration
	lastRun atomic.Int64 // unix ns of the last tick
	stallAt atomic.Int64 // unix ns of the tick that saw the last long gap (0: none)
	stop    chan struct{}
}

const stallTick = 100 * time.Millisecond

func startStallWatch(min time.Duration) *stallWatch {
	w := &stallWatch{min: min, stop: make(chan struct{})}
	w.lastRun.Store(time.Now().UnixNano())
	go func() {
		t := time.NewTicker(stallTick)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
				now := time.Now().UnixNano()
				if time.Duration(now-w.lastRun.Swap(now)) >= w.min {
					w.stallAt.Store(now)
				}
			}
		}
	}()
	return w
}

// stalledSince reports whether the process stalled (or has not been watched: the op ran
// before the watcher after a stall) at or after since.
func (w *stallWatch) stalledSince(since time.Time) bool {
	now := time.Now()
	if now.Sub(time.Unix(0, w.lastRun.Load())) >= w.min {
		return true // the watcher has not run for that long: this process was stopped
	}
	at := w.stallAt.Load()
	return at != 0 && time.Unix(0, at).After(since)
}

// checkSucceeded is called after an op succeeded (its attempt started at start) on a group
// without same-host fences: when the others may have given up on this rank during the op, it
// consults the decision log. It returns nil (the success stands), rerun true (the group
// removed other ranks during the op: run it again over the new view), or the error to report.
func (pg *Group) checkSucceeded(op string, seq uint64, start time.Time) (rerun bool, err error) {
	if pg.stall == nil {
		return false, nil
	}
	if d := pg.m.last; pg.joined.Load() && d != nil && d.Kind == "fault" && d.FailedSeq == seq {
		return true, nil // confirmDelivered applied the decision that the op failed
	}
	pt := pg.probeTimeout()
	if time.Since(start) < pt/2 && !pg.stall.stalledSince(start.Add(-2*pt)) {
		return false, nil
	}
	ok, cerr := pg.st.Check(pg.key("dec", pg.m.applied+1))
	if cerr != nil {
		return false, opErr{fmt.Errorf("%s (op #%d) on rank %d: the op may have been given up by the group while this rank was cut off or stalled, and the decision log cannot be read to check: %w", op, seq, pg.cfg.Rank, cerr)}
	}
	if !ok {
		return false, nil
	}
	pg.catchUp()
	if ferr := pg.fencedErr(op); ferr != nil {
		return false, ferr
	}
	if d := pg.m.last; pg.joined.Load() && d != nil && d.Kind == "fault" && d.FailedSeq == seq {
		return true, nil
	}
	return false, nil
}

// confirmDelivered waits until every member of the op took what this rank sent it (see the file
// comment), on a group without same-host fences. It returns nil once they all did, or the ones
// that did not are gone (their processes ended: a member that finished the op and exited before
// its credits went out; a group that went on without this rank is made of live members), or
// they do not answer probes and this rank is on the majority side (the op's result, which has
// their contributions, stands; the next op agrees on them); the fenced error when the group
// removed this rank (a minority waits for that decision); else an error.
func (pg *Group) confirmDelivered(ctx context.Context, op string, seq uint64, members []int) error {
	pt := pg.probeTimeout()
	wait := 20 * time.Millisecond // the credits of the op's last messages are on their way
	for {
		var late []int
		for _, m := range members {
			if m == pg.cfg.Rank || pg.ep.Gone(m) {
				continue
			}
			if pg.ep.Dead(m) == nil && pg.ep.Delivered(ctx, m, wait) {
				continue
			}
			late = append(late, m)
			wait = time.Millisecond // the others had as long: just look at them
		}
		if len(late) == 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return opErr{fmt.Errorf("%s (op #%d) on rank %d: ranks %v did not take this rank's last messages of the op before its deadline: %w", op, seq, pg.cfg.Rank, late, err)}
		}
		dead, decided := pg.probeWatchingLog(ctx, late) // at once for a gone process, a probe timeout for a silent one
		if decided {
			pg.catchUp()
			if ferr := pg.fencedErr(op); ferr != nil {
				return ferr
			}
			if d := pg.m.last; d != nil && d.Kind == "fault" && d.FailedSeq == seq {
				return nil // the group agreed this op failed: checkSucceeded runs it again
			}
			continue
		}
		var silent []int
		for _, m := range dead {
			if !pg.ep.Gone(m) {
				silent = append(silent, m)
			}
		}
		pg.catchUp() // a member that answers but does not take them gave this rank up
		if ferr := pg.fencedErr(op); ferr != nil {
			return ferr
		}
		if len(silent) > 0 {
			// The op completed here with every member's contribution. On the minority side
			// (this rank is the one cut off) it must not succeed: it waits for the group's
			// decision, which fences it. On the majority side the result stands, and this
			// rank has the group agree at once that the silent members failed after this op
			// (from the next op on). Members that needed their data (they could not complete
			// the op) take its result from the members that completed it (handover.go). When
			// such a member decided first, that the op failed, this rank runs it again with
			// them instead (checkSucceeded), or, if others returned it already, takes the
			// result too: every survivor ends the op with the same value.
			lost := pg.deadMembers(ctx, members)
			if hasMajority(len(members)-len(lost), len(members)) {
				_, perr := pg.propose(pg.faultDecision(silent, seq+1), func(d *decision) bool {
					return len(without(silent, without(d.Active, d.Excluded))) == len(silent)
				})
				if ferr := pg.fencedErr(op); ferr != nil {
					return ferr
				}
				if perr != nil {
					pg.logf("%s (op #%d): agreeing that ranks %v failed: %v (the next op meets them)", op, seq, silent, perr)
				}
				return nil
			}
			wait := 2*pt + time.Second
			pg.logf("%s (op #%d) completed here, but ranks %v did not take its last messages and this rank reaches only %d of the op's %d members: waiting for the group's decision",
				op, seq, silent, len(members)-len(lost), len(members))
			pg.awaitDecision(ctx, wait)
			if ferr := pg.fencedErr(op); ferr != nil {
				return ferr
			}
			return opErr{fmt.Errorf("%s (op #%d) on rank %d: ranks %v did not take this rank's last messages of the op and do not answer probes, and this rank reaches only %d of the op's %d members, fewer than half, so the op does not complete here; the group decided nothing about it within %s",
				op, seq, pg.cfg.Rank, silent, len(members)-len(lost), len(members), wait)}
		}
		wait = pt / 2 // alive (or gone): wait again for the ones alive
	}
}

// probeWatchingLog probes ranks (deadMembers) while it watches the decision log: a decision that
// lands meanwhile (the other members agreed on a failure in this op, or fenced this rank) ends
// the wait at once (decided), without waiting out the probe timeout.
func (pg *Group) probeWatchingLog(ctx context.Context, ranks []int) (dead []int, decided bool) {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan []int, 1)
	go func() { done <- pg.deadMembers(pctx, ranks) }()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	next := pg.key("dec", pg.m.applied+1)
	for {
		select {
		case d := <-done:
			return d, false
		case <-t.C:
			if ok, err := pg.st.Check(next); err == nil && ok {
				cancel() // a cancelled probe marks nobody dead
				<-done
				return nil, true
			}
		}
	}
}
