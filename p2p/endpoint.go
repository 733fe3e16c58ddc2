package p2p

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/collective"
	"github.com/mooncake-go/mooncake/collective/reduce"
	"github.com/mooncake-go/mooncake/internal/futex"
	"github.com/mooncake-go/mooncake/internal/memview"
)

// Options sizes an endpoint. Zero values take the defaults.
type Options struct {
	Slots     int // ring slots per peer (credits); default 4
	SlotBytes int // payload bytes per slot, rounded up to 64; default 512 KiB
}

func (o Options) withDefaults() Options {
	if o.Slots <= 0 {
		o.Slots = 4
	}
	if o.SlotBytes <= 0 {
		o.SlotBytes = 512 << 10
	}
	o.SlotBytes = (o.SlotBytes + 63) &^ 63
	return o
}

// Info is what a rank publishes so that peers can reach it.
type Info struct {
	Rank      int    `json:"rank"`
	Segment   string `json:"segment"`
	Addr      uint64 `json:"addr"`
	MaxPeers  int    `json:"max_peers"`
	Slots     int    `json:"slots"`
	SlotBytes int    `json:"slot_bytes"`
	// Engine identifies the process's engine instance (liveness probes check it, so a new
	// process that took over a dead one's address is not mistaken for it).
	Engine string `json:"engine,omitempty"`
}

const (
	line    = 64
	slotHdr = 64
)

// ErrClosed is returned by operations on a closed endpoint.
var ErrClosed = errors.New("p2p: endpoint closed")

// layout computes offsets within a region; identical on every rank.
type layout struct {
	P, K, S int
}

func (l layout) ctrl(p int) int    { return p * line }
func (l layout) bell() int         { return l.P * line }
func (l layout) scratch(p int) int { return (l.P+1)*line + p*line }
func (l layout) slotSize() int     { return slotHdr + l.S }
func (l layout) stage(p, k int) int {
	return (2*l.P+1)*line + (p*l.K+k)*l.slotSize()
}
func (l layout) ring(p, k int) int {
	return (2*l.P+1)*line + l.P*l.K*l.slotSize() + (p*l.K+k)*l.slotSize()
}
func (l layout) size() int { return l.ring(l.P, 0) }

// Endpoint is one rank's end of the messaging layer.
type Endpoint struct {
	f     Fabric
	rank  int
	lay   layout
	base  uintptr
	mem   []byte
	peers []*peer
	bell  *uint32
	bellN atomic.Uint32

	mu         sync.Mutex
	posted     []*Request
	unexpected []*inbound
	inflight   map[*Request]*inbound
	aborted    map[uint64]*collective.AbortError
	abortSent  map[uint64]bool // spaces this rank told its peers about
	abortOrder []uint64

	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
	life      sync.RWMutex // Send holds it shared; Close takes it before freeing the region

	// Waking the progress goroutine. Peers on this host ring the bell word through shared
	// memory (futex); when every peer is reached over the network, their bell writes arrive
	// through this process's tcp server, which signals bellCh, and the progress goroutine
	// parks on it in the Go scheduler instead of a futex syscall (no thread hand-off per wake).
	bellCh   <-chan struct{}
	unwatch  func()
	kick     chan struct{} // local wake-ups (close, reset, dead peer) for a channel park
	netPeers atomic.Bool   // every other peer connected, over the network: park on bellCh
	// drainMu is held by whoever drains the rings: the progress goroutine, or the tcp server
	// goroutine that stored a bell write (drainHook). It owns the receive side of every peer
	// (cur, consumed, resets).
	drainMu sync.Mutex
	linksMu sync.Mutex // serialises linksChanged, so the last decision sees every link

	parts   sync.Pool    // *[]byte of S bytes: chunks of unexpected messages
	stashed atomic.Int64 // bytes copied into unexpected messages' parts (tests)

	testOnChunk atomic.Pointer[func(hd chunkHdr)] // tests: runs before each received chunk is handled
}

type peer struct {
	rank      int
	connected atomic.Bool
	seg       uint64
	remote    uint64 // peer's region base
	sendSem   chan struct{}
	sent      uint32 // slots sent (under sendSem)
	msgID     uint32
	broken    error
	headWord  *uint32 // local, written by the peer
	tailWord  *uint32 // local, written by the peer (credits)
	scratch   uintptr
	stage     []byte // K staging slots, one per ring slot of ours at the peer
	stageAddr uintptr
	ws        []Write // the batch being sent (under sendSem)

	tailCh  <-chan struct{} // WatchWord of tailWord (nil: the fabric cannot watch words)
	unwatch func()

	// receive side, owned by whoever holds drainMu (self: by the self-sender)
	consumed atomic.Uint32
	cur      *inbound
	creditCh chan struct{}

	// liveness and incarnations (liveness.go)
	dead      atomic.Pointer[deadErr]
	lastAlive atomic.Int64 // unix ns of the last message or answered probe
	segName   atomic.Pointer[string]
	engineID  atomic.Pointer[string]
	link      atomic.Pointer[link]          // what the creditor writes to
	reset     atomic.Pointer[chan struct{}] // Reconnect asks progress to reset the receive side
}

