package collective

// Same-host fast path: every rank of the group maps every other rank's shared "arena" once,
// and ops move data with plain copies through those mappings (single copy: a writer copies
// into its own arena, readers copy or reduce straight out of it) and synchronise with
// per-rank step counters, spinning briefly and then sleeping on a futex. See doc.go.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/mooncake-go/mooncake/collective/reduce"
	"github.com/mooncake-go/mooncake/internal/futex"
	"github.com/mooncake-go/mooncake/wire"
)

// SharedMemory is what the same-host fast path needs from its environment (capi wires it to
// the transfer engine's AllocateShared and MapRemotePinned).
type SharedMemory interface {
	// Alloc returns a zero-filled buffer of n bytes that same-host peers can map, and the
	// handle they pass to Map (an address in the engine's case).
	Alloc(n int) (mem []byte, handle uint64, err error)
	// Free releases a buffer from Alloc. Peers' mappings of it may outlive it.
	Free(mem []byte, handle uint64)
	// Map returns a view of n bytes of rank's buffer (its Alloc handle) that stays valid until
	// release, even if that rank dies. ok=false (err nil): not reachable through shared
	// memory (another host, MC_FORCE_TCP).
	Map(rank int, handle uint64, n int) (view []byte, release func(), ok bool, err error)
}

// ranksShareProcess is implemented by SharedMemory implementations whose ranks are goroutines
// of one process (tests): waits then also yield to the Go scheduler. Between processes they
// must not: an op may run on a C thread that called into Go (the torch shim runs ops on the
// thread that waits for them), where every runtime.Gosched costs two thread hand-offs.
type ranksShareProcess interface{ RanksShareProcess() bool }

// SharedOptions tunes the fast path. Zero values take the defaults. The package reads no
// environment: the process-group layer fills the fields from the knobs of package config
// named below.
type SharedOptions struct {
	// ChunkBytes is the pipelining unit and the size of each of an arena's two data halves.
	// Default 256 KiB (MC_PG_SHM_CHUNK) (large all_reduce pipelines half-chunks: cache-sized
	// stages beat big ones here). Tests go as low as 192 bytes.
	ChunkBytes int
	// CopyBytes is the largest round of the ops that only move bytes (broadcast, all_gather,
	// gather): they pipeline in at least four rounds of ChunkBytes to CopyBytes (fewer
	// rounds, fewer barriers among ranks that share cores), and an arena's data halves are
	// max(ChunkBytes, CopyBytes) each. Default 2 MiB (MC_PG_SHM_COPY_CHUNK); ChunkBytes when
	// only ChunkBytes is given.
	CopyBytes int
	// StreamOutBytes: all_to_all outputs of this size and more are copied out of the peers'
	// arenas with non-temporal stores. Default 8 MiB (MC_PG_SHM_STREAM_OUT).
	StreamOutBytes int
	// Spin is how long a wait polls before it sleeps on the futex. Default 20 µs (2 µs when
	// the group has more ranks than the machine has CPUs); negative: no polling
	// (MC_PG_SHM_SPIN_US, where 0 means no polling).
	Spin time.Duration
}

// Defaults of SharedOptions.
const (
	DefaultShmChunkBytes     = 256 << 10
	DefaultShmCopyBytes      = 2 << 20
	DefaultShmStreamOutBytes = 8 << 20
)

func (o SharedOptions) withDefaults(n int) SharedOptions {
	if o.CopyBytes <= 0 {
		if o.ChunkBytes > 0 {
			o.CopyBytes = o.ChunkBytes
		} else {
			o.CopyBytes = DefaultShmCopyBytes
		}
	}
	if o.ChunkBytes <= 0 {
		o.ChunkBytes = DefaultShmChunkBytes
	}
	o.ChunkBytes = (o.ChunkBytes + 63) &^ 63
	o.CopyBytes = max((o.CopyBytes+63)&^63, o.ChunkBytes)
	if o.StreamOutBytes <= 0 {
		o.StreamOutBytes = DefaultShmStreamOutBytes
	}
	switch {
	case o.Spin < 0:
		o.Spin = 0
	case o.Spin == 0:
		o.Spin = 20 * time.Microsecond
		if n > runtime.NumCPU() {
			o.Spin = 2 * time.Microsecond
		}
	}
	return o
}

