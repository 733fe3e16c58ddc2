package collective

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/collective/reduce"
	"github.com/mooncake-go/mooncake/wire"
)

// Options tunes the algorithms. Zero values take the defaults.
type Options struct {
	// SmallBytes: messages up to this size use the latency-optimal algorithms. Default 64 KiB.
	SmallBytes int
	// ChunkBytes: pipelining unit of the ring and chain algorithms. Default 1 MiB.
	ChunkBytes int
	// FusedBytes: all_reduce up to this size among at most 8 members sends its data inside its
	// op header message (one exchange instead of a header round plus data rounds), and so does
	// each pair of an all_to_all whose piece is at most this size. Default 16 KiB; negative
	// turns it off. Every rank must use the same value.
	FusedBytes int
	// PairBytes: all_reduce between two members over Conn exchanges whole buffers (one
	// message each way, as recursive doubling does) up to this size, and runs the ring above
	// it. Two members send as many bytes either way; the exchange has one dependent step where
	// the ring has two, but reduces the whole buffer on both sides (the ring half of it, on
	// arrival). Default 512 KiB: across two network namespaces the exchange beat the ring up to
	// 512 KiB and lost at 1 MiB, with more CPU (figures in docs/performance.md). Every rank must
	// use the same value.
	PairBytes int
}

func (o Options) withDefaults() Options {
	if o.SmallBytes <= 0 {
		o.SmallBytes = 64 << 10
	}
	if o.ChunkBytes <= 0 {
		o.ChunkBytes = 1 << 20
	}
	if o.FusedBytes == 0 {
		o.FusedBytes = 16 << 10
	}
	o.FusedBytes = max(o.FusedBytes, 0)
	if o.PairBytes <= 0 {
		o.PairBytes = 512 << 10
	}
	return o
}

// Group is a set of ranks that run collectives together. It runs one op at a time: callers
// issue ops in the same order on every rank (the worker queue does).
type Group struct {
	conn    Conn
	rank    int
	size    int
	maxSize int
	opts    Options

	mu       sync.Mutex
	active   []bool
	excluded []bool // active ranks left out of ops (failed, not yet deactivated)
	epoch    int64
	view     uint32 // membership decisions applied (in every op header)
	seq      uint64

	pool bufPool
	shm  atomic.Pointer[shmPath] // same-host fast path (EnableSharedMemory), nil: Conn only
	// outcome words of the same-host arenas (fence.go), nil without them; they outlive the
	// fast path (a broken path keeps its mappings until Close)
	fence atomic.Pointer[fences]
}

// NewGroup returns rank's view of a group of size ranks (maxSize slots, 0 -> size) over conn.
// Ranks 0..size-1 start active; the epoch starts at 0.
func NewGroup(conn Conn, rank, size, maxSize int, opts Options) (*Group, error) {
	if maxSize <= 0 {
		maxSize = size
	}
	switch {
	case conn == nil:
		return nil, errors.New("collective: nil Conn")
	case size < 1:
		return nil, fmt.Errorf("collective: group size %d, want at least 1", size)
	case maxSize < size:
		return nil, fmt.Errorf("collective: max group size %d is below the group size %d", maxSize, size)
	case rank < 0 || rank >= maxSize:
		return nil, fmt.Errorf("collective: rank %d outside the group's %d slots", rank, maxSize)
	}
	g := &Group{conn: conn, rank: rank, size: size, maxSize: maxSize, opts: opts.withDefaults()}
	g.active = make([]bool, maxSize)
	g.excluded = make([]bool, maxSize)
	for i := 0; i < size; i++ {
		g.active[i] = true
	}
	return g, nil
}

// Rank is the local rank.
func (g *Group) Rank() int { return g.rank }

// Size is the initial group size.
func (g *Group) Size() int { return g.size }

// MaxSize is the number of rank slots (max group size).
func (g *Group) MaxSize() int { return g.maxSize }

// Conn is the transport.
func (g *Group) Conn() Conn { return g.conn }

// Epoch is the membership epoch.
func (g *Group) Epoch() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.epoch
}

// ActiveRanks returns the active mask (length MaxSize).
func (g *Group) ActiveRanks() []bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]bool(nil), g.active...)
}

// Members returns the ranks that take part in ops, in order: the active ranks that are not
// excluded.
func (g *Group) Members() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.membersLocked(nil)
}

