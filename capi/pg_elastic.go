package main

// Elastic membership of a process group: failures, deactivation, recovery and growth.
//
// Every membership change is a decision in a log kept in the rendezvous store (the c10d store
// that torchrun or the test hosts outside the ranks): decision k lives under
// "<group>/mooncake/dec/<k>" and is claimed with an atomic add on ".../dec/<k>/claim"; the
// proposer whose add returns 1 writes it, every other proposer of slot k reads it, applies it
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
// endpoint), and takes the group's op sequence number from it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/mooncake-go/mooncake/collective"
	"github.com/mooncake-go/mooncake/p2p"
	"github.com/mooncake-go/mooncake/worker"
)

// Proposal statuses (mooncake_pg.ProposalStatus) and sync statuses (SyncAfterFailureStatus).
const (
	statusRejected      = 0
	statusApplied       = 1
	statusAppliedDroped = 2

	syncReconciled = 0
	syncNoPending  = 1
	syncRejected   = 2
)

// decisionWait bounds how long a proposer that lost the claim of a slot waits for the winner
// to write it.
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
	applied int64 // decisions applied
	joined  bool  // an active member (false: a joining process before join_group)
	pending []int // failed ranks excluded, waiting for sync_after_failure
}

func (pg *pgroup) key(parts ...any) string {
	k := pg.cfg.name + "/mooncake"
	for _, p := range parts {
		k += "/" + fmt.Sprint(p)
	}
	return k
}