// Arena layout (identical on every rank; offsets in bytes):
//
//	0     step   u32  rounds this rank has posted (written by the owner)
//	64    sleep  u32  non-zero while the owner sleeps on bell (written by the owner)
//	128   bell   u32  futex word the owner sleeps on; posters add 1 and wake it
//	192   abort  u32  op seq+1 of the op this rank gave up (0: none); never cleared
//	196   nfail  u32, then up to maxAbortRanks failed ranks (i32)
//	320   reason length u32, reason bytes up to offFence
//	960   fence  u64  the owner's op outcome word (fence.go), written by the owner and, to
//	                  fence it, by peers that give up on it
//	1024  headers[2]   the op header of the round using data half 0 / 1
//	data  halves[2]    CopyBytes (>= ChunkBytes) each, 4 KiB aligned
const (
	offStep       = 0
	offSleep      = 64
	offBell       = 128
	offAbort      = 192
	offNFail      = 196
	offFailed     = 200
	maxAbortRanks = 30
	offReason     = 320
	offFence      = 960
	offHeaders    = 1024
)

func hdrBytes(maxSize int) int { return (headerBase + 16*maxSize + 63) &^ 63 }

func dataOffset(maxSize int) int { return (offHeaders + 2*hdrBytes(maxSize) + 4095) &^ 4095 }

func arenaSize(maxSize, half int) int { return dataOffset(maxSize) + 2*half }

// shmPath is the fast path of one group; ops run on it one at a time (like the Group).
type shmPath struct {
	g     *Group
	rank  int
	chunk int // pipelining unit of the reductions (SharedOptions.ChunkBytes)
	half  int // bytes of each data half, the largest copy round (SharedOptions.CopyBytes)
	// all_to_all outputs from this size on are copied out non-temporally (SharedOptions)
	streamOut int
	spin      time.Duration
	goYield   bool // yield to the Go scheduler while spinning (ranks in one process)
	hdrSize   int
	dataOff   int

	views    [][]byte // arena of each rank (nil: not mapped), own included
	releases []func()
	free     func()

	step   uint32 // rounds posted (mirror of the own step word)
	broken error  // set once an op failed on this path: later ops use the p2p path

	// per-rank words, by rank (nil when not mapped)
	stepW, sleepW, bellW, abortW []*uint32

	// scratch reused by every op (no allocation on the hot path)
	op      shmOp
	members []int
	hs      []header
	srcs    [][]byte
	lag     []int

	// testRound, when set (tests only), runs at the start of each round of a large all_reduce;
	// an error fails the op there, as a rank that gives up mid-op would.
	testRound func(round int) error
}

// shmOp is the op running on the path.
type shmOp struct {
	p       *shmPath
	ctx     context.Context
	kind    opKind
	seq     uint64
	members []int
	idx, n  int
	first   bool // the next sync ends the op's first round: validate headers
	hdr     header
	budget  time.Duration // the op's time left at its start (0: no deadline)
}

func word(b []byte, off int) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }

