package pg

// Elastic membership of a process group: failures, deactivation, recovery and growth.
//
// Every membership change is a decision in a log kept in the rendezvous store (the c10d store
// that torchrun or the test hosts outside the ranks): decision k lives under
// "<group>/mooncake/dec/<k>" and is claimed with an atomic add on ".../dec/<k>/claim"; the
// proposer whose add returns 1 writes it, every other proposer of entry k reads it, applies it
// and checks whether it already does what it wanted (proposals are idempotent: several ranks
// proposing the same change all get Applied). There is no coordinator rank: any member can
// propose, so killing any rank — the one that proposed last included — leaves the survivors
// able to decide. Every rank applies decisions in log order, at the same point of its op
// sequence (membership calls run on the op queue, and failures are agreed per failed op), and
// every op header carries the number of decisions applied, so a rank that skipped one fails
// its next op with a mismatch instead of hanging.
//
// A decision is {kind, ranks, epoch, active, excluded, pending, seq}. Kinds:
//   - fault: the survivors of a failed op agree on the dead ranks (found by liveness probes).
//     auto_deactivate+auto_sync: they become inactive in a new epoch. Otherwise they stay
//     active but excluded from ops (every later op reports them in its failed-ranks hint) until
//     deactivate_ranks, or sync_after_failure (auto_deactivate without auto_sync), or recovery.
//   - deactivate / activate (recover, extend): program calls, made by every active rank.
//   - sync: sync_after_failure deactivating the pending failed ranks.
//
// The op that met the failure is run again over the survivors (in-place inputs are restored
// from a copy taken before the first attempt), so it completes with the survivors' result; its
// Work succeeds with the failed ranks as hint and get_local_success False.
//
// Joining: a process that starts for a rank of a running group (a replacement, or
// is_extension) creates its endpoint, publishes it and stays outside the group until
// join_group, which follows the log until a decision activates it, waits until every other
// member acknowledged that decision (each acknowledges after pointing its link at the new
// endpoint), and takes the group's op sequence number from it. The wait belongs to applying
// the admission, not to join_group: a joiner that finds the decision already in the log (a
// catch-up) waits the same way, since a member resets what it receives from the rank when it
// points its link at it, and anything the joiner sent before that would be lost.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"slices"
	"time"

	"github.com/mooncake-go/mooncake/p2p"
	"github.com/mooncake-go/mooncake/wire"
)

// decisionWait bounds how long a proposer that lost the claim of a log entry waits for the
// winner to write it.
const decisionWait = 30 * time.Second

type decision struct {
	Index     int64  `json:"index"`
	Kind      string `json:"kind"`
	Ranks     []int  `json:"ranks"`
	Epoch     int64  `json:"epoch"`
	Active    []int  `json:"active"`
	Excluded  []int  `json:"excluded,omitempty"`
	Pending   []int  `json:"pending,omitempty"`
	Seq       uint64 `json:"seq"`
	FailedSeq uint64 `json:"failed_seq,omitempty"`
	By        int    `json:"by"`
}

// membership is the rank's elastic state; only the op queue's goroutine changes it.
type membership struct {
	applied int64     // decisions applied
	pending []int     // failed ranks excluded, waiting for sync_after_failure
	last    *decision // the decision applied last
	faultAt uint64    // the highest FailedSeq of the fault decisions applied (handover.go)
}

func (pg *Group) logf(format string, args ...any) {
	log.Printf("mooncake pg %q rank %d: %s", pg.cfg.Name, pg.cfg.Rank, fmt.Sprintf(format, args...))
}

func ranksOf(mask []bool) []int {
	var r []int
	for i, a := range mask {
		if a {
			r = append(r, i)
		}
	}
	return r
}

func maskOf(ranks []int, n int) []bool {
	m := make([]bool, n)
	for _, r := range ranks {
		if r >= 0 && r < n {
			m[r] = true
		}
	}
	return m
}