func (g *Group) membersLocked(m []int) []int {
	for r, a := range g.active {
		if a && !g.excluded[r] {
			m = append(m, r)
		}
	}
	return m
}

// Excluded returns the active ranks that ops leave out (failed, not deactivated).
func (g *Group) Excluded() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	var x []int
	for r, a := range g.active {
		if a && g.excluded[r] {
			x = append(x, r)
		}
	}
	return x
}

// SetMembership installs a membership view: the epoch, the active mask and the active ranks
// that ops leave out (both of length MaxSize; excluded may be nil). Call it between ops, on
// the goroutine that runs them, at the same point of the op sequence on every member. A view
// change ends the same-host fast path for good (its arenas are laid out for the initial
// members).
func (g *Group) SetMembership(view uint32, epoch int64, active, excluded []bool) error {
	if len(active) != g.maxSize || (excluded != nil && len(excluded) != g.maxSize) {
		return fmt.Errorf("collective: membership masks of %d/%d slots, the group has %d", len(active), len(excluded), g.maxSize)
	}
	g.mu.Lock()
	changed := epoch != g.epoch || view != g.view
	g.view = view
	for r := range g.active {
		x := excluded != nil && excluded[r]
		if g.active[r] != active[r] || g.excluded[r] != x {
			changed = true
		}
		g.active[r], g.excluded[r] = active[r], x
	}
	g.epoch = epoch
	g.mu.Unlock()
	if p := g.shm.Load(); changed && p != nil && p.broken == nil {
		p.broken = errors.New("the group's membership changed")
	}
	return nil
}

// Seq is the sequence number the next op takes.
func (g *Group) Seq() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.seq
}

// SetSeq sets the next op's sequence number (a joining rank takes the group's).
func (g *Group) SetSeq(seq uint64) {
	g.mu.Lock()
	g.seq = seq
	g.mu.Unlock()
}

// op kinds, in the header.
type opKind uint8

const (
	kindBarrier opKind = iota + 1
	kindBroadcast
	kindAllReduce
	kindReduce
	kindAllGather
	kindGather
	kindScatter
	kindReduceScatter
	kindAllToAll
)

var kindNames = map[opKind]string{
	kindBarrier: "barrier", kindBroadcast: "broadcast", kindAllReduce: "all_reduce",
	kindReduce: "reduce", kindAllGather: "all_gather", kindGather: "gather",
	kindScatter: "scatter", kindReduceScatter: "reduce_scatter", kindAllToAll: "all_to_all",
}

func (k opKind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("op%d", uint8(k))
}

func (k opKind) hasDType() bool {
	return k == kindAllReduce || k == kindReduce || k == kindReduceScatter
}

func (k opKind) hasRoot() bool {
	return k == kindBroadcast || k == kindReduce || k == kindGather || k == kindScatter
}

func dtypeName(d reduce.DType) string { return d.String() }

func opName(o reduce.Op) string { return o.String() }

// header is what every rank announces at the start of an op.
type header struct {
	kind  opKind
	dtype reduce.DType
	op    reduce.Op
	root  int32
	seq   uint64
	count int64
	view  uint32 // membership decisions the sender applied
	extra []int64
}

const headerBase = 32

func (h *header) encode(b []byte) []byte {
	b = b[:0]
	b = append(b, byte(h.kind), byte(h.dtype), byte(h.op), 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(h.root))
	b = binary.LittleEndian.AppendUint64(b, h.seq)
	b = binary.LittleEndian.AppendUint64(b, uint64(h.count))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(h.extra)))
	b = binary.LittleEndian.AppendUint32(b, h.view)
	for _, x := range h.extra {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	return b
}

func decodeHeader(b []byte) (header, error) {
	if len(b) < headerBase {
		return header{}, fmt.Errorf("short op header (%d bytes)", len(b))
	}
	h := header{
		kind: opKind(b[0]), dtype: reduce.DType(b[1]), op: reduce.Op(b[2]),
		root:  int32(binary.LittleEndian.Uint32(b[4:])),
		seq:   binary.LittleEndian.Uint64(b[8:]),
		count: int64(binary.LittleEndian.Uint64(b[16:])),
		view:  binary.LittleEndian.Uint32(b[28:]),
	}
	ne := int(binary.LittleEndian.Uint32(b[24:]))
	if len(b) != headerBase+8*ne {
		return header{}, fmt.Errorf("malformed op header (%d bytes, %d extras)", len(b), ne)
	}
	for i := 0; i < ne; i++ {
		h.extra = append(h.extra, int64(binary.LittleEndian.Uint64(b[headerBase+8*i:])))
	}
	return h, nil
}

