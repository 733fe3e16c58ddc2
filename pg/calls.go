package pg

// Program calls on membership: deactivate_ranks, activate_ranks / recover_ranks,
// extend_group_size_to, join_group, sync_after_failure, get_peer_state; and how a new
// process finds out that it joins a running group.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/mooncake-go/mooncake/p2p"
)

// Proposal statuses (mooncake_pg.ProposalStatus) and sync statuses (SyncAfterFailureStatus):
// Result.Status.
const (
	ProposalRejected       = 0
	ProposalApplied        = 1
	ProposalAppliedDropped = 2

	SyncReconciled = 0
	SyncNoPending  = 1
	SyncRejected   = 2
)

// Result is the JSON answer of mc_pg_membership.
type Result struct {
	Status       int    `json:"status"`
	NewEpoch     int64  `json:"new_epoch"`
	DroppedRanks []int  `json:"dropped_ranks"`
	RejectReason string `json:"reject_reason"`
	PeerState    []bool `json:"peer_state,omitempty"`
	NumSynced    int    `json:"num_synced"`
	Coordinator  string `json:"coordinator,omitempty"`
	Segment      string `json:"segment,omitempty"`
}

type Request struct {
	Op                  string `json:"op"`
	Ranks               []int  `json:"ranks"`
	Size                int    `json:"size"`
	CollectiveTimeoutUS int64  `json:"collective_timeout_us"`
	FaultWindowUS       int64  `json:"fault_reconciliation_window_us"`
	P2PTimeoutUS        int64  `json:"p2p_timeout_us"`
}

// CoordinatorKey is the rendezvous-store key (in the store the group was created with) under
// which rank 0 publishes the address of the group's control plane, as upstream's rank 0
// publishes its coordinator's: here the rendezvous store that holds the decision log (this
// build has no coordinator process), set by the torch shim's creator (mooncake.pg).
const CoordinatorKey = "coordinator_addr"

// Membership runs one program call on the op queue and waits for it.
func (pg *Group) Membership(req Request) (Result, error) {
	switch req.Op {
	case "peer_state":
		return Result{PeerState: pg.peerState(req.Ranks)}, nil
	case "configure":
		pg.collTimeout.Store(int64(time.Duration(max(req.CollectiveTimeoutUS, 0)) * time.Microsecond))
		return Result{}, nil
	case "configure_p2p_timeout":
		if req.P2PTimeoutUS < 0 {
			return Result{}, invalid(fmt.Sprintf("set_p2p_timeout_us: %d is negative", req.P2PTimeoutUS))
		}
		pg.p2pTimeout.Store(int64(time.Duration(req.P2PTimeoutUS) * time.Microsecond))
		return Result{}, nil
	case "coordinator_address":
		v, err := pg.st.Get(CoordinatorKey, pg.cfg.Timeout)
		if err != nil {
			return Result{}, fmt.Errorf("the group's coordinator address (store key %q, published by rank 0): %w", CoordinatorKey, err)
		}
		return Result{Coordinator: string(v)}, nil
	case "endpoint":
		return Result{Segment: pg.ep.Info().Segment}, nil
	case "configure_fault_window":
		if req.FaultWindowUS < 0 {
			return Result{}, invalid(fmt.Sprintf("set_fault_reconciliation_window_us: %d is negative", req.FaultWindowUS))
		}
		pg.faultWindow.Store(int64(time.Duration(req.FaultWindowUS) * time.Microsecond))
		return Result{}, nil
	}
	var res Result
	w := pg.q.Submit(req.Op, func(ctx context.Context) error {
		var err error
		res, err = pg.membershipOp(ctx, req)
		// The epoch this call made, read on the queue: ops queued after it may apply later
		// decisions before Wait returns (a join followed at once by a fault), and the
		// members published the torch group counter under the epoch of the admission.
		res.NewEpoch = pg.g.Epoch()
		return err
	})
	if err := w.Wait(-1); err != nil {
		return res, err
	}
	res.NumSynced = len(pg.g.Members())
	if !pg.joined.Load() {
		res.NumSynced = 0
	}
	return res, nil
}

func (pg *Group) checkRanks(op string, ranks []int) error {
	if len(ranks) == 0 {
		return invalid(op + ": no ranks given")
	}
	for _, r := range ranks {
		if r < 0 || r >= pg.cfg.MaxSize {
			return invalid(fmt.Sprintf("%s: rank %d is outside the group's %d slots (max_group_size)", op, r, pg.cfg.MaxSize))
		}
	}
	return nil
}