// EnableSharedMemory switches the group to the same-host fast path when every member can map
// every other member's arena through sm. It is a collective call (all initial members, before
// any other op, in the same order on every rank): ranks exchange arena handles and agree, over
// the group's Conn, whether all mappings worked; either all ranks enable it or none does, and
// without it the group keeps using Conn. It reports whether the fast path is on.
func (g *Group) EnableSharedMemory(ctx context.Context, sm SharedMemory, opts SharedOptions) (bool, error) {
	members := g.Members()
	n := len(members)
	if n <= 1 || g.shm.Load() != nil {
		return false, nil
	}
	opts = opts.withDefaults(n)
	size := arenaSize(g.maxSize, opts.CopyBytes)
	mem, handle, aerr := sm.Alloc(size)
	ok := aerr == nil && len(mem) >= size
	mine := make([]byte, 24)
	binary.LittleEndian.PutUint64(mine, handle)
	binary.LittleEndian.PutUint64(mine[8:], uint64(size))
	if ok {
		mine[16] = 1
	}
	outs := make([][]byte, g.maxSize)
	for _, m := range members {
		outs[m] = make([]byte, 24)
	}
	freeMine := func() {
		if aerr == nil {
			sm.Free(mem, handle)
		}
	}
	if err := g.AllGather(ctx, mine, outs); err != nil {
		freeMine()
		return false, err
	}
	p := &shmPath{g: g, rank: g.rank, chunk: opts.ChunkBytes, half: opts.CopyBytes, streamOut: opts.StreamOutBytes, spin: opts.Spin,
		hdrSize: hdrBytes(g.maxSize), dataOff: dataOffset(g.maxSize),
		views: make([][]byte, g.maxSize)}
	if rs, ok := sm.(ranksShareProcess); ok && rs.RanksShareProcess() {
		p.goYield = true
	}
	releaseAll := func() {
		for _, r := range p.releases {
			r()
		}
	}
	for _, m := range members {
		if !ok {
			break
		}
		if outs[m][16] != 1 || binary.LittleEndian.Uint64(outs[m][8:]) != uint64(size) {
			ok = false // a peer could not allocate, or uses another chunk size
			break
		}
		if m == g.rank {
			p.views[m] = mem[:size:size]
			continue
		}
		v, rel, vok, err := sm.Map(m, binary.LittleEndian.Uint64(outs[m]), size)
		if err != nil || !vok || len(v) < size {
			if rel != nil {
				rel()
			}
			ok = false
			break
		}
		p.views[m] = v[:size:size]
		p.releases = append(p.releases, rel)
	}
	flag := []byte{0}
	if ok {
		flag[0] = 1
	}
	if err := g.AllReduce(ctx, flag, reduce.Uint8, reduce.Min); err != nil {
		releaseAll()
		freeMine()
		return false, err
	}
	if flag[0] == 0 {
		releaseAll()
		freeMine()
		return false, nil
	}
	p.free = func() { sm.Free(mem, handle) }
	p.stepW = make([]*uint32, g.maxSize)
	p.sleepW = make([]*uint32, g.maxSize)
	p.bellW = make([]*uint32, g.maxSize)
	p.abortW = make([]*uint32, g.maxSize)
	for r, v := range p.views {
		if v != nil {
			p.stepW[r], p.sleepW[r], p.bellW[r], p.abortW[r] = word(v, offStep), word(v, offSleep), word(v, offBell), word(v, offAbort)
		}
	}
	p.step = atomic.LoadUint32(p.stepW[g.rank])
	p.members = make([]int, 0, g.maxSize)
	p.hs = make([]header, g.maxSize)
	for i := range p.hs {
		p.hs[i].extra = make([]int64, 0, 2*g.maxSize)
	}
	p.op.hdr.extra = make([]int64, 2*g.maxSize)
	p.srcs = make([][]byte, 0, g.maxSize)
	p.lag = make([]int, 0, g.maxSize)
	p.op.p = p
	g.fence.Store(newFences(g.rank, p.views))
	g.shm.Store(p)
	return true, nil
}

// SharedMemoryEnabled reports whether ops currently take the same-host fast path.
func (g *Group) SharedMemoryEnabled() bool {
	p := g.shm.Load()
	return p != nil && p.broken == nil
}