// steps within an op
const (
	stepHeader uint16 = 0
	stepData   uint16 = 1
	stepResult uint16 = 2
)

// opState is one running op.
type opState struct {
	g       *Group
	ctx     context.Context
	name    string
	seq     uint64
	members []int
	idx     int // local index in members
	n       int
	timeout string
	view    uint32 // membership decisions applied (fencing, fence.go)
	hdr     header // this rank's header of the op (announce)
}

// begin starts an op: takes the next sequence number and checks h against every member's.
func (g *Group) begin(ctx context.Context, h header) (*opState, error) {
	return g.beginCarry(ctx, h, nil, nil)
}

// beginFused is begin whose header messages carry payload (at most Options.FusedBytes, which
// receivers of header messages make room for; the same length
// on every rank whose header agrees): after the headers check out, ins[i] holds member i's
// payload (ins has one buffer of len(payload) bytes per member; the local one is not touched).
// A latency-bound op thus needs one message per peer instead of a header round and then its
// data rounds. Ranks that disagree on whether to fuse still exchange headers and fail with the
// same MismatchError: a header message is read the same way with or without a payload.
func (g *Group) beginFused(ctx context.Context, h header, payload []byte, ins [][]byte) (*opState, error) {
	if payload == nil {
		return g.beginCarry(ctx, h, nil, nil)
	}
	return g.beginCarry(ctx, h, func(int, int) []byte { return payload }, func(i, _ int) []byte { return ins[i] })
}

// beginCarry is beginFused with a payload of its own per member (member index i, rank m):
// out(i, m) is what the header message to m carries (nil: nothing), in(i, m) the buffer that
// m's payload lands in (nil: its header carries none; non-nil: it must carry exactly
// len(in(i, m)) bytes). Each payload is at most Options.FusedBytes. out and in nil: plain begin.
func (g *Group) beginCarry(ctx context.Context, h header, out, in func(i, m int) []byte) (*opState, error) {
	o, err := g.announce(ctx, h, out)
	if err != nil || o.n == 1 {
		return o, err
	}
	if err := o.collect(in); err != nil {
		return nil, o.finish(err)
	}
	return o, nil
}

// announce is the first half of beginCarry: it takes the op's sequence number and sends this
// rank's header message to every member. The op must not return success before collect
// checked the members' headers; between the two an op may post receives and send data into
// buffers of its own (ops with separate outputs: a round trip less), and on a failed check it
// must withdraw them and stop its sends before it ends the op with finish (which drops the
// op's messages still coming).
func (g *Group) announce(ctx context.Context, h header, out func(i, m int) []byte) (*opState, error) {
	g.mu.Lock()
	members := g.membersLocked(nil)
	seq := g.seq
	g.seq++
	h.view = g.view
	g.mu.Unlock()
	o := &opState{g: g, ctx: ctx, name: h.kind.String(), seq: seq, members: members, idx: -1, n: len(members), view: h.view}
	for i, m := range members {
		if m == g.rank {
			o.idx = i
		}
	}
	if o.idx < 0 {
		return nil, fmt.Errorf("%s: rank %d is not an active member of the group", o.name, g.rank)
	}
	if dl, ok := ctx.Deadline(); ok {
		d := time.Until(dl)
		if d >= time.Second {
			d = d.Round(time.Second)
		} else {
			d = d.Round(time.Millisecond)
		}
		o.timeout = d.String()
	} else {
		o.timeout = "the op timeout"
	}
	if o.n == 1 {
		return o, nil
	}
	h.seq = seq
	o.hdr = h
	hdr := h.encode(nil)
	var mine []byte
	for i, m := range members {
		if m == g.rank {
			continue
		}
		msg := hdr
		if out != nil {
			if p := out(i, m); len(p) > 0 {
				mine = append(append(mine[:0], hdr...), p...)
				msg = mine
			}
		}
		if err := o.send(m, stepHeader, msg); err != nil {
			return nil, o.finish(err)
		}
	}
	return o, nil
}