func (pg *Group) membershipOp(ctx context.Context, req Request) (Result, error) {
	me := pg.cfg.Rank
	switch req.Op {
	case "num_synced":
		return Result{}, nil
	case "join":
		return pg.join(ctx)
	case "deactivate":
		if err := pg.checkRanks("deactivate_ranks", req.Ranks); err != nil {
			return Result{}, err
		}
		if !pg.joined.Load() {
			return Result{Status: ProposalRejected, RejectReason: fmt.Sprintf("rank %d is not an active member", me)}, nil
		}
		// A rank may deactivate itself: it leaves the group (before destroy_process_group), the
		// others learn it from the decision log and may recover_ranks it when it comes back.
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
			if req.Size < 1 || req.Size > pg.cfg.MaxSize {
				return Result{}, invalid(fmt.Sprintf("extend_group_size_to: size %d is outside [1, %d] (max_group_size)", req.Size, pg.cfg.MaxSize))
			}
			ranks = nil
			act := pg.g.ActiveRanks()
			for r := 0; r < req.Size; r++ {
				if !act[r] {
					ranks = append(ranks, r)
				}
			}
			if len(ranks) == 0 {
				return Result{Status: ProposalApplied}, nil
			}
		}
		if err := pg.checkRanks(name, ranks); err != nil {
			return Result{}, err
		}
		if !pg.joined.Load() {
			return Result{Status: ProposalRejected, RejectReason: fmt.Sprintf("rank %d is not an active member (call join_group)", me)}, nil
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
		if res.Status == ProposalApplied && len(dropped) > 0 {
			res.Status, res.DroppedRanks = ProposalAppliedDropped, dropped
		}
		return res, err
	case "sync":
		if !pg.joined.Load() {
			return Result{Status: SyncRejected, RejectReason: fmt.Sprintf("rank %d is not an active member", me)}, nil
		}
		if !pg.cfg.AutoDeactivate {
			// Manual mode: membership changes only by deactivate_ranks. sync_after_failure
			// takes the group's agreed view (the failures other ranks recorded) and reports
			// whether a failure is outstanding (failed ranks still members, out of the ops).
			pg.catchUp()
			if len(pg.g.Excluded()) > 0 {
				return Result{Status: SyncReconciled}, nil
			}
			return Result{Status: SyncNoPending}, nil
		}
		if len(pg.m.pending) == 0 {
			return Result{Status: SyncNoPending}, nil
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
		return outcome(err, SyncReconciled, SyncRejected)
	}
	return Result{}, invalid(fmt.Sprintf("unknown membership call %q", req.Op))
}

func proposalResult(_ *decision, err error) (Result, error) {
	return outcome(err, ProposalApplied, ProposalRejected)
}

// outcome turns a proposal's error into the answer: ok, a rejection with its reason, or the
// error itself.
func outcome(err error, ok, rejected int) (Result, error) {
	if err != nil {
		var rj *rejection
		if errors.As(err, &rj) {
			return Result{Status: rejected, RejectReason: rj.reason}, nil
		}
		return Result{}, err
	}
	return Result{Status: ok}, nil
}

// replaced reports whether rank r published an endpoint other than the one this rank's link
// points at (a replacement process).
func (pg *Group) replaced(r int) bool {
	info, err := pg.endpointOf(r, time.Millisecond)
	if err != nil {
		return false
	}
	return pg.ep.Dead(r) != nil || !pg.ep.LinkedTo(info)
}

// peerState: alive and reachable, with a published endpoint (get_peer_state).
func (pg *Group) peerState(ranks []int) []bool {
	out := make([]bool, len(ranks))
	for i, r := range ranks {
		if r < 0 || r >= pg.cfg.MaxSize {
			continue
		}
		if r == pg.cfg.Rank {
			out[i] = true
			continue
		}
		if ok, err := pg.st.Check(endpointKey(pg.cfg.Name, r)); err != nil || !ok {
			continue
		}
		info, err := pg.endpointOf(r, time.Second)
		if err != nil {
			continue
		}
		if !pg.g.ActiveRanks()[r] && pg.ep.LinkedTo(info) && !pg.joinRequested(info) {
			// Out of the group, and what it published is still the endpoint that left (or
			// died): not ready to be admitted until its new process or group publishes, or
			// that endpoint calls join_group.
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		out[i] = pg.probe(ctx, info) == nil
		cancel()
	}
	return out
}

// joinRequested reports whether the endpoint info describes called join_group.
func (pg *Group) joinRequested(info p2p.Info) bool {
	k := pg.key("join", info.Rank)
	if ok, err := pg.st.Check(k); err != nil || !ok {
		return false
	}
	v, err := pg.st.Get(k, time.Second)
	return err == nil && string(v) == strconv.FormatUint(info.Instance, 10)
}

func (pg *Group) probe(ctx context.Context, info p2p.Info) error {
	if pr, ok := pg.fabric.(p2p.Prober); ok {
		return pr.Probe(ctx, info.Segment, info.Engine)
	}
	return nil
}

// join follows the decision log until a decision activates this rank, then waits until every
// other member acknowledged it.
func (pg *Group) join(ctx context.Context) (Result, error) {
	pg.catchUp() // a rank the group deactivated learns it here
	if pg.joined.Load() {
		return Result{Status: ProposalApplied}, nil
	}
	if pg.fenced.Load() != nil {
		if err := pg.rejoinLinks(ctx); err != nil {
			return Result{}, fmt.Errorf("join_group: %w", err)
		}
	}
	// The join request names this endpoint: a member that still links to it (this rank was
	// dropped but lives on) then knows it waits to be admitted (peerState).
	if err := pg.st.Set(pg.key("join", pg.cfg.Rank), []byte(strconv.FormatUint(pg.ep.Info().Instance, 10))); err != nil {
		return Result{}, err
	}
	pg.logf("waiting to be admitted (join_group)")
	for !pg.joined.Load() {
		wait := time.Until(deadlineOf(ctx))
		d, err := pg.readDecision(pg.m.applied+1, wait)
		if err != nil {
			return Result{}, fmt.Errorf("join_group on rank %d: no member admitted this rank (activate_ranks/recover_ranks/extend_group_size_to): %w", pg.cfg.Rank, err)
		}
		if err := pg.apply(d); err != nil { // waits for the members' acknowledgements
			return Result{}, fmt.Errorf("join_group: %w", err)
		}
	}
	// The request is answered: withdraw it, or a later removal of this same process (it may
	// leave and rejoin again) would find it standing and be admitted before it asks.
	if err := pg.st.Set(pg.key("join", pg.cfg.Rank), []byte("answered")); err != nil {
		pg.logf("join_group: withdrawing the answered join request: %v", err)
	}
	pg.logf("joined at epoch %d", pg.g.Epoch())
	return Result{Status: ProposalApplied}, nil
}

func deadlineOf(ctx context.Context) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl
	}
	return time.Now().Add(DefaultTimeout)
}

