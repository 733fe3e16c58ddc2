package pg

// The group: creation over the rendezvous store, the op queue, accessors and Close.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/collective"
	"github.com/mooncake-go/mooncake/p2p"
	"github.com/mooncake-go/mooncake/worker"
)

// The p2p endpoint is the collective algorithms' transport, and its fabric's shared buffers
// their same-host arenas: p2p has the methods without knowing package collective.
var (
	_ collective.Conn            = (*p2p.Endpoint)(nil)
	_ collective.ReducePoster    = (*p2p.Endpoint)(nil)
	_ collective.LivenessChecker = (*p2p.Endpoint)(nil)
	_ collective.SharedMemory    = p2p.SharedMemory{}
)

// Group is one rank's process group.
type Group struct {
	cfg    Config
	st     Store
	fabric p2p.Fabric
	ep     *p2p.Endpoint
	g      *collective.Group
	q      *worker.Queue

	m           membership               // elastic state (membership.go), owned by the queue's goroutine
	fenced      atomic.Pointer[decision] // the decision that removed this rank after a failure (fence.go), nil: not fenced
	joined      atomic.Bool              // an active member (false: a joining process before join_group, or a rank the group dropped)
	save        []byte                   // an in-place op's input kept for a rerun (runFT, scratch)
	done        doneOp                   // the last all_reduce's result, for a hand-over (handover.go)
	collTimeout atomic.Int64             // set_collective_timeout_us, ns (0: unset)
	faultWindow atomic.Int64             // set_fault_reconciliation_window_us, ns (peerfault.go)
	p2pTimeout  atomic.Int64             // set_p2p_timeout_us, ns (0: the group's timeout; p2pDeadline)
	reconciling atomic.Bool              // a fault decision is waiting out faultWindow (peerfault.go)
	heldStarts  atomic.Bool              // ops wait for Work.Start / Work.RunHere (the torch shim)

	unauth func()      // stops the engine accepting the group's token (auth.go)
	stall  *stallWatch // between hosts: notes process stalls (fence.go); nil with same-host fences

	sendMu sync.Mutex
	sendQs map[int]*worker.Queue
	recvs  sync.WaitGroup
	closed atomic.Bool
}

// New creates the endpoint, publishes it, connects to every initial rank and starts
// the op queue. It blocks until every initial rank published its endpoint or the timeout.
func New(cfg Config, st Store, f p2p.Fabric) (*Group, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	f, unauth, err := authenticate(cfg, st, f)
	if err != nil {
		return nil, err
	}
	ep, err := p2p.New(f, cfg.Rank, cfg.MaxSize, cfg.Options.P2P)
	if err != nil {
		unauth()
		return nil, err
	}
	fail := func(err error) (*Group, error) {
		ep.Close()
		unauth()
		return nil, err
	}
	joining := joiningProcess(cfg, st, func(pi p2p.Info) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if pr, ok := f.(p2p.Prober); ok {
			return pr.Probe(ctx, pi.Segment, pi.Engine)
		}
		return nil
	})
	info, _ := json.Marshal(ep.Info())
	if err := st.Set(endpointKey(cfg.Name, cfg.Rank), info); err != nil {
		return fail(fmt.Errorf("process group %q, rank %d: publishing the endpoint: %w", cfg.Name, cfg.Rank, err))
	}
	opts := cfg.Options.Collective
	pg := &Group{cfg: cfg, st: st, fabric: f, ep: ep, q: worker.NewQueue(fmt.Sprintf("rank %d", cfg.Rank), cfg.Timeout),
		sendQs: map[int]*worker.Queue{}, unauth: unauth}
	if joining {
		// A replacement or a new rank: it stays outside the group until join_group.
		init := initialSize(cfg, st)
		g, err := collective.NewGroup(ep, cfg.Rank, init, cfg.MaxSize, opts)
		if err != nil {
			pg.q.Close()
			return fail(err)
		}
		// Until join_group its ops run over itself alone (as upstream's joining ranks do):
		// its view of the group is {itself}.
		if err := g.SetMembership(0, 0, maskOf([]int{cfg.Rank}, cfg.MaxSize), nil); err != nil {
			pg.q.Close()
			return fail(err)
		}
		pg.g = g
		pg.stall = startStallWatch(pg.probeTimeout() / 2)
		pg.logf("started outside the running group (is_extension=%v); its ops run over itself alone until join_group", cfg.IsExtension)
		pg.viewChanged()
		return pg, nil
	}
	deadline := time.Now().Add(cfg.Timeout)
	segs := make([]string, cfg.MaxSize)
	for r := 0; r < cfg.Size; r++ {
		if r == cfg.Rank {
			continue
		}
		v, err := st.Get(endpointKey(cfg.Name, r), time.Until(deadline))
		if err != nil {
			return fail(fmt.Errorf("process group %q, rank %d: waiting for rank %d to publish its endpoint: %w", cfg.Name, cfg.Rank, r, err))
		}
		var pi p2p.Info
		if err := json.Unmarshal(v, &pi); err != nil {
			return fail(fmt.Errorf("process group %q, rank %d: rank %d published a bad endpoint %q: %w", cfg.Name, cfg.Rank, r, v, err))
		}
		if pi.Rank != r {
			return fail(fmt.Errorf("process group %q: the endpoint under rank %d's key says rank %d", cfg.Name, r, pi.Rank))
		}
		segs[r] = pi.Segment
		if err := ep.Connect(pi); err != nil {
			return fail(fmt.Errorf("process group %q: %w", cfg.Name, err))
		}
	}
	g, err := collective.NewGroup(ep, cfg.Rank, cfg.Size, cfg.MaxSize, opts)
	if err != nil {
		return fail(err)
	}
	if sm, ok := p2p.NewSharedMemory(f, segs); ok && !cfg.Options.NoSharedMemory && !cfg.IsExtension && cfg.MaxSize == cfg.Size {
		// Same-host fast path: a collective decision, so every rank takes it or none does.
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		_, err := g.EnableSharedMemory(ctx, sm, cfg.Options.Shared)
		cancel()
		if err != nil {
			return fail(fmt.Errorf("process group %q, rank %d: setting up shared memory: %w", cfg.Name, cfg.Rank, err))
		}
	}
	pg.g = g
	pg.joined.Store(true)
	if !g.FencesOnHost() && cfg.Size > 1 {
		pg.stall = startStallWatch(pg.probeTimeout() / 2)
	}
	if cfg.Rank == 0 {
		st.Set(groupKey(cfg.Name, "size"), []byte(strconv.Itoa(cfg.Size)))
	}
	st.Set(endpointKey(cfg.Name, cfg.Rank)+"/up", info)
	pg.viewChanged()
	return pg, nil
}