// collect is the second half of beginCarry: it receives every member's header message, checks
// them all (validate) and copies carried payloads into in's buffers. Its error is not yet the
// op's end (the caller passes it to finish).
func (o *opState) collect(in func(i, m int) []byte) error {
	g, members := o.g, o.members
	hs := make([]header, o.n)
	hs[o.idx] = o.hdr
	buf := g.pool.get(headerBase + 8*(2*g.maxSize+len(o.hdr.extra)) + 64 + g.opts.FusedBytes)
	defer g.pool.put(buf)
	var got []bool // members whose header message carried the payload
	if in != nil {
		got = make([]bool, o.n)
	}
	for i, m := range members {
		if m == g.rank {
			continue
		}
		k, err := o.recv(m, stepHeader, buf)
		if err != nil {
			return err
		}
		hl := headerLen(buf[:k])
		if hs[i], err = decodeHeader(buf[:hl]); err != nil {
			return &PeerError{Op: o.name, Rank: g.rank, Peer: m, Err: err}
		}
		if in != nil {
			if b := in(i, m); b != nil && k-hl == len(b) {
				got[i] = true
				copy(b, buf[hl:k])
			}
		}
	}
	if err := o.validate(hs); err != nil {
		return err
	}
	for i, m := range members {
		if in == nil || m == g.rank || got[i] {
			continue
		}
		if b := in(i, m); b != nil {
			return &PeerError{Op: o.name, Rank: g.rank, Peer: m,
				Err: fmt.Errorf("its op header came without the %d data bytes it should carry", len(b))}
		}
	}
	return nil
}

// headerLen is the length of the encoded header at the start of b (what follows is payload);
// len(b) when b is too short to tell (decodeHeader then reports it).
func headerLen(b []byte) int {
	if len(b) < headerBase {
		return len(b)
	}
	n := headerBase + 8*int(binary.LittleEndian.Uint32(b[24:]))
	if n < headerBase || n > len(b) {
		return len(b)
	}
	return n
}

// validate compares every member's header with the lowest member's, the same way on every
// rank, so all ranks report the same mismatch.
func (o *opState) validate(hs []header) error {
	ref, r0 := hs[0], o.members[0]
	for i := 1; i < len(hs); i++ {
		h, r := hs[i], o.members[i]
		name := ref.kind.String()
		switch {
		case h.view != ref.view:
			return &MismatchError{Msg: fmt.Sprintf("membership mismatch at op #%d (%s): rank %d has applied %d membership decisions, rank %d has applied %d (every active rank must make the same membership calls: activate_ranks, recover_ranks, deactivate_ranks, extend_group_size_to, sync_after_failure)",
				ref.seq, name, r, h.view, r0, ref.view), Membership: true}
		case h.kind != ref.kind:
			return &MismatchError{Msg: fmt.Sprintf("collective mismatch at op #%d: rank %d called %s, rank %d called %s",
				ref.seq, r, h.kind, r0, ref.kind)}
		case ref.kind.hasDType() && h.dtype != ref.dtype:
			return &MismatchError{Msg: fmt.Sprintf("%s: rank %d has dtype %s, rank %d has %s",
				name, r, dtypeName(h.dtype), r0, dtypeName(ref.dtype))}
		case ref.kind.hasDType() && h.op != ref.op:
			return &MismatchError{Msg: fmt.Sprintf("%s: rank %d uses reduce op %s, rank %d uses %s",
				name, r, opName(h.op), r0, opName(ref.op))}
		case ref.kind.hasRoot() && h.root != ref.root:
			return &MismatchError{Msg: fmt.Sprintf("%s: rank %d names root %d, rank %d names root %d",
				name, r, h.root, r0, ref.root)}
		case h.count != ref.count && ref.kind.hasDType():
			return &MismatchError{Msg: fmt.Sprintf("%s: rank %d has %d %s elements, rank %d has %d",
				name, r, h.count, dtypeName(ref.dtype), r0, ref.count)}
		case h.count != ref.count:
			return &MismatchError{Msg: fmt.Sprintf("%s: rank %d has %d bytes, rank %d has %d",
				name, r, h.count, r0, ref.count)}
		case len(h.extra) != len(ref.extra):
			return &MismatchError{Msg: fmt.Sprintf("%s: rank %d and rank %d disagree on the group size (%d vs %d split sizes)",
				name, r, r0, len(h.extra), len(ref.extra))}
		}
	}
	if ref.kind == kindAllToAll {
		// extra = in_bytes[0..size) ++ out_bytes[0..size), indexed by rank.
		for i, hi := range hs {
			half := len(hi.extra) / 2
			for j, hj := range hs {
				ri, rj := o.members[i], o.members[j]
				if ri >= half || rj >= half {
					continue
				}
				if hi.extra[rj] != hj.extra[half+ri] {
					return &MismatchError{Msg: fmt.Sprintf("all_to_all: rank %d sends %d bytes to rank %d, which expects %d bytes from it",
						ri, hi.extra[rj], rj, hj.extra[half+ri])}
				}
			}
		}
	}
	return nil
}