// Close releases the fast path's mappings and arena. Call it once no op runs any more.
func (g *Group) Close() {
	g.fence.Store(nil)
	p := g.shm.Swap(nil)
	if p == nil {
		return
	}
	for _, r := range p.releases {
		r()
	}
	p.free()
}

// path returns the fast path for the next op, or nil.
func (g *Group) path() *shmPath {
	p := g.shm.Load()
	if p == nil || p.broken != nil {
		return nil
	}
	return p
}

// start begins an op on the fast path: takes the group's next sequence number and writes the
// op header for the first round. It returns nil when the members are not all mapped (the
// caller then uses the Conn path).
func (p *shmPath) start(ctx context.Context, h header) (*shmOp, error) {
	g := p.g
	g.mu.Lock()
	p.members = g.membersLocked(p.members[:0])
	seq := g.seq
	g.seq++
	h.view = g.view
	g.mu.Unlock()
	o := &p.op
	o.ctx, o.kind, o.seq, o.members, o.n, o.idx, o.first = ctx, h.kind, seq, p.members, len(p.members), -1, true
	o.budget = 0
	if dl, ok := ctx.Deadline(); ok {
		o.budget = time.Until(dl)
	}
	for i, m := range p.members {
		if m == p.rank {
			o.idx = i
		}
		if p.views[m] == nil {
			return nil, fmt.Errorf("%s: rank %d has no shared-memory arena mapped", h.kind, m)
		}
	}
	if o.idx < 0 {
		return nil, fmt.Errorf("%s: rank %d is not an active member of the group", h.kind, p.rank)
	}
	h.seq = seq
	off := offHeaders + int(p.step&1)*p.hdrSize
	h.encode(p.views[p.rank][off : off : off+p.hdrSize])
	o.hdr.kind, o.hdr.dtype, o.hdr.op, o.hdr.root, o.hdr.count, o.hdr.view = h.kind, h.dtype, h.op, h.root, h.count, h.view
	return o, nil
}

// sync ends a round: it posts this rank's writes of the round and waits until every member
// posted theirs. After the op's first round it checks every member's header.
func (o *shmOp) sync() error {
	p := o.p
	half := p.step & 1
	p.step++
	atomic.StoreUint32(p.stepW[p.rank], p.step)
	for _, m := range o.members {
		if m != p.rank && atomic.LoadUint32(p.sleepW[m]) != 0 {
			atomic.AddUint32(p.bellW[m], 1)
			futex.Wake(p.bellW[m], 1)
		}
	}
	if err := o.wait(p.step); err != nil {
		return err
	}
	if o.first {
		o.first = false
		return o.validate(half)
	}
	return nil
}

// laggard returns the first member whose step is below target, or -1.
func (o *shmOp) laggard(target uint32) int {
	p := o.p
	for _, m := range o.members {
		if int32(atomic.LoadUint32(p.stepW[m])-target) < 0 {
			return m
		}
	}
	return -1
}

// aborted returns the error of a member that gave up on the fast path, or nil.
func (o *shmOp) aborted() error {
	p := o.p
	for _, m := range o.members {
		if m != p.rank && atomic.LoadUint32(p.abortW[m]) != 0 {
			return &PeerError{Op: o.kind.String(), Rank: p.rank, Peer: m, Err: readAbort(p.views[m], m)}
		}
	}
	return nil
}

// livenessEvery is how long the fast path waits on a silent peer between liveness probes.
const livenessEvery = 200 * time.Millisecond

