package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/engine/transport"
	"github.com/mooncake-go/mooncake/internal/futex"
	"github.com/mooncake-go/mooncake/internal/memview"
)

// Opcode is the direction of a transfer.
type Opcode int

const (
	OpRead  Opcode = 0 // remote -> local (Source is the local destination)
	OpWrite Opcode = 1 // local -> remote
)

// TransferRequest is one transfer. TargetOffset is the absolute virtual address in the
// target process (Mooncake's convention for RAM segments).
type TransferRequest struct {
	Opcode       Opcode
	Source       uintptr
	TargetID     SegmentID
	TargetOffset uint64
	Length       uint64
}

// TransferStatus is Mooncake's status enum.
type TransferStatus int

const (
	StatusWaiting   TransferStatus = 0
	StatusPending   TransferStatus = 1
	StatusInvalid   TransferStatus = 2
	StatusCanceled  TransferStatus = 3
	StatusCompleted TransferStatus = 4
	StatusTimeout   TransferStatus = 5
	StatusFailed    TransferStatus = 6
)

func (s TransferStatus) String() string {
	switch s {
	case StatusWaiting:
		return "WAITING"
	case StatusPending:
		return "PENDING"
	case StatusInvalid:
		return "INVALID"
	case StatusCanceled:
		return "CANCELED"
	case StatusCompleted:
		return "COMPLETED"
	case StatusTimeout:
		return "TIMEOUT"
	case StatusFailed:
		return "FAILED"
	}
	return fmt.Sprintf("TransferStatus(%d)", int(s))
}

func (s TransferStatus) final() bool { return s >= StatusCanceled }

// TaskStatus is the state of one task of a batch.
type TaskStatus struct {
	Status           TransferStatus
	TransferredBytes uint64
}

// BatchID names a batch.
type BatchID uint64

type task struct {
	status TransferStatus
	bytes  uint64
	length uint64
	pin    *localBuf
	err    error
}

type batch struct {
	e        *Engine
	id       BatchID
	capacity int

	mu       sync.Mutex
	tasks    []task
	pending  int
	failed   int
	firstErr error
	waitCh   chan struct{}
	workers  map[SegmentID]*targetWorker
	notify   *Notify
	notifyTo []SegmentID
	// notifying: the last task finished and the notification is being sent; the batch
	// reads as PENDING until it was delivered, so a completed batch's notification is
	// already in the target's queue.
	notifying bool
}

// transport kinds
const (
	kindLocal = iota
	kindShm
	kindTCP
)

type group struct {
	target *transport.Target
	remote *remoteSeg
	kinds  []uint8
	reqs   []transport.Request
	tasks  []int
}

// targetWorker runs the groups of one batch to one target, one after another, so the requests
// of a batch to a target are applied in submission order.
type targetWorker struct {
	e      *Engine
	b      *batch
	queue  []*group
	active bool
}

// AllocateBatchID creates a batch that can hold capacity requests in total.
func (e *Engine) AllocateBatchID(capacity int) (BatchID, error) {
	if e.closed.Load() {
		return 0, ErrClosed
	}
	if capacity <= 0 {
		return 0, errf(ErrInvalidArgument, "batch capacity must be positive, got %d", capacity)
	}
	e.batchMu.Lock()
	defer e.batchMu.Unlock()
	id := e.nextBat
	e.nextBat++
	e.batches[id] = &batch{e: e, id: id, capacity: capacity, tasks: make([]task, 0, min(capacity, 1024))}
	return id, nil
}

func (e *Engine) batch(id BatchID) (*batch, error) {
	e.batchMu.Lock()
	b := e.batches[id]
	e.batchMu.Unlock()
	if b == nil {
		return nil, errf(ErrUnknownBatch, "batch %d is unknown or was freed", id)
	}
	return b, nil
}