// finish ends the op: on success it commits the op (fencing, fence.go: it fails if a peer gave
// up on this rank in this op); on failure it fences the peers it gave up on and aborts the op's
// tag space on every member, so no peer waits for this rank any longer.
func (o *opState) finish(err error) error {
	f := o.g.fence.Load()
	if err == nil {
		if f == nil || o.n <= 1 {
			return nil
		}
		if err = f.commit(o.name, o.seq, o.view); err == nil {
			return nil
		}
	}
	if f != nil {
		f.failed(o.seq)
		if ranks := gaveUpOn(err); len(ranks) > 0 {
			f.fenceAll(ranks, o.seq, o.view)
		}
	}
	if o.n <= 1 {
		return err
	}
	ab := &wire.AbortError{Peer: o.g.rank, Reason: err.Error()}
	var me *MismatchError
	if errors.As(err, &me) && !me.Membership {
		// An argument mismatch is seen by every rank on its own: no peer is told, but the op's
		// messages are dropped here, those arrived and those still coming (all_gather and
		// all_to_all send data before the headers are checked, announce).
		o.g.conn.Abort(wire.SpaceOf(o.tag(0)), nil, ab)
		return err
	}
	// A membership mismatch is not seen by every rank (the ranks disagree on who the members
	// are), so it aborts like a failure.
	var fr interface{ FailedRanks() []int }
	if errors.As(err, &fr) {
		ab.Failed = fr.FailedRanks()
	}
	o.g.conn.Abort(wire.SpaceOf(o.tag(0)), o.members, ab)
	return err
}

func (o *opState) tag(step uint16) uint64 { return wire.Tag(o.seq, step) }

func (o *opState) wrap(ctx context.Context, peer int, err error) error {
	if err == nil {
		return nil
	}
	var pe *PeerError
	if errors.As(err, &pe) {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) && o.ctx.Err() != nil {
		return &PeerError{Op: o.name, Rank: o.g.rank, Peer: peer, Timeout: o.timeout, Err: err}
	}
	if errors.Is(err, context.Canceled) && o.ctx.Err() != nil {
		return fmt.Errorf("%s on rank %d: canceled: %w", o.name, o.g.rank, err)
	}
	return &PeerError{Op: o.name, Rank: o.g.rank, Peer: peer, Err: err}
}

func (o *opState) sendCtx(ctx context.Context, peer int, step uint16, data []byte) error {
	return o.wrap(ctx, peer, o.g.conn.Send(ctx, peer, o.tag(step), data))
}

func (o *opState) recvCtx(ctx context.Context, peer int, step uint16, buf []byte) (int, error) {
	n, err := o.g.conn.Recv(ctx, peer, o.tag(step), buf)
	return n, o.wrap(ctx, peer, err)
}

func (o *opState) send(peer int, step uint16, data []byte) error {
	return o.sendCtx(o.ctx, peer, step, data)
}

func (o *opState) recv(peer int, step uint16, buf []byte) (int, error) {
	return o.recvCtx(o.ctx, peer, step, buf)
}

// recvFull receives exactly len(buf) bytes.
func (o *opState) recvFullCtx(ctx context.Context, peer int, step uint16, buf []byte) error {
	n, err := o.recvCtx(ctx, peer, step, buf)
	if err == nil && n != len(buf) {
		err = &PeerError{Op: o.name, Rank: o.g.rank, Peer: peer,
			Err: fmt.Errorf("got %d bytes, expected %d", n, len(buf))}
	}
	return err
}

func (o *opState) recvFull(peer int, step uint16, buf []byte) error {
	return o.recvFullCtx(o.ctx, peer, step, buf)
}

// rel maps a member index relative to root index ri to a rank.
func (o *opState) rankAt(i int) int { return o.members[((i%o.n)+o.n)%o.n] }