// joiningProcess decides whether a new process for rank r joins a running group instead of
// setting one up with the others. It does when it asked to (is_extension), or when the group is
// running (another rank's process that completed set-up answers) and this rank is not one of
// its current members: an earlier process of rank r completed set-up and is gone (a
// replacement), rank r never completed set-up (a rank beyond the initial size, started with
// torch's full world size), or the decision log says rank r left or was dropped (a re-init
// after deactivate_ranks).
//
// Each rank records the endpoint of the process that completed set-up (with the engine
// instance id) under ".../ep/<rank>/up", after every rank published its endpoint; a fresh job
// that reuses a store runs this check before publishing its own endpoint, so its peers cannot
// have completed set-up yet and it never mistakes itself for a joiner.
func joiningProcess(cfg Config, st Store, probe func(p2p.Info) error) bool {
	if cfg.IsExtension {
		return true
	}
	up := func(r int) (p2p.Info, bool) {
		var pi p2p.Info
		ok, err := st.Check(endpointKey(cfg.Name, r) + "/up")
		if err != nil || !ok {
			return pi, false
		}
		v, err := st.Get(endpointKey(cfg.Name, r)+"/up", time.Second)
		if err != nil || json.Unmarshal(v, &pi) != nil || pi.Engine == "" {
			return pi, false
		}
		return pi, true
	}
	running := false
	for r := 0; r < cfg.MaxSize && !running; r++ {
		if r != cfg.Rank {
			pi, ok := up(r)
			running = ok && probe(pi) == nil
		}
	}
	if !running {
		return false
	}
	old, ok := up(cfg.Rank)
	switch {
	case !ok:
		return true // the group was set up without this rank
	case probe(old) != nil:
		return true // a replacement
	}
	// The same engine completed set-up before (a re-init in the same process): it joins if the
	// group moved on without it.
	if d := lastDecision(cfg.Name, st); d != nil && !slices.Contains(d.Active, cfg.Rank) {
		return true
	}
	return false
}

// lastDecision is the newest decision in group's log, nil when there is none.
func lastDecision(group string, st Store) *decision {
	var last []byte
	for k := 1; ; k++ {
		key := groupKey(group, "dec", k)
		if ok, err := st.Check(key); err != nil || !ok {
			break
		}
		v, err := st.Get(key, time.Second)
		if err != nil {
			break
		}
		last = v
	}
	var d decision
	if last == nil || json.Unmarshal(last, &d) != nil {
		return nil
	}
	return &d
}

// initialSize is the group's size when it started (published by rank 0).
func initialSize(cfg Config, st Store) int {
	v, err := st.Get(groupKey(cfg.Name, "size"), time.Second)
	if err == nil {
		if n, err := strconv.Atoi(string(v)); err == nil && n > 0 && n <= cfg.MaxSize {
			return n
		}
	}
	return min(cfg.Size, cfg.MaxSize)
}