// link is the peer's current incarnation as the creditor sees it.
type link struct {
	seg    uint64
	remote uint64
	stream WriteStream // ordered writes to it (StreamOpener fabrics; nil: Fabric.Write)
}

// inbound is a message being received.
type inbound struct {
	peer     int
	tag      uint64
	msgID    uint32
	total    int
	got      int
	req      *Request // matched posted receive
	parts    [][]byte // unexpected: the payload so far, one pooled buffer per chunk
	done     bool
	claimer  atomic.Pointer[Request] // a receive that took this unexpected message before it completed
	discard  atomic.Bool             // dropped (aborted op, too long for its receive)
	arrivals uint64
}

// New allocates rank's region for a group of up to maxPeers ranks and starts its progress
// goroutine. Connect the peers before exchanging messages with them.
func New(f Fabric, rank, maxPeers int, opts Options) (*Endpoint, error) {
	if maxPeers < 1 || rank < 0 || rank >= maxPeers {
		return nil, fmt.Errorf("p2p: rank %d outside a group of %d", rank, maxPeers)
	}
	opts = opts.withDefaults()
	lay := layout{P: maxPeers, K: opts.Slots, S: opts.SlotBytes}
	base, err := f.AllocateShared(uint64(lay.size()))
	if err != nil {
		return nil, fmt.Errorf("p2p: allocating %d bytes of shared memory for rank %d: %w", lay.size(), rank, err)
	}
	e := &Endpoint{f: f, rank: rank, lay: lay, base: base, mem: memview.Bytes(base, lay.size()),
		inflight: map[*Request]*inbound{}, aborted: map[uint64]*collective.AbortError{},
		abortSent: map[uint64]bool{},
		closed:    make(chan struct{}), kick: make(chan struct{}, 1)}
	e.bell = memview.Uint32(base + uintptr(lay.bell()))
	if ww, ok := f.(WordWatcher); ok {
		e.bellCh, e.unwatch = ww.WatchWord(base+uintptr(lay.bell()), e.drainHook)
	}
	for p := 0; p < maxPeers; p++ {
		pp := &peer{rank: p, sendSem: make(chan struct{}, 1), creditCh: make(chan struct{}, 1)}
		pp.headWord = memview.Uint32(base + uintptr(lay.ctrl(p)))
		pp.tailWord = memview.Uint32(base + uintptr(lay.ctrl(p)+4))
		pp.scratch = base + uintptr(lay.scratch(p))
		pp.stageAddr = base + uintptr(lay.stage(p, 0))
		pp.stage = e.mem[lay.stage(p, 0):lay.stage(p, lay.K)]
		if ww, ok := f.(WordWatcher); ok && p != rank {
			pp.tailCh, pp.unwatch = ww.WatchWord(base+uintptr(lay.ctrl(p)+4), nil)
		}
		e.peers = append(e.peers, pp)
	}
	e.peers[rank].connected.Store(true)
	e.wg.Add(1)
	go e.progress()
	return e, nil
}

// Info describes this endpoint for its peers.
func (e *Endpoint) Info() Info {
	info := Info{Rank: e.rank, Segment: e.f.SegmentName(), Addr: uint64(e.base), MaxPeers: e.lay.P,
		Slots: e.lay.K, SlotBytes: e.lay.S}
	if id, ok := e.f.(interface{ EngineID() string }); ok {
		info.Engine = id.EngineID()
	}
	return info
}

// Rank is the local rank.
func (e *Endpoint) Rank() int { return e.rank }

// Connect opens the segment of the peer described by info.
func (e *Endpoint) Connect(info Info) error {
	if err := e.checkInfo(info); err != nil {
		return err
	}
	if info.Rank == e.rank {
		return nil
	}
	p := e.peers[info.Rank]
	select {
	case p.sendSem <- struct{}{}:
	case <-e.closed:
		return ErrClosed
	}
	defer func() { <-p.sendSem }()
	if p.connected.Load() {
		if p.remote == info.Addr {
			return nil
		}
		return fmt.Errorf("p2p: rank %d is already connected", info.Rank)
	}
	seg, err := e.f.OpenSegment(info.Segment)
	if err != nil {
		return fmt.Errorf("p2p: rank %d cannot open the segment %q of rank %d: %w", e.rank, info.Segment, info.Rank, err)
	}
	p.seg, p.remote = seg, info.Addr
	p.link.Store(&link{seg, info.Addr, e.openStream(seg)})
	name := info.Segment
	p.segName.Store(&name)
	p.engineID.Store(&info.Engine)
	p.lastAlive.Store(time.Now().UnixNano())
	p.connected.Store(true)
	e.linksChanged()
	e.wg.Add(1)
	go e.creditor(p)
	return nil
}

// networked reports whether p's current link reaches it over the network.
func (p *peer) networked() bool {
	l := p.link.Load()
	if l == nil || l.stream == nil {
		return false
	}
	n, ok := l.stream.(networked)
	return ok && n.Network()
}