func (o *opState) indexOf(rank int) int {
	for i, m := range o.members {
		if m == rank {
			return i
		}
	}
	return -1
}

// sender streams messages on its own goroutine, so the caller's loop can receive and reduce
// while earlier chunks are on the wire.
type sender struct {
	o      *opState
	ctx    context.Context
	cancel context.CancelFunc
	ch     chan sendItem
	done   chan struct{}
	err    error
}

type sendItem struct {
	peer  int
	step  uint16
	data  []byte
	put   []byte // returned to the pool once sent
	after func() // run by the sender once data is sent (not after a failed send)
}

// startSender starts a sender for up to capacity queued items; ctx (derived from the op's)
// is canceled when a send fails, so the caller's receives stop too.
func (o *opState) startSender(capacity int) *sender {
	ctx, cancel := context.WithCancel(o.ctx)
	s := &sender{o: o, ctx: ctx, cancel: cancel, ch: make(chan sendItem, capacity), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for it := range s.ch {
			if s.err == nil {
				if err := o.sendCtx(ctx, it.peer, it.step, it.data); err != nil {
					s.err = err
					cancel()
				} else if it.after != nil {
					it.after()
				}
			}
			if it.put != nil {
				o.g.pool.put(it.put)
			}
		}
	}()
	return s
}

func (s *sender) push(peer int, step uint16, data, put []byte) {
	s.ch <- sendItem{peer: peer, step: step, data: data, put: put}
}

// pushThen queues data like push, and after to run on the sender once data is sent.
func (s *sender) pushThen(peer int, step uint16, data []byte, after func()) {
	s.ch <- sendItem{peer: peer, step: step, data: data, after: after}
}

// wait finishes the sender; on a caller error it stops sending first. It returns the first
// error (the caller's, else the sender's).
func (s *sender) wait(callerErr error) error {
	if callerErr != nil {
		s.cancel()
	}
	close(s.ch)
	<-s.done
	s.cancel()
	if callerErr != nil {
		// A receive that failed because the sender canceled it reports the send error instead.
		if s.err != nil && errors.Is(callerErr, context.Canceled) {
			return s.err
		}
		return callerErr
	}
	return s.err
}

// span is a byte range.
type span struct{ off, n int }

// chunkSpans splits [off, off+n) into pieces of at most chunk bytes.
func chunkSpans(off, n, chunk int) []span {
	var s []span
	for n > 0 {
		k := min(n, chunk)
		s = append(s, span{off, k})
		off += k
		n -= k
	}
	return s
}

// segments splits count elements of esize bytes into parts nearly equal parts.
func segments(count, parts, esize int) []span {
	s := make([]span, parts)
	base, rem := count/parts, count%parts
	off := 0
	for i := range s {
		k := base
		if i < rem {
			k++
		}
		s[i] = span{off * esize, k * esize}
		off += k
	}
	return s
}

func (o *opState) chunkBytes(esize int) int {
	c := o.g.opts.ChunkBytes / esize * esize
	if c < esize {
		c = esize
	}
	return c
}

// bufPool recycles scratch buffers by power-of-two size class.
type bufPool struct{ classes [48]sync.Pool }

func (p *bufPool) get(n int) []byte {
	if n == 0 {
		return nil
	}
	c := bits.Len(uint(n - 1))
	if v := p.classes[c].Get(); v != nil {
		return (*(v.(*[]byte)))[:n]
	}
	return make([]byte, n, 1<<c)
}

func (p *bufPool) put(b []byte) {
	if cap(b) == 0 || cap(b)&(cap(b)-1) != 0 {
		return
	}
	b = b[:cap(b)]
	c := bits.Len(uint(cap(b) - 1))
	p.classes[c].Put(&b)
}

func elemSize(dt reduce.DType) int {
	n, _ := reduce.ElemSize(dt)
	return n
}

// checkReduce validates a reduction's local arguments.
func checkReduce(name string, nbytes int, dt reduce.DType, op reduce.Op) (int, error) {
	es, err := reduce.ElemSize(dt)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	if err := reduce.Check(dt, op); err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	if nbytes%es != 0 {
		return 0, fmt.Errorf("%s: buffer of %d bytes is not a whole number of %s elements", name, nbytes, dtypeName(dt))
	}
	return es, nil
}