func schedYield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// wait blocks until every member's step reached target: it polls for the spin time (yielding
// the CPU to other runnable processes between polls), then sleeps on its own bell word, which
// posters bump (and wake) when they see it asleep. It fails on the op's deadline, naming every member that
// did not arrive, or at once when a member gave up on the op.
func (o *shmOp) wait(target uint32) error {
	p := o.p
	if o.laggard(target) < 0 {
		return nil
	}
	var start time.Time
	for i := 0; ; i++ {
		if o.laggard(target) < 0 {
			return nil
		}
		if i&63 == 63 {
			if err := o.aborted(); err != nil {
				return err
			}
			if start.IsZero() {
				start = time.Now()
			} else if time.Since(start) >= p.spin {
				break
			}
		}
		if i >= 32 {
			// Let other processes (ranks that outnumber the CPUs) and, in tests, other
			// goroutines (ranks of this process) run.
			if p.goYield {
				runtime.Gosched()
			}
			schedYield()
		}
	}
	sleep, bell := p.sleepW[p.rank], p.bellW[p.rank]
	atomic.StoreUint32(sleep, 1)
	defer atomic.StoreUint32(sleep, 0)
	deadline, hasDL := o.ctx.Deadline()
	lc, _ := p.g.conn.(LivenessChecker)
	slept := time.Now()
	for {
		v := atomic.LoadUint32(bell)
		if o.laggard(target) < 0 {
			return nil
		}
		if err := o.aborted(); err != nil {
			return err
		}
		if lc != nil && time.Since(slept) >= livenessEvery {
			// Peers that stay silent this long get probed: a dead one fails the op now
			// instead of at its deadline.
			slept = time.Now()
			for _, m := range o.members {
				if m != p.rank && int32(atomic.LoadUint32(p.stepW[m])-target) < 0 {
					err := lc.PeerAlive(o.ctx, m)
					// A peer that reached the step while it was probed published its part
					// and may have finished the op and exited since: its arena stays mapped,
					// so this round can still be read. Only one still behind has failed.
					if err != nil && errors.Is(err, wire.ErrPeerDead) && int32(atomic.LoadUint32(p.stepW[m])-target) < 0 &&
						o.giveUpOn(m) {
						return &PeerError{Op: o.kind.String(), Rank: p.rank, Peer: m, Err: err}
					}
				}
			}
		}
		d := 50 * time.Millisecond
		if hasDL {
			left := time.Until(deadline)
			if left <= 0 {
				return o.timeoutErr(target)
			}
			d = min(d, left)
		}
		if err := o.ctx.Err(); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return o.timeoutErr(target)
			}
			return fmt.Errorf("%s on rank %d: canceled: %w", o.kind, p.rank, err)
		}
		futex.Wait(bell, v, d)
	}
}

// giveUpOn fences member m for this op (fence.go); false when m committed the op already: it
// arrived, and its posts are there to read.
func (o *shmOp) giveUpOn(m int) bool {
	f := o.p.g.fence.Load()
	return f == nil || f.fence(m, o.seq, o.hdr.view)
}

func (o *shmOp) timeoutErr(target uint32) error {
	p := o.p
	var lag []int
	for _, m := range o.members {
		if int32(atomic.LoadUint32(p.stepW[m])-target) < 0 && o.giveUpOn(m) {
			lag = append(lag, m)
		}
	}
	if len(lag) == 0 {
		return nil // everyone arrived at the last moment
	}
	return &PeerError{Op: o.kind.String(), Rank: p.rank, Peer: lag[0], More: lag[1:],
		Timeout: o.timeoutString(), Err: context.DeadlineExceeded}
}

// timeoutString formats the op's time budget as the Conn path does.
func (o *shmOp) timeoutString() string {
	if o.budget <= 0 {
		return "the op timeout"
	}
	d := o.budget
	if d >= time.Second {
		d = d.Round(time.Second)
	} else {
		d = d.Round(time.Millisecond)
	}
	return d.String()
}