// FreeBatchID releases a batch; ErrBatchBusy while any of its tasks is unfinished.
func (e *Engine) FreeBatchID(id BatchID) error {
	e.batchMu.Lock()
	defer e.batchMu.Unlock()
	b := e.batches[id]
	if b == nil {
		return errf(ErrUnknownBatch, "batch %d is unknown or was freed", id)
	}
	b.mu.Lock()
	pending := b.pending
	if b.notifying {
		pending++
	}
	b.mu.Unlock()
	if pending > 0 {
		return errf(ErrBatchBusy, "batch %d has %d unfinished transfers", id, pending)
	}
	delete(e.batches, id)
	return nil
}

// SubmitTransfer validates reqs and starts them. Task ids continue the batch's submission
// order. Either every request is accepted or none: an invalid request (local range outside
// the registered buffers, unknown segment, target range outside the target's registered
// buffers, bad opcode) or a full batch returns an error and submits nothing.
func (e *Engine) SubmitTransfer(id BatchID, reqs []TransferRequest) error {
	return e.submit(id, reqs, nil)
}

// SubmitTransferWithNotify is SubmitTransfer, plus n is delivered to each target segment of
// the batch once the initiator sees the whole batch completed (not sent if a task fails).
func (e *Engine) SubmitTransferWithNotify(id BatchID, reqs []TransferRequest, n Notify) error {
	return e.submit(id, reqs, &n)
}

type prepared struct {
	kind   uint8
	pin    *localBuf
	remote *remoteSeg
	desc   *transport.SegmentDescriptor
}

func (e *Engine) submit(id BatchID, reqs []TransferRequest, n *Notify) error {
	_, err := e.submitToWorkers(id, reqs, n, false)
	return err
}