func without(a, b []int) []int {
	var out []int
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

func union(a, b []int) []int {
	out := append([]int(nil), a...)
	for _, x := range b {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	slices.Sort(out)
	return out
}

// current returns the rank's view as a decision template (next index, same everything).
func (pg *Group) current() *decision {
	return &decision{
		Index: pg.m.applied + 1, Epoch: pg.g.Epoch(), Active: ranksOf(pg.g.ActiveRanks()),
		Excluded: pg.g.Excluded(), Pending: append([]int(nil), pg.m.pending...),
		Seq: pg.g.Seq(), By: pg.cfg.Rank,
	}
}

func (pg *Group) readDecision(k int64, wait time.Duration) (*decision, error) {
	v, err := pg.st.Get(pg.key("dec", k), wait)
	if err != nil {
		return nil, fmt.Errorf("reading membership decision #%d: %w", k, err)
	}
	var d decision
	if err := json.Unmarshal(v, &d); err != nil || d.Index != k {
		return nil, fmt.Errorf("membership decision #%d in the store is malformed (%q)", k, v)
	}
	return &d, nil
}

// propose appends the decision build returns (nil: nothing to change; a reject reason: refuse)
// unless the log already holds one that satisfies the proposal; it returns the decision that
// satisfied it (nil when nothing had to change).
func (pg *Group) propose(build func(cur *decision) (*decision, string), satisfied func(d *decision) bool) (*decision, error) {
	for {
		k := pg.m.applied + 1
		ok, err := pg.st.Check(pg.key("dec", k))
		if err != nil {
			return nil, err
		}
		if !ok {
			if !pg.joined.Load() {
				// Only members propose: a rank the group removed (it may have learnt it just
				// now, from the entry before) never decides for the group.
				return nil, fmt.Errorf("rank %d is not a member of the group (epoch %d): it does not propose membership decisions", pg.cfg.Rank, pg.g.Epoch())
			}
			d, reject := build(pg.current())
			if reject != "" {
				return nil, &rejection{reject}
			}
			if d == nil {
				return nil, nil
			}
			n, err := pg.st.Add(pg.key("dec", k, "claim"), 1)
			if err != nil {
				return nil, err
			}
			if n == 1 {
				d.Index, d.By = k, pg.cfg.Rank
				b, _ := json.Marshal(d)
				if err := pg.st.Set(pg.key("dec", k), b); err != nil {
					return nil, err
				}
				return d, pg.apply(d)
			}
		}
		d, err := pg.readDecision(k, decisionWait)
		if err != nil {
			return nil, err
		}
		if err := pg.apply(d); err != nil {
			return nil, err
		}
		if satisfied(d) {
			return d, nil
		}
	}
}

type rejection struct{ reason string }

func (r *rejection) Error() string { return r.reason }

// endpointOf reads rank r's published endpoint.
func (pg *Group) endpointOf(r int, wait time.Duration) (p2p.Info, error) {
	var pi p2p.Info
	v, err := pg.st.Get(endpointKey(pg.cfg.Name, r), wait)
	if err != nil {
		return pi, fmt.Errorf("rank %d has not published an endpoint: %w", r, err)
	}
	if err := json.Unmarshal(v, &pi); err != nil || pi.Rank != r {
		return pi, fmt.Errorf("rank %d published a bad endpoint %q", r, v)
	}
	return pi, nil
}

// apply installs decision d.
func (pg *Group) apply(d *decision) error {
	me := pg.cfg.Rank
	n := pg.cfg.MaxSize
	active, excluded := maskOf(d.Active, n), maskOf(d.Excluded, n)
	becameMember := !pg.joined.Load() && d.Kind == "activate" && slices.Contains(d.Ranks, me)
	switch {
	case becameMember:
		// Point a link at every member's current endpoint.
		for _, r := range d.Active {
			if r == me || excluded[r] {
				continue
			}
			info, err := pg.endpointOf(r, 10*time.Second)
			if err == nil {
				err = pg.ep.Reconnect(info)
			}
			if err != nil && pg.gone(info) {
				// A member that died during the recovery: the group's next op finds it dead
				// and removes it, this rank included.
				pg.logf("joining at decision #%d: member rank %d is gone (%v)", d.Index, r, err)
				pg.ep.MarkDead(r, err)
				continue
			}
			if err != nil {
				return fmt.Errorf("joining at decision #%d: %w", d.Index, err)
			}
		}
	case pg.joined.Load():
		for _, r := range d.Ranks {
			if r == me {
				continue
			}
			switch {
			case d.Kind == "activate":
				info, err := pg.endpointOf(r, 10*time.Second)
				if err == nil {
					err = pg.ep.Reconnect(info)
				}
				if err != nil {
					return fmt.Errorf("admitting rank %d at decision #%d: %w", r, d.Index, err)
				}
			case d.Kind == "fault":
				pg.ep.MarkDead(r, fmt.Errorf("the group declared rank %d failed (decision #%d, epoch %d)", r, d.Index, d.Epoch))
			}
		}
	}
	if becameMember {
		pg.joined.Store(true)
		pg.g.SetSeq(d.Seq)
	}
	if !becameMember && pg.joined.Load() && d.Kind == "fault" && d.Seq > d.FailedSeq &&
		pg.g.Seq() == d.FailedSeq {
		// The members that met the failure ran op #FailedSeq, aborted it (its tag space is
		// closed on every member) and run it again at #Seq. This rank applies the decision
		// before starting that op (a catch-up between ops: get_active_ranks after a slow p2p,
		// say), so its next op is that rerun: it takes #Seq too, or it would wait at the
		// aborted #FailedSeq while the others wait for it at #Seq.
		pg.g.SetSeq(d.Seq)
	}
	if d.Kind == "fault" {
		pg.m.faultAt = max(pg.m.faultAt, d.FailedSeq)
	}
	if pg.joined.Load() && active[me] {
		pg.publishDone(d) // handover.go
	}
	if becameMember {
		pg.fenced.Store(nil)
		pg.g.ResetFence()
	}
	if pg.joined.Load() && !active[me] {
		pg.joined.Store(false) // dropped by the group, or left it
		if d.Kind == "fault" || d.Kind == "sync" {
			// Removed as failed while it lives on (frozen, cut off): fenced (fence.go).
			pg.fenced.Store(d)
			pg.logf("fenced: membership decision #%d by rank %d declared this rank failed at op #%d (epoch %d)", d.Index, d.By, d.FailedSeq, d.Epoch)
		}
	}
	if !pg.joined.Load() && pg.fenced.Load() == nil {
		// Outside the group its ops run over itself alone. A fenced rank keeps the group's
		// view instead (get_active_ranks), and its ops fail.
		active, excluded = maskOf([]int{me}, n), nil
	}
	if err := pg.g.SetMembership(uint32(d.Index), d.Epoch, active, excluded); err != nil {
		return err
	}
	pg.m.applied = d.Index
	pg.m.pending = d.Pending
	pg.m.last = d
	pg.viewChanged()
	if pg.joined.Load() && d.Kind == "activate" {
		if err := pg.st.Set(pg.key("ack", d.Index, me), []byte("1")); err != nil {
			return err
		}
	}
	pg.logf("membership decision #%d by rank %d: %s %v -> epoch %d, active %v, excluded %v, pending %v (op #%d)",
		d.Index, d.By, d.Kind, d.Ranks, d.Epoch, d.Active, d.Excluded, d.Pending, d.Seq)
	if becameMember {
		// Bounded like join_group itself: by the group's op timeout (the members may call
		// recover_ranks/extend_group_size_to some time apart).
		wait := pg.cfg.Timeout
		if wait <= 0 {
			wait = DefaultTimeout
		}
		return pg.awaitAdmission(d, time.Now().Add(wait))
	}
	return nil
}

// gone reports whether the process behind endpoint info does not answer a probe.
func (pg *Group) gone(info p2p.Info) bool {
	if info.Segment == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), pg.probeTimeout())
	defer cancel()
	return pg.probe(ctx, info) != nil
}