// viewChanged tells Config.OnWorldSize the world size (and Options.Observer the view).
func (pg *Group) viewChanged() {
	pg.observeView() // observer hook (observer.go)
	if pg.cfg.OnWorldSize != nil {
		pg.cfg.OnWorldSize(pg.WorldSize())
	}
}

// Rank is this process's rank in the group.
func (pg *Group) Rank() int { return pg.cfg.Rank }

// MaxSize is the group's slot count (max_group_size).
func (pg *Group) MaxSize() int { return pg.cfg.MaxSize }

// Timeout is the group's op timeout.
func (pg *Group) Timeout() time.Duration { return pg.cfg.Timeout }

// Closed reports whether Close was called.
func (pg *Group) Closed() bool { return pg.closed.Load() }

// ActiveRanks is the active mask, MaxSize long. It first applies the membership decisions
// this rank has not seen yet (a rank that left with deactivate_ranks on itself, say), on the
// op queue, so it waits for the collectives queued before it.
func (pg *Group) ActiveRanks() []bool {
	if !pg.closed.Load() {
		pg.q.Submit("get_active_ranks", func(context.Context) error {
			pg.catchUp()
			return nil
		}).Wait(-1)
	}
	return pg.g.ActiveRanks()
}

// ActiveCount is the number of active ranks in this rank's view, without applying decisions it
// has not seen (a cheap read for the shim's argument checks).
func (pg *Group) ActiveCount() int { return len(ranksOf(pg.g.ActiveRanks())) }

// Epoch is the group's membership epoch.
func (pg *Group) Epoch() int64 { return pg.g.Epoch() }

// CurrentEpoch is the epoch after applying the decisions this rank has not seen yet, as
// ActiveRanks does (get_current_epoch: a member learns a rank left without an op of its own).
func (pg *Group) CurrentEpoch() int64 {
	pg.ActiveRanks()
	return pg.g.Epoch()
}

// SetHeldStarts makes ops submitted from now on wait until the caller starts them
// (Work.Start hands one to the queue's goroutine, Work.RunHere runs it on the calling
// thread): the torch shim runs synchronous ops on its own thread this way.
func (pg *Group) SetHeldStarts(on bool) { pg.heldStarts.Store(on) }

// WorldSize is the group's world size as torch reports it (get_world_size, through the shim):
// the highest active rank + 1, which elastic membership changes. A process outside the group (a
// joiner before join_group, a rank the group dropped) reports the size it was started with.
func (pg *Group) WorldSize() int {
	if !pg.joined.Load() {
		return pg.cfg.Size
	}
	act := pg.g.ActiveRanks()
	for r := len(act) - 1; r >= 0; r-- {
		if act[r] {
			return r + 1
		}
	}
	return pg.cfg.Size
}

// Close finishes the queued ops (each bounded by the op timeout), then frees the endpoint.
func (pg *Group) Close() error {
	if pg.closed.Swap(true) {
		return nil
	}
	if pg.stall != nil {
		close(pg.stall.stop)
	}
	pg.q.Close()
	pg.sendMu.Lock()
	qs := pg.sendQs
	pg.sendQs = map[int]*worker.Queue{}
	pg.sendMu.Unlock()
	for _, q := range qs {
		q.Close()
	}
	pg.g.Close()         // the queue is drained: no op uses the shared-memory path any more
	err := pg.ep.Close() // fails receives still pending
	pg.recvs.Wait()
	pg.unauth()
	return err
}