// submitToWorkers is submit; with inline, a batch that goes to a single target does not get a
// goroutine: its target worker is returned for the caller to run (TransferSync runs it on its own
// goroutine, saving a goroutine start and a wake-up per small synchronous transfer).
func (e *Engine) submitToWorkers(id BatchID, reqs []TransferRequest, n *Notify, inline bool) (*targetWorker, error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	b, err := e.batch(id)
	if err != nil {
		return nil, err
	}
	prep := make([]prepared, len(reqs))
	release := func() {
		for i := range prep {
			if prep[i].pin != nil {
				prep[i].pin.Release()
			}
		}
	}
	var refreshed map[SegmentID]bool // allocated on the first refresh only
	for i := range reqs {
		if err := e.prepare(&reqs[i], &prep[i], &refreshed, false); err != nil {
			release()
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
	}

	e.lifeMu.RLock()
	defer e.lifeMu.RUnlock()
	if e.closed.Load() {
		release()
		return nil, ErrClosed
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.tasks)+len(reqs) > b.capacity {
		release()
		return nil, errf(ErrTooManyRequests, "batch %d holds %d of %d requests; %d more do not fit", id, len(b.tasks), b.capacity, len(reqs))
	}
	var groups []*group
	var targets []SegmentID
	var run *targetWorker
	base := len(b.tasks)
	for i := range reqs {
		q := &reqs[i]
		p := &prep[i]
		t := task{status: StatusPending, length: q.Length, pin: p.pin}
		if q.Length == 0 {
			t.status = StatusCompleted
			b.tasks = append(b.tasks, t)
			continue
		}
		b.tasks = append(b.tasks, t)
		b.pending++
		var g *group
		for j, tg := range targets {
			if tg == q.TargetID {
				g = groups[j]
				break
			}
		}
		if g == nil {
			g = &group{remote: p.remote}
			if p.remote != nil {
				g.target = &transport.Target{Desc: p.desc, Addr: p.remote.addr}
			} else {
				g.target = &transport.Target{}
			}
			groups = append(groups, g)
			targets = append(targets, q.TargetID)
		}
		g.kinds = append(g.kinds, p.kind)
		g.reqs = append(g.reqs, transport.Request{Write: q.Opcode == OpWrite, Local: q.Source, Remote: q.TargetOffset, Length: q.Length})
		g.tasks = append(g.tasks, base+i)
	}
	if n != nil {
		b.notify = n
		for i := range reqs {
			dup := false
			for _, t := range b.notifyTo {
				if t == reqs[i].TargetID {
					dup = true
				}
			}
			if !dup {
				b.notifyTo = append(b.notifyTo, reqs[i].TargetID)
			}
		}
	}
	if b.workers == nil && len(groups) > 0 {
		b.workers = make(map[SegmentID]*targetWorker)
	}
	for j, g := range groups {
		w := b.workers[targets[j]]
		if w == nil {
			w = &targetWorker{e: e, b: b}
			b.workers[targets[j]] = w
		}
		w.queue = append(w.queue, g)
		if !w.active {
			w.active = true
			e.wg.Add(1)
			if inline && len(groups) == 1 {
				run = w
			} else {
				go w.run()
			}
		}
	}
	b.settledLocked()
	return run, nil
}

// prepare validates one request and picks its transport. With anySource the source need not
// lie in a registered buffer (then it is not pinned): for callers that keep it valid until
// the request is done (Stream).
func (e *Engine) prepare(q *TransferRequest, p *prepared, refreshedp *map[SegmentID]bool, anySource bool) error {
	if q.Opcode != OpRead && q.Opcode != OpWrite {
		return errf(ErrInvalidArgument, "unknown opcode %d (want OpRead=0 or OpWrite=1)", q.Opcode)
	}
	if q.TargetID != LocalSegment {
		r, err := e.remote(q.TargetID)
		if err != nil {
			return err
		}
		p.remote = r
	}
	if q.Length == 0 {
		return nil
	}
	if uint64(q.Source)+q.Length < uint64(q.Source) || q.TargetOffset+q.Length < q.TargetOffset || q.Length > math.MaxInt {
		return errf(ErrInvalidArgument, "range of %d bytes wraps around the address space", q.Length)
	}
	if q.TargetID == LocalSegment {
		e.segMu.RLock()
		ok := e.find(q.TargetOffset, q.Length) != nil
		e.segMu.RUnlock()
		if !ok {
			return errf(ErrAddressNotRegistered, "target [%#x, +%d) is not inside a registered buffer of the local segment %q", q.TargetOffset, q.Length, e.name)
		}
		p.kind = kindLocal
	} else {
		r := p.remote
		if *refreshedp == nil && r.stale.Load() {
			*refreshedp = map[SegmentID]bool{}
		}
		refreshed := *refreshedp
		if r.stale.Load() && !refreshed[r.id] {
			refreshed[r.id] = true
			if err := e.refresh(r); err != nil {
				r.stale.Store(false) // keep the old descriptor; the transfer reports the failure
			}
		}
		d := r.desc.Load()
		b := d.Find(q.TargetOffset, q.Length)
		if b == nil && !refreshed[r.id] {
			// The peer may have registered more memory since we fetched its descriptor.
			if refreshed == nil {
				refreshed = map[SegmentID]bool{}
				*refreshedp = refreshed
			}
			refreshed[r.id] = true
			if err := e.refresh(r); err == nil {
				d = r.desc.Load()
				b = d.Find(q.TargetOffset, q.Length)
			}
		}
		if b == nil {
			return errf(ErrAddressNotRegistered, "target [%#x, +%d) is not inside a registered buffer of segment %q", q.TargetOffset, q.Length, r.name)
		}
		p.desc = d
		if e.sameHostShm(d, b) {
			p.kind = kindShm
		} else {
			p.kind = kindTCP
		}
	}
	pin, err := e.acquire(uint64(q.Source), q.Length)
	if err != nil {
		if anySource && errors.Is(err, ErrAddressNotRegistered) {
			return nil
		}
		return fmt.Errorf("local source: %w", err)
	}
	p.pin = pin
	return nil
}

func (w *targetWorker) run() {
	defer w.e.wg.Done()
	for {
		w.b.mu.Lock()
		if len(w.queue) == 0 {
			w.active = false
			w.b.mu.Unlock()
			return
		}
		g := w.queue[0]
		w.queue[0] = nil
		w.queue = w.queue[1:]
		w.b.mu.Unlock()
		w.exec(g)
	}
}

func (w *targetWorker) exec(g *group) {
	e := w.e
	rep := &reporter{b: w.b}
	var failed error
	for s := 0; s < len(g.reqs); {
		k := g.kinds[s]
		end := s + 1
		var bytes uint64 = g.reqs[s].Length
		for end < len(g.reqs) && g.kinds[end] == k {
			bytes += g.reqs[end].Length
			end++
		}
		rep.tasks = g.tasks[s:end]
		if failed != nil {
			// An earlier request of this batch to this target failed: later ones (a signal
			// after data, say) must not be applied.
			for i := range rep.tasks {
				rep.Done(i, fmt.Errorf("not attempted because an earlier transfer to the same target failed: %w", failed))
			}
			s = end
			continue
		}
		rep.failed = nil
		e.execute(context.Background(), k, g.target, g.reqs[s:end], bytes, rep)
		if rep.failed != nil {
			failed = rep.failed
			if g.remote != nil {
				g.remote.stale.Store(true)
			}
		}
		s = end
	}
}

// execute runs reqs (one transport kind, bytes in all) on kind's transport under the
// engine's deadline for a run: the transfer timeout plus ~1 ns per byte.
func (e *Engine) execute(ctx context.Context, kind uint8, t *transport.Target, reqs []transport.Request, bytes uint64, r transport.Reporter) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout+time.Duration(bytes))
	defer cancel()
	var tr transport.Transport
	switch kind {
	case kindLocal:
		tr = &e.local
	case kindShm:
		tr = e.shm
	default:
		tr = e.tcp
	}
	tr.Execute(ctx, t, reqs, r)
	e.kindBytes[kind].Add(bytes)
}