// awaitAdmission waits until every other member acknowledged decision d, which admitted this
// rank: each acknowledges after pointing its link at this rank's endpoint, which resets what
// it receives from this rank, so a message sent before that would be thrown away. It runs
// wherever the admission is applied: in join_group, and in a catch-up (a decision already in
// the log when the rank looks, e.g. from get_active_ranks or the start of join_group).
func (pg *Group) awaitAdmission(d *decision, deadline time.Time) error {
	for _, r := range pg.g.Members() {
		if r == pg.cfg.Rank {
			continue
		}
		for {
			// A member that dies before it acknowledges (a fault during the recovery) is not
			// waited for: the group's next op finds it dead and removes it, this rank included.
			_, err := pg.st.Get(pg.key("ack", d.Index, r), min(time.Until(deadline), pg.probeTimeout()))
			if err == nil {
				break
			}
			ctx, cancel := context.WithTimeout(context.Background(), pg.probeTimeout())
			perr := pg.ep.PeerAlive(ctx, r)
			cancel()
			if perr != nil && errors.Is(perr, wire.ErrPeerDead) {
				pg.logf("rank %d did not acknowledge decision #%d and is dead: not waiting for it", r, d.Index)
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("rank %d joining at decision #%d: rank %d did not acknowledge the admission (every active rank must call activate_ranks/recover_ranks/extend_group_size_to): %w",
					pg.cfg.Rank, d.Index, r, err)
			}
		}
	}
	return nil
}
