package pg

// The optional observer of a group's ops and membership (metrics: pg/pgmetrics). Hook points:
// submitTo and Recv (ops.go) and viewChanged (group.go), each one line that calls into this file.
// A group without an observer pays one nil check per op.

import (
	"context"
	"time"
)

// Observer is told about a group's ops and membership changes. Options.Observer, nil = none.
// Its methods run on the goroutine that ran the op or applied the change, so they must be quick
// and must not call back into the group.
type Observer interface {
	// OpDone reports one finished op: op is the collective's name ("all_reduce", "send",
	// "recv", ... as in Ops), bytes the size of this rank's buffer for it (the input;
	// scatter: the output; recv: the receive buffer), took the time from the start of its run
	// to its end (reruns over survivors included; a recv: from posting to arrival), err what
	// it returned: nil, a *worker.Degraded (completed over the survivors) or a failure.
	OpDone(op string, bytes int, took time.Duration, err error)
	// ViewChanged reports the group's view: at creation and after every membership decision
	// the rank applied.
	ViewChanged(v View)
}

// View is a rank's view of the group's membership.
type View struct {
	Epoch     int64  // membership epoch
	Active    []bool // active mask, MaxSize long
	Decisions int64  // membership decisions applied (each is one membership change)
	Member    bool   // this rank is an active member
}

// Ops are the op names an Observer sees.
var Ops = []string{"broadcast", "all_reduce", "reduce", "all_gather", "gather", "scatter",
	"reduce_scatter", "all_to_all", "barrier", "send", "recv"}

// observed wraps an op's function so that the observer sees it finish (fn itself without one).
func (pg *Group) observed(op string, bytes int, fn func(ctx context.Context) error) func(ctx context.Context) error {
	o := pg.cfg.Options.Observer
	if o == nil {
		return fn
	}
	return func(ctx context.Context) error {
		start := time.Now()
		err := fn(ctx)
		o.OpDone(op, bytes, time.Since(start), err)
		return err
	}
}

// observeStart is the time an op starts for the observer (zero, not read, without one).
func (pg *Group) observeStart() time.Time {
	if pg.cfg.Options.Observer == nil {
		return time.Time{}
	}
	return time.Now()
}

// observeRecv reports a receive posted at start (observeStart) that finished with err.
func (pg *Group) observeRecv(bytes int, start time.Time, err error) {
	if o := pg.cfg.Options.Observer; o != nil {
		o.OpDone("recv", bytes, time.Since(start), err)
	}
}

// observeView reports the current view.
func (pg *Group) observeView() {
	if o := pg.cfg.Options.Observer; o != nil {
		act := pg.g.ActiveRanks()
		o.ViewChanged(View{Epoch: pg.g.Epoch(), Active: act, Decisions: pg.m.applied,
			Member: pg.cfg.Rank < len(act) && act[pg.cfg.Rank]})
	}
}

// sizeOf is the total length of bufs.
func sizeOf(bufs [][]byte) int {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	return n
}