func (pg *pgroup) logf(format string, args ...any) {
	log.Printf("mooncake pg %q rank %d: %s", pg.cfg.name, pg.cfg.rank, fmt.Sprintf(format, args...))
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
func (pg *pgroup) current() *decision {
	return &decision{
		Index: pg.m.applied + 1, Epoch: pg.g.Epoch(), Active: ranksOf(pg.g.ActiveRanks()),
		Excluded: pg.g.Excluded(), Pending: append([]int(nil), pg.m.pending...),
		Seq: pg.g.Seq(), By: pg.cfg.rank,
	}
}

func (pg *pgroup) readDecision(k int64, wait time.Duration) (*decision, error) {
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
func (pg *pgroup) propose(build func(cur *decision) (*decision, string), satisfied func(d *decision) bool) (*decision, error) {
	for {
		k := pg.m.applied + 1
		ok, err := pg.st.Check(pg.key("dec", k))
		if err != nil {
			return nil, err
		}
		if !ok {
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
				d.Index, d.By = k, pg.cfg.rank
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
func (pg *pgroup) endpointOf(r int, wait time.Duration) (p2p.Info, error) {
	var pi p2p.Info
	v, err := pg.st.Get(endpointKey(pg.cfg.name, r), wait)
	if err != nil {
		return pi, fmt.Errorf("rank %d has not published an endpoint: %w", r, err)
	}
	if err := json.Unmarshal(v, &pi); err != nil || pi.Rank != r {
		return pi, fmt.Errorf("rank %d published a bad endpoint %q", r, v)
	}
	return pi, nil
}

// apply installs decision d.
func (pg *pgroup) apply(d *decision) error {
	me := pg.cfg.rank
	n := pg.cfg.maxSize
	active, excluded := maskOf(d.Active, n), maskOf(d.Excluded, n)
	becameMember := !pg.m.joined && d.Kind == "activate" && slices.Contains(d.Ranks, me)
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
			if err != nil {
				return fmt.Errorf("joining at decision #%d: %w", d.Index, err)
			}
		}
	case pg.m.joined:
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
	if err := pg.g.SetMembership(uint32(d.Index), d.Epoch, active, excluded); err != nil {
		return err
	}
	pg.m.applied = d.Index
	pg.m.pending = d.Pending
	if pg.onView != nil {
		pg.onView(pg.extent())
	}
	if becameMember {
		pg.m.joined = true
		pg.g.SetSeq(d.Seq)
	}
	if pg.m.joined && !active[me] {
		pg.m.joined = false // dropped by the group
	}
	if pg.m.joined && d.Kind == "activate" {
		if err := pg.st.Set(pg.key("ack", d.Index, me), []byte("1")); err != nil {
			return err
		}
	}
	pg.logf("membership decision #%d by rank %d: %s %v -> epoch %d, active %v, excluded %v, pending %v (op #%d)",
		d.Index, d.By, d.Kind, d.Ranks, d.Epoch, d.Active, d.Excluded, d.Pending, d.Seq)
	return nil
}

// extent is the group's active extent: the highest active rank + 1 (what torch's
// get_world_size reports for the group, through the shim).
func (pg *pgroup) extent() int {
	act := pg.g.ActiveRanks()
	for r := len(act) - 1; r >= 0; r-- {
		if act[r] {
			return r + 1
		}
	}
	return pg.cfg.size
}

// ---------------------------------------------------------------- faults during ops

// isPeerFailure reports whether err is a failure a dead peer can explain (not a mismatch,
// not bad arguments, not a cancellation).
func isPeerFailure(err error) bool {
	var me *collective.MismatchError
	if errors.As(err, &me) {
		return false
	}
	var pe *collective.PeerError
	var ae *collective.AbortError
	return errors.As(err, &pe) || errors.As(err, &ae) || errors.Is(err, collective.ErrPeerDead)
}

// deadMembers probes the members of the op that failed and returns those that are gone.
func (pg *pgroup) deadMembers(ctx context.Context, members []int) []int {
	var dead []int
	for _, m := range members {
		if m == pg.cfg.rank {
			continue
		}
		if err := pg.ep.PeerAlive(ctx, m); err != nil && errors.Is(err, collective.ErrPeerDead) {
			dead = append(dead, m)
		}
	}
	return dead
}

// runFT runs a collective so that peer failures do not fail it: see the file comment.
// inplace is the buffer the op overwrites with its result (nil when inputs and outputs are
// separate); fn gets a save buffer for it (collective.Group.AllReduceOrRestore: a failed
// attempt leaves the input in place, and the same-host path saves it chunk by chunk as it
// reads it) unless MOONCAKE_PG_FT_INPUT_COPY=0 (then save is nil, and a peer failure during
// an all_reduce or reduce fails it, after the group agreed on the failure).
func (pg *pgroup) runFT(ctx context.Context, op string, inplace []byte, fn func(ctx context.Context, save []byte) error) error {
	if !pg.m.joined {
		return opErr{fmt.Errorf("%s on rank %d: this rank is not an active member of the group (call join_group, or it was deactivated)", op, pg.cfg.rank)}
	}
	var save []byte
	if len(inplace) > 0 && len(pg.g.Members()) > 1 && os.Getenv("MOONCAKE_PG_FT_INPUT_COPY") != "0" {
		save = pg.scratch(len(inplace))
	}
	var failed []int
	for {
		members := pg.g.Members()
		seq := pg.g.Seq()
		err := fn(ctx, save)
		if err == nil {
			if x := union(failed, pg.g.Excluded()); len(x) > 0 {
				return &worker.Degraded{Failed: x}
			}
			return nil
		}
		var mm *collective.MismatchError
		if errors.As(err, &mm) && mm.Membership {
			// A member is ahead of this rank in the decision log (it saw a failure this rank
			// did not, or a membership call this rank did not make): catch up, so the next op
			// runs with the same view on every rank.
			pg.catchUp()
			return err
		}
		if !isPeerFailure(err) || ctx.Err() != nil {
			pg.catchUp()
			return err
		}
		dead := pg.deadMembers(ctx, members)
		if len(dead) == 0 {
			// Nobody died: the op failed for another reason (a member that aborted it, for
			// instance because it is ahead in the decision log). Catch up and report it.
			pg.catchUp()
			return err
		}
		d, perr := pg.propose(func(cur *decision) (*decision, string) {
			participating := without(cur.Active, cur.Excluded)
			if len(without(dead, participating)) == len(dead) {
				return nil, "" // already out (a decision this rank applied meanwhile)
			}
			cur.Kind, cur.Ranks, cur.FailedSeq = "fault", dead, seq
			if pg.cfg.autoDeactivate && pg.cfg.autoSync {
				cur.Epoch++
				cur.Active = without(cur.Active, dead)
				cur.Excluded = without(cur.Excluded, dead)
			} else {
				cur.Excluded = union(cur.Excluded, dead)
				if pg.cfg.autoDeactivate {
					cur.Pending = union(cur.Pending, dead)
				}
			}
			return cur, ""
		}, func(d *decision) bool { return d.Kind == "fault" && d.FailedSeq == seq })
		if perr != nil {
			return fmt.Errorf("%w; agreeing on the failed ranks failed too: %w", err, perr)
		}
		if !pg.m.joined {
			return opErr{fmt.Errorf("%s on rank %d: the group declared this rank failed (epoch %d): %w", op, pg.cfg.rank, pg.g.Epoch(), err)}
		}
		if d != nil {
			failed = union(failed, d.Ranks)
		} else {
			failed = union(failed, dead)
		}
		if save == nil && len(inplace) > 0 {
			// MOONCAKE_PG_FT_INPUT_COPY=0: the input may be half overwritten; the group
			// moved on without the dead ranks, this op reports the failure.
			return fmt.Errorf("%w (MOONCAKE_PG_FT_INPUT_COPY=0: the op is not rerun over the survivors)", err)
		}
	}
}

// catchUp applies the decisions in the log that this rank has not applied.
func (pg *pgroup) catchUp() {
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
func (pg *pgroup) scratch(n int) []byte {
	if cap(pg.save) < n {
		pg.save = make([]byte, n)
	}
	return pg.save[:n]
}

// ---------------------------------------------------------------- program calls

// memberResult is the JSON answer of mc_pg_membership.
type memberResult struct {
	Status       int    `json:"status"`
	NewEpoch     int64  `json:"new_epoch"`
	DroppedRanks []int  `json:"dropped_ranks"`
	RejectReason string `json:"reject_reason"`
	PeerState    []bool `json:"peer_state,omitempty"`
	NumSynced    int    `json:"num_synced"`
}

type memberRequest struct {
	Op                  string `json:"op"`
	Ranks               []int  `json:"ranks"`
	Size                int    `json:"size"`
	CollectiveTimeoutUS int64  `json:"collective_timeout_us"`
}

// membershipCall runs one program call on the op queue and waits for it.
func (pg *pgroup) membershipCall(req memberRequest) (memberResult, error) {
	switch req.Op {
	case "peer_state":
		return memberResult{PeerState: pg.peerState(req.Ranks)}, nil
	case "configure":
		pg.collTimeout.Store(int64(time.Duration(max(req.CollectiveTimeoutUS, 0)) * time.Microsecond))
		return memberResult{}, nil
	}
	var res memberResult
	w := pg.q.Submit(req.Op, func(ctx context.Context) error {
		var err error
		res, err = pg.membershipOp(ctx, req)
		return err
	})
	if err := w.Wait(-1); err != nil {
		return res, err
	}
	res.NewEpoch = pg.g.Epoch()
	res.NumSynced = len(pg.g.Members())
	if !pg.m.joined {
		res.NumSynced = 0
	}
	return res, nil
}

func (pg *pgroup) checkRanks(op string, ranks []int) error {
	if len(ranks) == 0 {
		return invalid(op + ": no ranks given")
	}
	for _, r := range ranks {
		if r < 0 || r >= pg.cfg.maxSize {
			return invalid(fmt.Sprintf("%s: rank %d is outside the group's %d slots (max_group_size)", op, r, pg.cfg.maxSize))
		}
	}
	return nil
}

func (pg *pgroup) membershipOp(ctx context.Context, req memberRequest) (memberResult, error) {
	me := pg.cfg.rank
	switch req.Op {
	case "num_synced":
		return memberResult{}, nil
	case "join":
		return pg.join(ctx)
	case "deactivate":
		if err := pg.checkRanks("deactivate_ranks", req.Ranks); err != nil {
			return memberResult{}, err
		}
		if !pg.m.joined {
			return memberResult{Status: statusRejected, RejectReason: fmt.Sprintf("rank %d is not an active member", me)}, nil
		}
		if slices.Contains(req.Ranks, me) {
			return memberResult{Status: statusRejected, RejectReason: fmt.Sprintf("rank %d cannot deactivate itself", me)}, nil
		}
		_, err := pg.propose(func(cur *decision) (*decision, string) {
			if len(without(req.Ranks, cur.Active)) == len(req.Ranks) {
				return nil, "" // none of them is active: nothing to do
			}
			cur.Kind, cur.Ranks = "deactivate", req.Ranks
			cur.Epoch++
			cur.Active = without(cur.Active, req.Ranks)
			cur.Excluded = without(cur.Excluded, req.Ranks)
			cur.Pending = without(cur.Pending, req.Ranks)
			if len(cur.Active) == 0 {
				return nil, "deactivating these ranks would leave no active rank"
			}
			return cur, ""
		}, func(d *decision) bool { return len(without(req.Ranks, d.Active)) == len(req.Ranks) })
		return proposalResult(nil, err)
	case "activate", "extend":
		ranks := req.Ranks
		name := "activate_ranks"
		if req.Op == "extend" {
			name = "extend_group_size_to"
			if req.Size < 1 || req.Size > pg.cfg.maxSize {
				return memberResult{}, invalid(fmt.Sprintf("extend_group_size_to: size %d is outside [1, %d] (max_group_size)", req.Size, pg.cfg.maxSize))
			}
			ranks = nil
			act := pg.g.ActiveRanks()
			for r := 0; r < req.Size; r++ {
				if !act[r] {
					ranks = append(ranks, r)
				}
			}
			if len(ranks) == 0 {
				return memberResult{Status: statusApplied}, nil
			}
		}
		if err := pg.checkRanks(name, ranks); err != nil {
			return memberResult{}, err
		}
		if !pg.m.joined {
			return memberResult{Status: statusRejected, RejectReason: fmt.Sprintf("rank %d is not an active member (call join_group)", me)}, nil
		}
		var dropped []int
		d, err := pg.propose(func(cur *decision) (*decision, string) {
			dropped = nil
			var admit []int
			for _, r := range ranks {
				if r == me {
					continue
				}
				if slices.Contains(cur.Active, r) && !slices.Contains(cur.Excluded, r) && !pg.replaced(r) {
					continue // already a member
				}
				if !pg.peerState([]int{r})[0] {
					dropped = append(dropped, r)
					continue
				}
				admit = append(admit, r)
			}
			if len(admit) == 0 {
				if len(dropped) > 0 {
					return nil, fmt.Sprintf("ranks %v have no live published endpoint (start them and call join_group)", dropped)
				}
				return nil, ""
			}
			cur.Kind, cur.Ranks = "activate", admit
			cur.Epoch++
			cur.Active = union(cur.Active, admit)
			cur.Excluded = without(cur.Excluded, admit)
			cur.Pending = without(cur.Pending, admit)
			return cur, ""
		}, func(d *decision) bool {
			for _, r := range ranks {
				if !slices.Contains(d.Active, r) || slices.Contains(d.Excluded, r) {
					if !slices.Contains(dropped, r) {
						return false
					}
				}
			}
			return true
		})
		res, err := proposalResult(d, err)
		if res.Status == statusApplied && len(dropped) > 0 {
			res.Status, res.DroppedRanks = statusAppliedDroped, dropped
		}
		return res, err
	case "sync":
		if !pg.cfg.autoDeactivate {
			return memberResult{Status: syncRejected, RejectReason: "auto_deactivate_on_failure is off: failed ranks stay members until deactivate_ranks"}, nil
		}
		if !pg.m.joined {
			return memberResult{Status: syncRejected, RejectReason: fmt.Sprintf("rank %d is not an active member", me)}, nil
		}
		if len(pg.m.pending) == 0 {
			return memberResult{Status: syncNoPending}, nil
		}
		pending := append([]int(nil), pg.m.pending...)
		_, err := pg.propose(func(cur *decision) (*decision, string) {
			if len(cur.Pending) == 0 {
				return nil, ""
			}
			cur.Kind, cur.Ranks = "sync", cur.Pending
			cur.Epoch++
			cur.Active = without(cur.Active, cur.Pending)
			cur.Excluded = without(cur.Excluded, cur.Pending)
			cur.Pending = nil
			return cur, ""
		}, func(d *decision) bool { return len(without(pending, d.Active)) == len(pending) })
		return outcome(err, syncReconciled, syncRejected)
	}
	return memberResult{}, invalid(fmt.Sprintf("unknown membership call %q", req.Op))
}

func proposalResult(_ *decision, err error) (memberResult, error) {
	return outcome(err, statusApplied, statusRejected)
}

// outcome turns a proposal's error into the answer: ok, a rejection with its reason, or the
// error itself.
func outcome(err error, ok, rejected int) (memberResult, error) {
	if err != nil {
		var rj *rejection
		if errors.As(err, &rj) {
			return memberResult{Status: rejected, RejectReason: rj.reason}, nil
		}
		return memberResult{}, err
	}
	return memberResult{Status: ok}, nil
}

// replaced reports whether rank r published an endpoint other than the one this rank's link
// points at (a replacement process).
func (pg *pgroup) replaced(r int) bool {
	info, err := pg.endpointOf(r, time.Millisecond)
	if err != nil {
		return false
	}
	seg, id := pg.ep.Incarnation(r)
	return pg.ep.Dead(r) != nil || seg != info.Segment || id != info.Engine
}

// peerState: alive and reachable, with a published endpoint.
func (pg *pgroup) peerState(ranks []int) []bool {
	out := make([]bool, len(ranks))
	for i, r := range ranks {
		if r < 0 || r >= pg.cfg.maxSize {
			continue
		}
		if r == pg.cfg.rank {
			out[i] = true
			continue
		}
		if ok, err := pg.st.Check(endpointKey(pg.cfg.name, r)); err != nil || !ok {
			continue
		}
		info, err := pg.endpointOf(r, time.Second)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		out[i] = pg.probe(ctx, info) == nil
		cancel()
	}
	return out
}

func (pg *pgroup) probe(ctx context.Context, info p2p.Info) error {
	if pr, ok := pg.fabric.(p2p.Prober); ok {
		return pr.Probe(ctx, info.Segment, info.Engine)
	}
	return nil
}

// join follows the decision log until a decision activates this rank, then waits until every
// other member acknowledged it.
func (pg *pgroup) join(ctx context.Context) (memberResult, error) {
	pg.catchUp() // a rank the group deactivated learns it here
	if pg.m.joined {
		return memberResult{Status: statusApplied}, nil
	}
	if err := pg.st.Set(pg.key("join", pg.cfg.rank), []byte(pg.ep.Info().Segment)); err != nil {
		return memberResult{}, err
	}
	pg.logf("waiting to be admitted (join_group)")
	for !pg.m.joined {
		wait := time.Until(deadlineOf(ctx))
		d, err := pg.readDecision(pg.m.applied+1, wait)
		if err != nil {
			return memberResult{}, fmt.Errorf("join_group on rank %d: no member admitted this rank (activate_ranks/recover_ranks/extend_group_size_to): %w", pg.cfg.rank, err)
		}
		if err := pg.apply(d); err != nil {
			return memberResult{}, err
		}
		if pg.m.joined {
			for _, r := range pg.g.Members() {
				if r == pg.cfg.rank {
					continue
				}
				if _, err := pg.st.Get(pg.key("ack", d.Index, r), time.Until(deadlineOf(ctx))); err != nil {
					return memberResult{}, fmt.Errorf("join_group on rank %d: rank %d did not acknowledge the admission (every active rank must call activate_ranks/recover_ranks): %w", pg.cfg.rank, r, err)
				}
			}
		}
	}
	pg.logf("joined at epoch %d", pg.g.Epoch())
	return memberResult{Status: statusApplied}, nil
}

func deadlineOf(ctx context.Context) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl
	}
	return time.Now().Add(defaultPGTimeout)
}

// joiningProcess decides whether a new process for rank r joins a running group: it asked to
// (is_extension), or an earlier process of rank r completed the group's set-up and is gone
// while another rank's process that completed it is alive. Each rank records the segment of
// the process that completed set-up (its endpoint, with the engine instance id) under
// ".../ep/<rank>/up", after every rank published its
// endpoint; a fresh job that reuses a store runs this check before publishing its own
// endpoint, so its peers cannot have completed set-up yet and it never mistakes itself for a
// replacement.
func joiningProcess(cfg pgConfig, st kvStore, probe func(p2p.Info) error) bool {
	if cfg.isExtension {
		return true
	}
	up := func(r int) (p2p.Info, bool) {
		var pi p2p.Info
		ok, err := st.Check(endpointKey(cfg.name, r) + "/up")
		if err != nil || !ok {
			return pi, false
		}
		v, err := st.Get(endpointKey(cfg.name, r)+"/up", time.Second)
		if err != nil || json.Unmarshal(v, &pi) != nil || pi.Engine == "" {
			return pi, false
		}
		return pi, true
	}
	old, ok := up(cfg.rank)
	if !ok || probe(old) == nil {
		return false // first start, or a re-init in the same process
	}
	for r := 0; r < cfg.maxSize; r++ {
		if r == cfg.rank {
			continue
		}
		if pi, ok := up(r); ok && probe(pi) == nil {
			return true
		}
	}
	return false
}

// initialSize is the group's size when it started (published by rank 0).
func initialSize(cfg pgConfig, st kvStore) int {
	v, err := st.Get(cfg.name+"/mooncake/size", time.Second)
	if err == nil {
		if n, err := strconv.Atoi(string(v)); err == nil && n > 0 && n <= cfg.maxSize {
			return n
		}
	}
	return min(cfg.size, cfg.maxSize)
}

// collectiveTimeout is the op deadline of collectives: set_collective_timeout_us when set,
// else MOONCAKE_PG_COLLECTIVE_TIMEOUT_US, else the group's timeout.
func (pg *pgroup) collectiveTimeout() time.Duration {
	if d := time.Duration(pg.collTimeout.Load()); d > 0 {
		return min(d, pg.cfg.timeout)
	}
	if us, err := strconv.ParseInt(os.Getenv("MOONCAKE_PG_COLLECTIVE_TIMEOUT_US"), 10, 64); err == nil && us > 0 {
		return min(time.Duration(us)*time.Microsecond, pg.cfg.timeout)
	}
	return pg.cfg.timeout
}
