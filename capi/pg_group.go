package main

// The process group behind the mc_pg_* calls, in plain Go (pg.go holds the cgo exports): the
// rendezvous through the caller's store, the p2p endpoint, the collective group, the ordered
// op queue, and point-to-point ops outside that queue.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/mooncake-go/mooncake/collective"
	"github.com/mooncake-go/mooncake/collective/reduce"
	"github.com/mooncake-go/mooncake/p2p"
	"github.com/mooncake-go/mooncake/worker"
)

// Status codes of process-group errors (Mooncake's table where one fits).
const (
	codeTransferFail = -800 // TRANSFER_FAIL: a peer failed, timed out or aborted the op
	codeStillRunning = -2   // mc_work_wait: the op is still running at the timeout
)

// defaultPGTimeout is the op timeout when the caller gives none.
const defaultPGTimeout = 10 * time.Minute

type pgConfig struct {
	rank, size, maxSize int
	isExtension         bool
	autoDeactivate      bool
	autoSync            bool
	deviceType          int
	timeout             time.Duration
	name                string
}

// kvStore is the rendezvous store (the c10d store of the torch shim, through callbacks).
type kvStore interface {
	Set(key string, val []byte) error
	// Get waits up to timeout for key.
	Get(key string, timeout time.Duration) ([]byte, error)
	// Check reports whether key exists, without waiting.
	Check(key string) (bool, error)
	// Add adds delta to the integer under key (0 when missing) and returns the new value.
	Add(key string, delta int64) (int64, error)
}

type pgroup struct {
	cfg     pgConfig
	st      kvStore
	fabric  p2p.Fabric
	ep      *p2p.Endpoint
	g       *collective.Group
	q       *worker.Queue
	release func()

	m           membership               // elastic state (pg_elastic.go), owned by the queue's goroutine
	onView      func(extent int)         // told the active extent after every membership change
	extentWord  unsafe.Pointer           // C int32 the shim reads the extent from (capi)
	save        []byte                   // an in-place op's input kept for a rerun (runFT, scratch)
	collTimeout atomic.Int64             // set_collective_timeout_us, ns (0: unset)
	hook        atomic.Pointer[workHook] // called when a work finishes (the shim's completion thread)
	heldStarts  atomic.Bool              // ops wait for mc_work_start / mc_work_run (the torch shim)

	sendMu sync.Mutex
	sendQs map[int]*worker.Queue
	recvs  sync.WaitGroup
	closed atomic.Bool
}

// opErr gives a failed op its status code.
type opErr struct{ err error }

func (e opErr) Error() string { return e.err.Error() }
func (e opErr) Unwrap() error { return e.err }
func (e opErr) Code() int {
	var me *collective.MismatchError
	if errors.As(e.err, &me) {
		return codeInvalidParams
	}
	return codeTransferFail
}

func withCode(err error) error {
	if err == nil {
		return nil
	}
	var ce codedError
	if errors.As(err, &ce) {
		return err
	}
	return opErr{err}
}

func endpointKey(group string, rank int) string {
	return fmt.Sprintf("%s/mooncake/ep/%d", group, rank)
}

func envInt(name string, def int) int {
	if v := os.Getenv(name); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return n
		}
	}
	return def
}