// linksChanged decides again how the progress goroutine sleeps (after a Connect or Reconnect)
// and wakes it to apply that.
func (e *Endpoint) linksChanged() {
	e.linksMu.Lock()
	defer e.linksMu.Unlock()
	net := e.bellCh != nil
	for _, p := range e.peers {
		if p.rank == e.rank {
			continue
		}
		if !p.connected.Load() || !p.networked() {
			net = false
			break
		}
	}
	e.netPeers.Store(net)
	e.wake()
}

// park waits in the Go scheduler (timer t reused) for a token on sig, for other (nil: none), for
// Close, or for d to pass. Its callers recheck their condition after it returns.
func (e *Endpoint) park(t *time.Timer, d time.Duration, sig, other <-chan struct{}) {
	t.Reset(d)
	select {
	case <-sig:
	case <-other:
	case <-t.C:
	case <-e.closed:
	}
	t.Stop()
}

// wake wakes the progress goroutine however it sleeps.
func (e *Endpoint) wake() {
	futex.Wake(e.bell, 1)
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// checkInfo checks a peer's published endpoint against this one's layout.
func (e *Endpoint) checkInfo(info Info) error {
	if info.Rank < 0 || info.Rank >= e.lay.P {
		return fmt.Errorf("p2p: peer rank %d outside a group of %d", info.Rank, e.lay.P)
	}
	if info.MaxPeers != e.lay.P || info.Slots != e.lay.K || info.SlotBytes != e.lay.S {
		return fmt.Errorf("p2p: rank %d uses a layout of %d peers x %d slots x %d bytes, rank %d uses %d x %d x %d (set the same options on every rank)",
			info.Rank, info.MaxPeers, info.Slots, info.SlotBytes, e.rank, e.lay.P, e.lay.K, e.lay.S)
	}
	return nil
}

// Close stops the endpoint: pending receives fail, the region is freed.
func (e *Endpoint) Close() error {
	var err error
	e.closeOnce.Do(func() {
		close(e.closed)
		e.wake()
		e.wg.Wait()
		if e.unwatch != nil {
			e.unwatch()
		}
		e.drainMu.Lock() // a drainHook under way finishes; later ones see closed
		e.drainMu.Unlock()
		for _, p := range e.peers {
			if p.unwatch != nil {
				p.unwatch()
			}
		}
		e.life.Lock() // in-flight sends (they stop waiting for credits on close) are done
		defer e.life.Unlock()
		e.mu.Lock()
		reqs := append([]*Request(nil), e.posted...)
		for r := range e.inflight {
			reqs = append(reqs, r)
		}
		for _, in := range e.unexpected {
			if c := in.claimer.Load(); c != nil {
				reqs = append(reqs, c)
			}
		}
		e.posted, e.inflight = nil, map[*Request]*inbound{}
		e.mu.Unlock()
		for _, r := range reqs {
			r.cancel(ErrClosed)
		}
		for _, p := range e.peers {
			if l := p.link.Load(); l != nil && l.stream != nil {
				l.stream.Close()
			}
		}
		err = e.f.FreeShared(e.base)
	})
	return err
}

func (e *Endpoint) isClosed() bool {
	select {
	case <-e.closed:
		return true
	default:
		return false
	}
}

// waitWord waits until cond() holds; word is the 32-bit word whose change makes it true.
// It spins a little, then futex-waits in short slices, watching ctx and Close. With sig (the
// word's WatchWord channel) it parks on sig instead while net() holds (the word's writer is
// reached over the network, so its writes come through this process's tcp server).
func (e *Endpoint) waitWord(ctx context.Context, word *uint32, cond func() bool, peer int, sig <-chan struct{}, net func() bool) error {
	for i := 0; i < 64; i++ {
		if cond() {
			return nil
		}
		if i > 16 {
			runtime.Gosched()
		}
	}
	lastProbe := time.Now()
	park := time.NewTimer(time.Hour)
	defer park.Stop()
	for {
		v := atomic.LoadUint32(word)
		if cond() {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if e.isClosed() {
			return ErrClosed
		}
		if peer >= 0 {
			if err := e.probeIfSilent(ctx, peer, &lastProbe); err != nil {
				return err
			}
		}
		d := 10 * time.Millisecond
		if dl, ok := ctx.Deadline(); ok {
			if left := time.Until(dl); left < d {
				d = max(left, time.Microsecond)
			}
		}
		if sig != nil && net() {
			e.park(park, d, sig, ctx.Done())
			continue
		}
		futex.Wait(word, v, d)
	}
}

// Send sends data to peer with tag: it returns once data may be reused: the message is in the
// peer's ring, or (over a write stream) on its way there in order (a failure then shows on a
// later Send to the peer). It never waits for the peer to receive the message.
func (e *Endpoint) Send(ctx context.Context, peer int, tag uint64, data []byte) error {
	if peer < 0 || peer >= e.lay.P {
		return fmt.Errorf("p2p: rank %d does not exist (group of %d)", peer, e.lay.P)
	}
	p := e.peers[peer]
	if !p.connected.Load() {
		return fmt.Errorf("p2p: rank %d is not connected to rank %d", peer, e.rank)
	}
	e.life.RLock()
	defer e.life.RUnlock()
	if e.isClosed() {
		return ErrClosed
	}
	select {
	case p.sendSem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-e.closed:
		return ErrClosed
	}
	defer func() { <-p.sendSem }()
	if p.broken != nil {
		return p.broken
	}
	if d := p.dead.Load(); d != nil {
		return d.err
	}
	p.msgID++
	if peer == e.rank {
		e.sendSelf(p, tag, data)
		return nil
	}
	K, S := uint32(e.lay.K), e.lay.S
	for off, first := 0, true; first || off < len(data); first = false {
		if err := e.waitWord(ctx, p.tailWord, func() bool { return p.sent-atomic.LoadUint32(p.tailWord) < K }, peer, p.tailCh, p.networked); err != nil {
			if errors.Is(err, ErrClosed) || errors.Is(err, collective.ErrPeerDead) {
				return err
			}
			return fmt.Errorf("waiting for rank %d to take earlier messages: %w", peer, err)
		}
		// Every free slot of ours at the peer takes a chunk, and one batch carries them all
		// (each chunk followed by its head and doorbell words, so the receiver starts on the
		// first while the rest are on the wire): one round trip per window of K chunks, not
		// per chunk.
		free := K - (p.sent - atomic.LoadUint32(p.tailWord))
		stream := p.link.Load().stream
		ws := p.ws[:0]
		for ; free > 0 && (first || off < len(data)); free-- {
			n := min(S, len(data)-off)
			k := int(p.sent % K)
			st := p.stage[k*e.lay.slotSize():]
			putHeader(st, tag, p.msgID, n, len(data), off)
			p.sent++
			// Bytes 48..55 of the staged header (ignored by the receiver) are the sources of
			// this chunk's head and doorbell values.
			binary.LittleEndian.PutUint32(st[48:], p.sent)
			binary.LittleEndian.PutUint32(st[52:], uint32(e.rank)<<24|e.bellN.Add(1)&0xFFFFFF)
			src := p.stageAddr + uintptr(k*e.lay.slotSize())
			dst := p.remote + uint64(e.lay.ring(e.rank, k))
			if stream != nil && n >= directBytes {
				// A stream takes any source and is done with it when Write returns: the
				// payload goes out from the caller's buffer, no staging copy.
				ws = append(ws,
					Write{Src: src, Dst: dst, Len: slotHdr},
					Write{Src: memview.Addr(data[off:]), Dst: dst + slotHdr, Len: uint64(n)})
			} else {
				copy(st[slotHdr:slotHdr+n], data[off:off+n])
				ws = append(ws, Write{Src: src, Dst: dst, Len: uint64(slotHdr + n)})
			}
			ws = append(ws,
				Write{Src: src + 48, Dst: p.remote + uint64(e.lay.ctrl(e.rank)), Len: 4},
				Write{Src: src + 52, Dst: p.remote + uint64(e.lay.bell()), Len: 4})
			off += n
			first = false
		}
		p.ws = ws
		// Once submitted, a write runs to its end (bounded by the engine's transfer timeout):
		// the staging slots must not be reused while the engine may still read them.
		if err := e.write(p, stream, ws); err != nil {
			p.broken = fmt.Errorf("transfer to rank %d failed: %w", peer, err)
			return p.broken
		}
		if off >= len(data) {
			break
		}
	}
	return nil
}

// directBytes: chunks of at least this many bytes go out from the sender's buffer when the
// peer has a stream (smaller ones are copied next to their header: one write, not two).
const directBytes = 4 << 10

// openStream opens an ordered write stream to seg when the fabric has them (and
// MC_P2P_STREAMS is not 0); nil sends with Fabric.Write, a round trip per batch.
func (e *Endpoint) openStream(seg uint64) WriteStream {
	so, ok := e.f.(StreamOpener)
	if !ok || os.Getenv("MC_P2P_STREAMS") == "0" {
		return nil
	}
	st, err := so.OpenStream(seg)
	if err != nil {
		return nil
	}
	return st
}

// write sends one batch to p (under p.sendSem). Once submitted, a write runs to its end: the
// staging slots must not be reused while the engine may still read them, so it is not
// canceled with the caller's context (the engine's transfer timeout bounds it).
func (e *Endpoint) write(p *peer, stream WriteStream, ws []Write) error {
	if stream != nil {
		return stream.Write(context.Background(), ws)
	}
	return e.f.Write(context.Background(), p.seg, ws)
}

func putHeader(b []byte, tag uint64, id uint32, n, total, off int) {
	binary.LittleEndian.PutUint64(b[0:], tag)
	binary.LittleEndian.PutUint32(b[8:], id)
	binary.LittleEndian.PutUint32(b[12:], uint32(n))
	binary.LittleEndian.PutUint64(b[16:], uint64(total))
	binary.LittleEndian.PutUint64(b[24:], uint64(off))
}

type chunkHdr struct {
	tag   uint64
	id    uint32
	n     int
	total int
	off   int
}

func getHeader(b []byte) chunkHdr {
	return chunkHdr{
		tag: binary.LittleEndian.Uint64(b[0:]), id: binary.LittleEndian.Uint32(b[8:]),
		n:     int(binary.LittleEndian.Uint32(b[12:])),
		total: int(binary.LittleEndian.Uint64(b[16:])), off: int(binary.LittleEndian.Uint64(b[24:])),
	}
}

func (e *Endpoint) sendSelf(p *peer, tag uint64, data []byte) {
	e.handleChunk(p, chunkHdr{tag: tag, id: p.msgID, n: len(data), total: len(data)}, data)
}

// progress drains every peer's ring into posted receives or the unexpected queue, when
// drainHook has not done it already.
func (e *Endpoint) progress() {
	defer e.wg.Done()
	idle := 0
	park := time.NewTimer(time.Hour)
	defer park.Stop()
	for {
		bell := atomic.LoadUint32(e.bell)
		e.drainMu.Lock() // a drainHook that holds it finishes its pass first
		did, _ := e.drain(true)
		e.drainMu.Unlock()
		if did {
			idle = 0
			continue
		}
		if e.isClosed() {
			return
		}
		idle++
		if idle < 64 {
			if idle > 16 {
				runtime.Gosched()
			}
			continue
		}
		if e.netPeers.Load() {
			// Every bell write comes through our tcp server, which runs drainHook after
			// storing it and signals bellCh when the hook left the write to us (a token stays
			// buffered, so a write since this pass began is not missed).
			e.park(park, 50*time.Millisecond, e.bellCh, e.kick)
			continue
		}
		futex.Wait(e.bell, bell, 50*time.Millisecond)
	}
}

// drainHook runs on the tcp server goroutine that stored a bell write: when every peer is
// reached over the network and nobody else is draining, it drains the rings right there, so
// a chunk that arrives over tcp is delivered (copied or reduced into its receive) without
// waking the progress goroutine: one goroutine hand-off less per chunk, and no idle P woken
// to run it. It leaves the write to the progress goroutine (false) when a pass is under way
// (that goroutine passes again after it), when a peer's receive side awaits a reset, or after
// Close.
func (e *Endpoint) drainHook() bool {
	if !e.netPeers.Load() || !e.drainMu.TryLock() {
		return false
	}
	defer e.drainMu.Unlock()
	if e.isClosed() {
		return false
	}
	_, ok := e.drain(false)
	return ok
}

// drain is one pass over every peer's ring (under drainMu); did reports whether it consumed
// anything. Resets that Reconnect asked for are applied when resets is set; otherwise a peer
// that awaits one is skipped and ok is false.
func (e *Endpoint) drain(resets bool) (did, ok bool) {
	K := uint32(e.lay.K)
	ok = true
	for _, p := range e.peers {
		if p.rank == e.rank {
			continue
		}
		if rc := p.reset.Load(); rc != nil {
			if !resets {
				ok = false
				continue
			}
			e.resetRecv(p)
			p.reset.Store(nil)
			close(*rc)
		}
		h := atomic.LoadUint32(p.headWord)
		c := p.consumed.Load()
		if c == h || h-c > K {
			// h-c > K: no sender gets more than K slots ahead, so this head was written by a
			// new incarnation of the peer before Reconnect reset our side; draining from
			// the old count would walk ~2^32 slots of garbage. Wait for the reset.
			continue
		}
		for ; c != h; c++ {
			off := e.lay.ring(p.rank, int(c%K))
			slot := e.mem[off : off+e.lay.slotSize()]
			hd := getHeader(slot)
			if hd.n < 0 || hd.n > e.lay.S {
				hd.n = 0 // corrupt; drop
			}
			e.handleChunk(p, hd, slot[slotHdr:slotHdr+hd.n])
		}
		p.consumed.Store(c)
		p.lastAlive.Store(time.Now().UnixNano())
		select {
		case p.creditCh <- struct{}{}:
		default:
		}
		did = true
	}
	return did, ok
}

// creditor returns credits to p: it writes the consumed count into p's tail word for us.
func (e *Endpoint) creditor(p *peer) {
	defer e.wg.Done()
	var last uint32
	var lastLink *link
	for {
		c := p.consumed.Load()
		l := p.link.Load()
		if c != last || l != lastLink {
			sc := memview.Bytes(p.scratch, line)
			binary.LittleEndian.PutUint32(sc[4:], c)
			w := [1]Write{{Src: p.scratch + 4, Dst: l.remote + uint64(e.lay.ctrl(e.rank)+4), Len: 4}}
			// Over the sender's stream a credit costs no round trip; a broken stream (the
			// peer failed, or it is being replaced) falls back to a plain write.
			err := errors.New("no stream")
			if l.stream != nil {
				err = l.stream.Write(context.Background(), w[:])
			}
			if err != nil {
				err = e.f.Write(context.Background(), l.seg, w[:])
			}
			if err != nil {
				if p.dead.Load() != nil && p.link.Load() == l {
					// A dead peer takes no credits; wait for a new incarnation.
					select {
					case <-p.creditCh:
					case <-e.closed:
						return
					}
					continue
				}
				// The peer is gone or unreachable; its sends to us will time out.
				select {
				case <-e.closed:
					return
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			last, lastLink = c, l
			continue
		}
		select {
		case <-p.creditCh:
		case <-e.closed:
			return
		}
	}
}

// handleChunk delivers one chunk from p.
func (e *Endpoint) handleChunk(p *peer, hd chunkHdr, payload []byte) {
	if f := e.testOnChunk.Load(); f != nil {
		(*f)(hd)
	}
	if hd.off == 0 {
		if in := p.cur; in != nil {
			p.cur = nil
			e.cutOff(in)
		}
		if collective.IsAbortTag(hd.tag) {
			ab := collective.DecodeAbort(payload)
			ab.Peer = p.rank
			e.abortLocal(collective.SpaceOf(hd.tag), ab)
			return
		}
		in := &inbound{peer: p.rank, tag: hd.tag, msgID: hd.id, total: hd.total}
		e.mu.Lock()
		if _, ok := e.aborted[collective.SpaceOf(hd.tag)]; ok {
			in.discard.Store(true)
		} else if r := e.matchPosted(p.rank, hd.tag); r != nil {
			if hd.total > len(r.buf) {
				in.discard.Store(true)
				e.mu.Unlock()
				r.finish(0, p.rank, tooLong(p.rank, hd.tag, hd.total, len(r.buf)))
				e.mu.Lock()
			} else {
				in.req = r
				e.inflight[r] = in
			}
		} else {
			e.unexpected = append(e.unexpected, in)
		}
		e.mu.Unlock()
		p.cur = in
	} else if in := p.cur; in == nil || in.msgID != hd.id || in.got != hd.off {
		return // the rest of a message whose start we never saw; drop
	}
	in := p.cur
	if in.req == nil && !in.discard.Load() {
		if c := in.claimer.Load(); c != nil {
			e.adopt(in, c)
		}
	}
	if !in.discard.Load() {
		if in.req != nil {
			in.req.copyIn(hd.off, payload)
		} else {
			in.parts = append(in.parts, e.stash(payload))
		}
	}
	in.got += len(payload)
	if in.got < in.total {
		return
	}
	p.cur = nil
	if in.discard.Load() {
		return
	}
	if in.req != nil {
		e.mu.Lock()
		delete(e.inflight, in.req)
		e.mu.Unlock()
		in.req.finish(in.total, in.peer, nil)
		return
	}
	e.mu.Lock()
	in.done = true
	c := in.claimer.Load()
	if c != nil {
		delete(e.inflight, c)
	}
	e.mu.Unlock()
	if c != nil {
		c.fillFrom(in)
	}
}

// adopt hands an unexpected message that a receive claimed while it was arriving over to that
// receive (progress goroutine): the chunks so far are copied (or reduced) into its buffer once,
// and the rest of the message lands there straight from the ring, as if the receive had been
// posted first. (A send and its receive posted at about the same time, as torch's
// batch_isend_irecv does, used to copy the whole message twice: into the stash, then out.)
func (e *Endpoint) adopt(in *inbound, c *Request) {
	if in.total > len(c.buf) {
		in.discard.Store(true)
		e.mu.Lock()
		delete(e.inflight, c)
		in.claimer.Store(nil)
		e.mu.Unlock()
		e.freeParts(in)
		c.finish(0, in.peer, tooLong(in.peer, in.tag, in.total, len(c.buf)))
		return
	}
	off := 0
	for _, b := range in.parts {
		c.copyIn(off, b)
		off += len(b)
	}
	e.freeParts(in)
	e.mu.Lock()
	in.req = c
	in.claimer.Store(nil)
	e.mu.Unlock()
}

// stash copies a chunk of an unexpected message: full slots into pooled slot-size buffers,
// anything shorter (small messages, last chunks, a message to self, which arrives as one chunk)
// into an exact allocation. Memory grows with the bytes that arrived, not with the length a
// header claims, a queue of small messages holds only their bytes, and a large message makes
// no message-sized allocation (zeroed, then faulted in) each time.
func (e *Endpoint) stash(b []byte) []byte {
	e.stashed.Add(int64(len(b)))
	if len(b) != e.lay.S {
		return append([]byte(nil), b...)
	}
	var buf []byte
	if v := e.parts.Get(); v != nil {
		buf = *(v.(*[]byte))
	} else {
		buf = make([]byte, e.lay.S)
	}
	return buf[:copy(buf, b)]
}

// freeParts returns an unexpected message's buffers to the pool.
func (e *Endpoint) freeParts(in *inbound) {
	for _, b := range in.parts {
		if cap(b) == e.lay.S {
			b = b[:cap(b)]
			e.parts.Put(&b)
		}
	}
	in.parts = nil
}

// cutOff ends a message whose sender started a new one before finishing it (its send was
// canceled half way).
func (e *Endpoint) cutOff(in *inbound) {
	err := fmt.Errorf("message from rank %d was cut off after %d of %d bytes (the sender gave up)", in.peer, in.got, in.total)
	e.mu.Lock()
	var r *Request
	if in.req != nil {
		r = in.req
		delete(e.inflight, r)
	} else {
		r = in.claimer.Load()
		if r != nil {
			delete(e.inflight, r)
		}
		for i, u := range e.unexpected {
			if u == in {
				e.unexpected = append(e.unexpected[:i], e.unexpected[i+1:]...)
				break
			}
		}
	}
	e.mu.Unlock()
	if r != nil {
		r.finish(0, in.peer, err)
	}
}

func tooLong(peer int, tag uint64, n, have int) error {
	return fmt.Errorf("message from rank %d (tag %#x) has %d bytes, the receive buffer holds %d", peer, tag, n, have)
}

// matchPosted removes and returns the first posted receive for (peer, tag). e.mu held.
func (e *Endpoint) matchPosted(peer int, tag uint64) *Request {
	for i, r := range e.posted {
		if r.tag == tag && (r.peer == collective.AnySource || r.peer == peer) {
			e.posted = append(e.posted[:i], e.posted[i+1:]...)
			return r
		}
	}
	return nil
}

// Request is a posted receive.
type Request struct {
	e    *Endpoint
	peer int
	tag  uint64
	buf  []byte

	mu       sync.Mutex // guards writes into buf against cancel
	canceled bool
	into     func(dst, src []byte) // how a message lands in buf; nil: copied (PostReduce: reduced)

	once sync.Once
	done chan struct{}
	n    int
	src  int
	err  error
}

// Done is closed when the receive finished.
func (r *Request) Done() <-chan struct{} { return r.done }

// Result is the outcome of a finished receive: bytes received, source rank, error.
func (r *Request) Result() (n, src int, err error) {
	<-r.done
	return r.n, r.src, r.err
}

func (r *Request) finish(n, src int, err error) {
	r.once.Do(func() {
		r.n, r.src, r.err = n, src, err
		close(r.done)
	})
}

func (r *Request) copyIn(off int, b []byte) {
	r.mu.Lock()
	if !r.canceled && off <= len(r.buf) {
		r.put(r.buf[off:min(off+len(b), len(r.buf))], b)
	}
	r.mu.Unlock()
}

// put lands src (cut to len(dst)) in dst: a copy, or the receive's own function.
func (r *Request) put(dst, src []byte) {
	src = src[:len(dst)]
	if r.into != nil {
		r.into(dst, src)
		return
	}
	copy(dst, src)
}

func (r *Request) fillFrom(in *inbound) {
	defer r.e.freeParts(in)
	if in.total > len(r.buf) {
		r.finish(0, in.peer, tooLong(in.peer, in.tag, in.total, len(r.buf)))
		return
	}
	r.mu.Lock()
	ok := !r.canceled
	if ok {
		off := 0
		for _, b := range in.parts {
			r.put(r.buf[off:off+len(b)], b)
			off += len(b)
		}
	}
	r.mu.Unlock()
	if ok {
		r.finish(in.total, in.peer, nil)
	}
}

// cancel withdraws the receive: after it returns nothing more is written into its buffer.
func (r *Request) cancel(err error) {
	e := r.e
	e.mu.Lock()
	for i, p := range e.posted {
		if p == r {
			e.posted = append(e.posted[:i], e.posted[i+1:]...)
			break
		}
	}
	delete(e.inflight, r)
	e.mu.Unlock()
	r.mu.Lock()
	r.canceled = true
	r.mu.Unlock()
	r.finish(0, -1, err)
}

// Wait waits for the receive; when ctx ends first the receive is withdrawn.
func (r *Request) Wait(ctx context.Context) (n, src int, err error) {
	select {
	case <-r.done:
		return r.n, r.src, r.err
	default:
	}
	if r.peer < 0 || r.peer == r.e.rank {
		select {
		case <-r.done:
		case <-ctx.Done():
			r.cancel(ctx.Err())
		}
		return r.n, r.src, r.err
	}
	// A receive from one peer watches that peer's liveness while it waits.
	every := probeEvery()
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-r.done:
			return r.n, r.src, r.err
		case <-ctx.Done():
			r.cancel(ctx.Err())
			return r.n, r.src, r.err
		case <-t.C:
			var last time.Time
			if err := r.e.probeIfSilent(ctx, r.peer, &last); err != nil {
				r.cancel(err)
				return r.n, r.src, r.err
			}
			t.Reset(every)
		}
	}
}

// Cancel withdraws the receive with err (if it has not finished).
func (r *Request) Cancel(err error) { r.cancel(err) }

// PostRecv posts a receive of the first message from peer (collective.AnySource: any) with
// tag into buf and returns at once; receives are matched in the order they were posted.
func (e *Endpoint) PostRecv(peer int, tag uint64, buf []byte) *Request {
	return e.postRecv(peer, tag, buf, nil)
}

func (e *Endpoint) postRecv(peer int, tag uint64, buf []byte, into func(dst, src []byte)) *Request {
	r := &Request{e: e, peer: peer, tag: tag, buf: buf, into: into, src: -1, done: make(chan struct{})}
	if peer != collective.AnySource && (peer < 0 || peer >= e.lay.P) {
		r.finish(0, -1, fmt.Errorf("p2p: rank %d does not exist (group of %d)", peer, e.lay.P))
		return r
	}
	if e.isClosed() {
		r.finish(0, -1, ErrClosed)
		return r
	}
	e.mu.Lock()
	if ab, ok := e.aborted[collective.SpaceOf(tag)]; ok && tag>>63 != 0 {
		e.mu.Unlock()
		r.finish(0, -1, ab)
		return r
	}
	for i, in := range e.unexpected {
		if in.tag == tag && (peer == collective.AnySource || peer == in.peer) {
			e.unexpected = append(e.unexpected[:i], e.unexpected[i+1:]...)
			if in.done {
				e.mu.Unlock()
				r.fillFrom(in)
				return r
			}
			in.claimer.Store(r)
			e.inflight[r] = in
			e.mu.Unlock()
			return r
		}
	}
	if peer != collective.AnySource {
		if d := e.peers[peer].dead.Load(); d != nil {
			e.mu.Unlock()
			r.finish(0, -1, d.err)
			return r
		}
	}
	e.posted = append(e.posted, r)
	e.mu.Unlock()
	return r
}

// Post implements collective.Poster (PostRecv, as the collective package's interface).
func (e *Endpoint) Post(peer int, tag uint64, buf []byte) collective.PostedRecv {
	return e.PostRecv(peer, tag, buf)
}

// PostReduce implements collective.ReducePoster: a posted receive whose message is reduced
// into buf (buf = buf op message) by the progress goroutine chunk by chunk, straight from the
// ring slot, instead of being copied into a scratch buffer for the caller to reduce. A message
// of another length than buf fails the receive's caller (the collective checks the length).
func (e *Endpoint) PostReduce(peer int, tag uint64, buf []byte, dt reduce.DType, op reduce.Op) collective.PostedRecv {
	return e.postRecv(peer, tag, buf, func(dst, src []byte) { reduce.Reduce(dst, src, dt, op) })
}

// Recv implements collective.Conn.
func (e *Endpoint) Recv(ctx context.Context, peer int, tag uint64, buf []byte) (int, error) {
	n, _, err := e.PostRecv(peer, tag, buf).Wait(ctx)
	return n, err
}

// Abort implements collective.Conn.
//
// Peers are told even when a peer's abort already reached this rank: members that disagree on
// the membership do not share one member list, so the first aborter may not know them all.
func (e *Endpoint) Abort(space uint64, peers []int, ab *collective.AbortError) {
	e.abortLocal(space, ab)
	e.mu.Lock()
	if e.abortSent[space] {
		e.mu.Unlock()
		return
	}
	e.abortSent[space] = true
	e.mu.Unlock()
	msg := collective.EncodeAbort(ab)
	if max := e.lay.S; len(msg) > max {
		msg = msg[:max]
	}
	for _, p := range peers {
		if p == e.rank || p < 0 || p >= e.lay.P || !e.peers[p].connected.Load() {
			continue
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			e.Send(ctx, p, collective.AbortTag(space), msg)
		}()
	}
}

// abortLocal marks space aborted; false if it already was.
func (e *Endpoint) abortLocal(space uint64, ab *collective.AbortError) bool {
	e.mu.Lock()
	if _, ok := e.aborted[space]; ok {
		e.mu.Unlock()
		return false
	}
	e.aborted[space] = ab
	e.abortOrder = append(e.abortOrder, space)
	if len(e.abortOrder) > 4096 {
		delete(e.aborted, e.abortOrder[0])
		delete(e.abortSent, e.abortOrder[0])
		e.abortOrder = e.abortOrder[1:]
	}
	var fail []*Request
	keep := e.posted[:0]
	for _, r := range e.posted {
		if collective.SpaceOf(r.tag) == space {
			fail = append(fail, r)
		} else {
			keep = append(keep, r)
		}
	}
	e.posted = keep
	for r, in := range e.inflight {
		if collective.SpaceOf(r.tag) == space {
			in.discard.Store(true)
			fail = append(fail, r)
		}
	}
	u := e.unexpected[:0]
	for _, in := range e.unexpected {
		if collective.SpaceOf(in.tag) == space {
			in.discard.Store(true)
		} else {
			u = append(u, in)
		}
	}
	e.unexpected = u
	e.mu.Unlock()
	for _, r := range fail {
		r.cancel(ab)
	}
	return true
}

var (
	_ collective.Conn         = (*Endpoint)(nil)
	_ collective.ReducePoster = (*Endpoint)(nil)
)