// reporter maps a run's request indexes to task ids.
type reporter struct {
	b      *batch
	tasks  []int
	failed error
}

func (r *reporter) Progress(i int, n uint64) {
	r.b.mu.Lock()
	t := &r.b.tasks[r.tasks[i]]
	if !t.status.final() {
		t.bytes += n
	}
	r.b.mu.Unlock()
}

func (r *reporter) Done(i int, err error) {
	if err != nil && r.failed == nil {
		r.failed = err
	}
	r.b.finish(r.tasks[i], err)
}

func (b *batch) finish(idx int, err error) {
	b.mu.Lock()
	t := &b.tasks[idx]
	if t.status.final() {
		b.mu.Unlock()
		return
	}
	if err == nil {
		t.status = StatusCompleted
		t.bytes = t.length
	} else {
		if errors.Is(err, context.DeadlineExceeded) {
			t.status = StatusTimeout
		} else {
			t.status = StatusFailed
		}
		t.err = err
		b.failed++
		if b.firstErr == nil {
			b.firstErr = fmt.Errorf("batch %d task %d: %s: %w", b.id, idx, t.status, err)
		}
	}
	if t.pin != nil {
		t.pin.Release()
		t.pin = nil
	}
	b.pending--
	if b.pending == 0 && b.failed == 0 && b.notify != nil {
		n, to := *b.notify, b.notifyTo
		b.notify, b.notifyTo = nil, nil
		b.notifying = true
		b.mu.Unlock()
		for _, t := range to {
			b.e.SendNotify(t, n)
		}
		b.mu.Lock()
		b.notifying = false
	}
	b.settledLocked()
	b.mu.Unlock()
}

// settledLocked wakes waiters and sends the notification once the batch is settled.
func (b *batch) settledLocked() {
	if (b.pending > 0 || b.notifying) && b.failed == 0 {
		return
	}
	if b.waitCh != nil {
		close(b.waitCh)
		b.waitCh = nil
	}
	if b.pending == 0 && b.failed == 0 && b.notify != nil {
		n := *b.notify
		to := b.notifyTo
		b.notify, b.notifyTo = nil, nil
		e := b.e
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			for _, t := range to {
				e.SendNotify(t, n)
			}
		}()
	}
}

func (b *batch) statusLocked() TransferStatus {
	switch {
	case b.failed > 0:
		return StatusFailed
	case b.pending == 0 && !b.notifying:
		return StatusCompleted
	}
	return StatusPending
}