// newPGroup creates the endpoint, publishes it, connects to every initial rank and starts
// the op queue. It blocks until every initial rank published its endpoint or the timeout.
func newPGroup(cfg pgConfig, st kvStore, f p2p.Fabric) (*pgroup, error) {
	if cfg.timeout <= 0 {
		cfg.timeout = defaultPGTimeout
	}
	if cfg.name == "" {
		cfg.name = "default"
	}
	ep, err := p2p.New(f, cfg.rank, cfg.maxSize, p2p.Options{
		Slots:     envInt("MC_PG_SLOTS", 0),
		SlotBytes: envInt("MC_PG_SLOT_BYTES", 0),
	})
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*pgroup, error) {
		ep.Close()
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
	if err := st.Set(endpointKey(cfg.name, cfg.rank), info); err != nil {
		return fail(fmt.Errorf("process group %q, rank %d: publishing the endpoint: %w", cfg.name, cfg.rank, err))
	}
	opts := collective.Options{
		SmallBytes: envInt("MC_PG_SMALL_BYTES", 0),
		ChunkBytes: envInt("MC_PG_CHUNK_BYTES", 0),
		FusedBytes: envInt("MC_PG_FUSED_BYTES", 0), // -1: no fused small all_reduce
		PairBytes:  envInt("MC_PG_PAIR_BYTES", 0),
	}
	pg := &pgroup{cfg: cfg, st: st, fabric: f, ep: ep, q: worker.NewQueue(fmt.Sprintf("rank %d", cfg.rank), cfg.timeout),
		sendQs: map[int]*worker.Queue{}}
	if joining {
		// A replacement or a new rank: it stays outside the group until join_group.
		init := initialSize(cfg, st)
		g, err := collective.NewGroup(ep, cfg.rank, init, cfg.maxSize, opts)
		if err != nil {
			pg.q.Close()
			return fail(err)
		}
		pg.g = g
		pg.logf("started outside the running group (is_extension=%v); call join_group", cfg.isExtension)
		return pg, nil
	}
	deadline := time.Now().Add(cfg.timeout)
	segs := make([]string, cfg.maxSize)
	for r := 0; r < cfg.size; r++ {
		if r == cfg.rank {
			continue
		}
		v, err := st.Get(endpointKey(cfg.name, r), time.Until(deadline))
		if err != nil {
			return fail(fmt.Errorf("process group %q, rank %d: waiting for rank %d to publish its endpoint: %w", cfg.name, cfg.rank, r, err))
		}
		var pi p2p.Info
		if err := json.Unmarshal(v, &pi); err != nil {
			return fail(fmt.Errorf("process group %q, rank %d: rank %d published a bad endpoint %q: %w", cfg.name, cfg.rank, r, v, err))
		}
		if pi.Rank != r {
			return fail(fmt.Errorf("process group %q: the endpoint under rank %d's key says rank %d", cfg.name, r, pi.Rank))
		}
		segs[r] = pi.Segment
		if err := ep.Connect(pi); err != nil {
			return fail(fmt.Errorf("process group %q: %w", cfg.name, err))
		}
	}
	g, err := collective.NewGroup(ep, cfg.rank, cfg.size, cfg.maxSize, opts)
	if err != nil {
		return fail(err)
	}
	if sm, ok := p2p.NewSharedMemory(f, segs); ok && os.Getenv("MC_PG_SHM") != "0" && !cfg.isExtension && cfg.maxSize == cfg.size {
		// Same-host fast path: a collective decision, so every rank takes it or none does.
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		_, err := g.EnableSharedMemory(ctx, sm, collective.SharedOptions{})
		cancel()
		if err != nil {
			return fail(fmt.Errorf("process group %q, rank %d: setting up shared memory: %w", cfg.name, cfg.rank, err))
		}
	}
	pg.g, pg.m.joined = g, true
	if cfg.rank == 0 {
		st.Set(cfg.name+"/mooncake/size", []byte(strconv.Itoa(cfg.size)))
	}
	st.Set(endpointKey(cfg.name, cfg.rank)+"/up", info)
	return pg, nil
}

// submit queues a collective; peer failures are handled by runFT (pg_elastic.go).
func (pg *pgroup) submit(op string, fn func(ctx context.Context) error) *worker.Work {
	return pg.submitInPlace(op, nil, func(ctx context.Context, _ []byte) error { return fn(ctx) })
}

// submitTo queues an op on q; with held starts (mc_pg_set_held_starts) the caller starts it.
func (pg *pgroup) submitTo(q *worker.Queue, op string, fn func(ctx context.Context) error) *worker.Work {
	if pg.heldStarts.Load() {
		return q.SubmitHeld(op, fn)
	}
	return q.Submit(op, fn)
}

// submitInPlace queues a collective that overwrites inplace with its result; fn gets the
// buffer that saves the input for a rerun (see runFT).
func (pg *pgroup) submitInPlace(op string, inplace []byte, fn func(ctx context.Context, save []byte) error) *worker.Work {
	return pg.submitTo(pg.q, op, func(ctx context.Context) error {
		if d := pg.collectiveTimeout(); d < pg.cfg.timeout {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		return withCode(pg.runFT(ctx, op, inplace, fn))
	})
}

// p2pCheck fails a send or receive at once when the peer is not a live member.
func (pg *pgroup) p2pCheck(op string, peer int) error {
	if peer < 0 || peer == pg.cfg.rank {
		return nil
	}
	if !pg.g.ActiveRanks()[peer] {
		return opErr{fmt.Errorf("%s on rank %d: rank %d is not an active member of the group (epoch %d)", op, pg.cfg.rank, peer, pg.g.Epoch())}
	}
	if err := pg.ep.Dead(peer); err != nil {
		return opErr{fmt.Errorf("%s on rank %d with rank %d: %w", op, pg.cfg.rank, peer, err)}
	}
	return nil
}

// send queues a send to dst behind earlier sends to dst (not behind collectives: a send never
// waits for a matching receive, and keeping it out of the collective queue lets programs mix
// p2p and collectives in any order that torch allows).
func (pg *pgroup) send(buf []byte, dst int, tag int32) *worker.Work {
	pg.sendMu.Lock()
	q := pg.sendQs[dst]
	if q == nil {
		q = worker.NewQueue(fmt.Sprintf("rank %d", pg.cfg.rank), pg.cfg.timeout)
		pg.sendQs[dst] = q
	}
	pg.sendMu.Unlock()
	return pg.submitTo(q, "send", func(ctx context.Context) error {
		if err := pg.p2pCheck("send", dst); err != nil {
			return err
		}
		if err := pg.ep.AliveRecently(ctx, dst, time.Second); err != nil && errors.Is(err, collective.ErrPeerDead) {
			return opErr{fmt.Errorf("send on rank %d to rank %d (tag %d): %w", pg.cfg.rank, dst, tag, err)}
		}
		if err := pg.ep.Send(ctx, dst, collective.UserTag(tag), buf); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return opErr{fmt.Errorf("send on rank %d to rank %d (tag %d): rank %d did not take the message within %s", pg.cfg.rank, dst, tag, dst, pg.cfg.timeout)}
			}
			return opErr{fmt.Errorf("send on rank %d to rank %d (tag %d): %w", pg.cfg.rank, dst, tag, err)}
		}
		return nil
	})
}