// validate checks every member's header of the round that used data half half.
func (o *shmOp) validate(half uint32) error {
	p := o.p
	off := offHeaders + int(half)*p.hdrSize
	hs := p.hs[:o.n]
	for i, m := range o.members {
		if err := decodeInto(&hs[i], p.views[m][off:off+p.hdrSize]); err != nil {
			return &PeerError{Op: o.kind.String(), Rank: p.rank, Peer: m, Err: err}
		}
		if hs[i].seq != o.seq {
			return &PeerError{Op: o.kind.String(), Rank: p.rank, Peer: m,
				Err: fmt.Errorf("rank %d is at op #%d, this rank at op #%d (the shared-memory path lost step)", m, hs[i].seq, o.seq)}
		}
	}
	st := opState{g: p.g, name: o.kind.String(), seq: o.seq, members: o.members, idx: o.idx, n: o.n}
	return st.validate(hs)
}

// decodeInto is decodeHeader into h, reusing h.extra.
func decodeInto(h *header, b []byte) error {
	ne := int(binary.LittleEndian.Uint32(b[24:]))
	if headerBase+8*ne > len(b) {
		return fmt.Errorf("malformed op header (%d extras)", ne)
	}
	h.kind, h.dtype, h.op = opKind(b[0]), reduce.DType(b[1]), reduce.Op(b[2])
	h.root = int32(binary.LittleEndian.Uint32(b[4:]))
	h.seq = binary.LittleEndian.Uint64(b[8:])
	h.count = int64(binary.LittleEndian.Uint64(b[16:]))
	h.view = binary.LittleEndian.Uint32(b[28:])
	h.extra = h.extra[:0]
	for i := 0; i < ne; i++ {
		h.extra = append(h.extra, int64(binary.LittleEndian.Uint64(b[headerBase+8*i:])))
	}
	return nil
}

// finish ends an op on the fast path. On a failure other than a mismatch (which every rank
// sees alike and which leaves the steps in lockstep) this rank gives up on the fast path: it
// records the failure in its arena so that waiting peers fail at once with its failed-ranks
// hint, and later ops of the group take the Conn path.
func (o *shmOp) finish(err error) error {
	f := o.p.g.fence.Load()
	if err == nil {
		if f == nil {
			return nil
		}
		if err = f.commit(o.kind.String(), o.seq, o.hdr.view); err == nil {
			return nil
		}
	}
	if f != nil {
		f.failed(o.seq)
	}
	var me *MismatchError
	if errors.As(err, &me) {
		return err
	}
	p := o.p
	p.broken = err
	v := p.views[p.rank]
	var failed []int
	var fr interface{ FailedRanks() []int }
	if errors.As(err, &fr) {
		failed = fr.FailedRanks()
	}
	if len(failed) > maxAbortRanks {
		failed = failed[:maxAbortRanks]
	}
	binary.LittleEndian.PutUint32(v[offNFail:], uint32(len(failed)))
	for i, r := range failed {
		binary.LittleEndian.PutUint32(v[offFailed+4*i:], uint32(int32(r)))
	}
	reason := err.Error()
	if len(reason) > offFence-offReason-4 {
		reason = reason[:offFence-offReason-4]
	}
	binary.LittleEndian.PutUint32(v[offReason:], uint32(len(reason)))
	copy(v[offReason+4:], reason)
	atomic.StoreUint32(p.abortW[p.rank], uint32(o.seq)+1|1)
	for _, m := range o.members {
		if m != p.rank {
			atomic.AddUint32(p.bellW[m], 1)
			futex.Wake(p.bellW[m], 1)
		}
	}
	return err
}

func readAbort(v []byte, peer int) *wire.AbortError {
	a := &wire.AbortError{Peer: peer}
	n := int(binary.LittleEndian.Uint32(v[offNFail:]))
	for i := 0; i < n && i < maxAbortRanks; i++ {
		a.Failed = append(a.Failed, int(int32(binary.LittleEndian.Uint32(v[offFailed+4*i:]))))
	}
	k := int(binary.LittleEndian.Uint32(v[offReason:]))
	if k > offFence-offReason-4 {
		k = offFence - offReason - 4
	}
	a.Reason = string(v[offReason+4 : offReason+4+k])
	return a
}