// GetTransferStatus returns the state of task (its index in submission order).
func (e *Engine) GetTransferStatus(id BatchID, taskID int) (TaskStatus, error) {
	b, err := e.batch(id)
	if err != nil {
		return TaskStatus{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if taskID < 0 || taskID >= len(b.tasks) {
		return TaskStatus{}, errf(ErrInvalidArgument, "batch %d has no task %d (it has %d)", id, taskID, len(b.tasks))
	}
	t := &b.tasks[taskID]
	return TaskStatus{Status: t.status, TransferredBytes: t.bytes}, nil
}

// GetBatchStatus is COMPLETED when every task is, FAILED as soon as any task failed or timed
// out, PENDING otherwise. An empty batch is COMPLETED.
func (e *Engine) GetBatchStatus(id BatchID) (TransferStatus, error) {
	b, err := e.batch(id)
	if err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.statusLocked(), nil
}

// BatchError returns the first failure of the batch (nil when none).
func (e *Engine) BatchError(id BatchID) error {
	b, err := e.batch(id)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.firstErr
}

// wait blocks until the batch is settled (all: until no task is pending).
func (b *batch) wait(ctx context.Context, all bool) (TransferStatus, error) {
	for {
		b.mu.Lock()
		st := b.statusLocked()
		if (b.pending == 0 && !b.notifying) || (!all && st == StatusFailed) {
			err := b.firstErr
			b.mu.Unlock()
			return st, err
		}
		if b.waitCh == nil {
			b.waitCh = make(chan struct{})
		}
		ch := b.waitCh
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return StatusPending, ctx.Err()
		}
	}
}

// WaitBatch blocks until the batch is COMPLETED or FAILED, or ctx ends. On FAILED the error
// describes the first failed task; on ctx's end it returns (PENDING, ctx.Err()).
func (e *Engine) WaitBatch(ctx context.Context, id BatchID) (TransferStatus, error) {
	b, err := e.batch(id)
	if err != nil {
		return 0, err
	}
	return b.wait(ctx, false)
}

// TransferSync runs reqs as one batch and waits for all of them. Every transfer is bounded
// by the transfer timeout, so this returns even when a peer dies.
func (e *Engine) TransferSync(ctx context.Context, reqs []TransferRequest) error {
	if len(reqs) == 0 {
		return nil
	}
	id, err := e.AllocateBatchID(len(reqs))
	if err != nil {
		return err
	}
	w, err := e.submitToWorkers(id, reqs, nil, true)
	if err != nil {
		e.FreeBatchID(id)
		return err
	}
	if w != nil {
		w.run()
	}
	b, _ := e.batch(id)
	st, err := b.wait(ctx, true)
	if st == StatusPending {
		// ctx ended first: free the batch when its transfers end (bounded by the timeout).
		go func() {
			b.wait(context.Background(), true)
			e.FreeBatchID(id)
		}()
		return err
	}
	e.FreeBatchID(id)
	if st != StatusCompleted {
		return err
	}
	return nil
}

// localTransport serves transfers whose target is the engine's own segment.
type localTransport struct{ e *Engine }

func (l *localTransport) Name() string { return "local" }
func (l *localTransport) Close() error { return nil }

func (l *localTransport) Execute(ctx context.Context, _ *transport.Target, reqs []transport.Request, r transport.Reporter) {
	for i := range reqs {
		q := &reqs[i]
		pin, err := l.e.acquire(q.Remote, q.Length)
		if err != nil {
			r.Done(i, err)
			continue
		}
		remote := memview.Bytes(uintptr(q.Remote), int(q.Length))
		local := memview.Bytes(q.Local, int(q.Length))
		if q.Write {
			if q.IsSignal() {
				atomic.StoreUint32(memview.Uint32(uintptr(q.Remote)), binary.NativeEndian.Uint32(local))
				futex.Wake(memview.Uint32(uintptr(q.Remote)), math.MaxInt32)
			} else {
				copy(remote, local)
			}
		} else {
			copy(local, remote)
		}
		pin.Release()
		r.Progress(i, q.Length)
		r.Done(i, nil)
	}
}