// recv posts the receive now (so receives match in call order) and completes the work when a
// message of exactly len(buf) bytes arrived.
func (pg *pgroup) recv(buf []byte, src int, tag int32) *worker.Work {
	w := worker.NewWork("recv")
	peer := src
	if src < 0 {
		peer = collective.AnySource
	}
	if pg.closed.Load() {
		w.Finish(fmt.Errorf("recv: %w", worker.ErrClosed))
		return w
	}
	if err := pg.p2pCheck("recv", src); err != nil {
		w.Finish(err)
		return w
	}
	r := pg.ep.PostRecv(peer, collective.UserTag(tag), buf)
	from := "any rank"
	if src >= 0 {
		from = fmt.Sprintf("rank %d", src)
	}
	pg.recvs.Add(1)
	go func() {
		defer pg.recvs.Done()
		ctx, cancel := context.WithTimeout(context.Background(), pg.cfg.timeout)
		defer cancel()
		n, s, err := r.Wait(ctx)
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			err = opErr{fmt.Errorf("recv on rank %d: no message from %s (tag %d) within %s: %w", pg.cfg.rank, from, tag, pg.cfg.timeout, worker.ErrTimeout)}
		case err != nil:
			err = opErr{fmt.Errorf("recv on rank %d from %s (tag %d): %w", pg.cfg.rank, from, tag, err)}
		case n != len(buf):
			err = opErr{fmt.Errorf("recv on rank %d: rank %d sent %d bytes (tag %d), the receive expects %d", pg.cfg.rank, s, n, tag, len(buf))}
		}
		w.FinishFrom(s, err)
	}()
	return w
}

func (pg *pgroup) broadcast(buf []byte, root int) *worker.Work {
	return pg.submit("broadcast", func(ctx context.Context) error { return pg.g.Broadcast(ctx, buf, root) })
}

func (pg *pgroup) allreduce(buf []byte, dt reduce.DType, op reduce.Op) *worker.Work {
	return pg.submitInPlace("all_reduce", buf, func(ctx context.Context, save []byte) error {
		return pg.g.AllReduceOrRestore(ctx, buf, save, dt, op)
	})
}

func (pg *pgroup) reduce(buf []byte, dt reduce.DType, op reduce.Op, root int) *worker.Work {
	return pg.submitInPlace("reduce", buf, func(ctx context.Context, save []byte) error {
		return pg.g.ReduceOrRestore(ctx, buf, save, dt, op, root)
	})
}

func (pg *pgroup) allgather(in []byte, outs [][]byte) *worker.Work {
	return pg.submit("all_gather", func(ctx context.Context) error { return pg.g.AllGather(ctx, in, outs) })
}

func (pg *pgroup) gather(in []byte, outs [][]byte, root int) *worker.Work {
	return pg.submit("gather", func(ctx context.Context) error { return pg.g.Gather(ctx, in, outs, root) })
}

func (pg *pgroup) scatter(ins [][]byte, out []byte, root int) *worker.Work {
	return pg.submit("scatter", func(ctx context.Context) error { return pg.g.Scatter(ctx, ins, out, root) })
}

func (pg *pgroup) reduceScatter(ins [][]byte, out []byte, dt reduce.DType, op reduce.Op) *worker.Work {
	return pg.submit("reduce_scatter", func(ctx context.Context) error { return pg.g.ReduceScatter(ctx, ins, out, dt, op) })
}

func (pg *pgroup) alltoall(ins, outs [][]byte) *worker.Work {
	return pg.submit("all_to_all", func(ctx context.Context) error { return pg.g.AllToAll(ctx, ins, outs) })
}

func (pg *pgroup) barrier() *worker.Work {
	return pg.submit("barrier", func(ctx context.Context) error { return pg.g.Barrier(ctx) })
}

// close finishes the queued ops (each bounded by the op timeout), then frees the endpoint.
func (pg *pgroup) close() error {
	if pg.closed.Swap(true) {
		return nil
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
	if pg.release != nil {
		pg.release()
	}
	return err
}
