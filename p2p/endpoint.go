package p2p

// The endpoint: its options, state and lifetime (New, Close). The other files of the package
// hold the parts it is made of (doc.go lists them).

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/internal/memview"
	"github.com/mooncake-go/mooncake/wire"
)

// Options sizes and tunes an endpoint. The zero value of each field is its default. p2p reads
// no environment variables: the configuration layer maps its knobs onto these fields.
type Options struct {
	Credits   int // credits per peer: cells of its mailbox a sender may fill ahead; <= 0: DefaultCredits
	CellBytes int // payload bytes per mailbox cell, rounded up to 64; <= 0: DefaultCellBytes
	// NoStreams sends every batch with Fabric.Write (a round trip per batch) even when the
	// fabric opens ordered write streams (StreamOpener). False: a stream to each peer where
	// the fabric has them.
	NoStreams bool
	// ProbeInterval is how long a wait on a silent peer lasts before it probes the peer's
	// liveness, and between two probes; <= 0: 200 ms.
	ProbeInterval time.Duration
	// ProbeTimeout is how long a probe waits for the peer's answer: a peer that is stopped or
	// cut off counts as dead once it has not answered for this long (the detection timeout of
	// frozen and partitioned ranks); <= 0: 2 s.
	ProbeTimeout time.Duration
}

// Defaults of Options.Credits and Options.CellBytes: a window of 8 MiB a sender may have in
// flight to each peer, in cells of the ring algorithms' chunk (collective's ChunkBytes, 1 MiB),
// so that a chunk is one cell. Between hosts a window of 2 MiB (4 cells of 512 KiB, the
// earlier default) stalled the sender whenever the receiving rank fell a millisecond or so
// behind, which ranks sharing cores with the network stack often do: with 8 MiB, two ranks
// across network namespaces ran large all_reduces 1.10-1.27x as fast and with a third fewer
// context switches (figures in docs/performance.md, "Figures behind design choices"). A cell
// costs memory only once traffic reaches it (the region is a memfd whose pages are committed
// on first touch).
const (
	DefaultCredits   = 8
	DefaultCellBytes = 1 << 20
)

// Defaults of Options.ProbeInterval and Options.ProbeTimeout.
const (
	defaultProbeInterval = 200 * time.Millisecond
	DefaultProbeTimeout  = 2 * time.Second
)

func (o Options) withDefaults() Options {
	if o.Credits <= 0 {
		o.Credits = DefaultCredits
	}
	if o.CellBytes <= 0 {
		o.CellBytes = DefaultCellBytes
	}
	o.CellBytes = (o.CellBytes + 63) &^ 63
	if o.ProbeInterval <= 0 {
		o.ProbeInterval = defaultProbeInterval
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = DefaultProbeTimeout
	}
	return o
}

// ErrClosed is returned by operations on a closed endpoint.
var ErrClosed = errors.New("p2p: endpoint closed")

// Endpoint is one rank's end of the messaging layer.
type Endpoint struct {
	f     Fabric
	rank  int
	lay   layout
	base  uintptr
	mem   []byte
	inst  uint64 // Info.Instance
	peers []*peer
	bell  *uint32
	bellN atomic.Uint32

	noStreams  bool          // Options.NoStreams
	probeEvery time.Duration // Options.ProbeInterval
	// Options.ProbeTimeout
	probeTimeout time.Duration

	mu         sync.Mutex
	posted     []*Request
	unexpected []*inbound
	inflight   map[*Request]*inbound
	aborted    map[uint64]*wire.AbortError
	abortSent  map[uint64]bool // spaces this rank told its peers about
	abortOrder []uint64

	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
	life      sync.RWMutex // Send holds it shared; Close takes it before freeing the region

	// Waking the progress goroutine. Peers on this host write the bell word through shared
	// memory (futex); when every peer is reached over the network, their bell writes arrive
	// through this process's tcp server, which signals bellCh, and the progress goroutine
	// parks on it in the Go scheduler instead of a futex syscall (no thread hand-off per wake).
	bellCh   <-chan struct{}
	unwatch  func()
	unland   func()        // ends the PayloadLander registration (land.go)
	landSeq  atomic.Uint64 // numbers land.go's marks of peer.early
	kick     chan struct{} // local wake-ups (close, reset, dead peer) for a channel park
	netPeers atomic.Bool   // every other peer connected, over the network: park on bellCh
	// drainMu is held by whoever drains the mailboxes: the progress goroutine, or the tcp server
	// goroutine that stored a bell write (drainHook). It owns the receive side of every peer
	// (cur, consumed, resets).
	drainMu sync.Mutex
	linksMu sync.Mutex // serialises linksChanged, so the last decision sees every link

	parts sync.Pool // *[]byte of S bytes: chunks of unexpected messages

	tap atomic.Pointer[recvTap] // nil, except in tests (export_test.go)
}

// recvTap lets a test watch the receive path (export_test.go installs one); an endpoint
// outside tests has none and pays one nil check per chunk.
type recvTap struct {
	chunk func(hd chunkHdr) // before each received chunk is handled (nil: nothing)
	stash func(n int)       // n bytes were copied into an unexpected message
}

// New allocates rank's region for a group of up to maxPeers ranks and starts its progress
// goroutine. Connect the peers before exchanging messages with them.
func New(f Fabric, rank, maxPeers int, opts Options) (*Endpoint, error) {
	if maxPeers < 1 || rank < 0 || rank >= maxPeers {
		return nil, fmt.Errorf("p2p: rank %d outside a group of %d", rank, maxPeers)
	}
	opts = opts.withDefaults()
	lay := layout{P: maxPeers, K: opts.Credits, S: opts.CellBytes}
	base, err := f.AllocateShared(uint64(lay.size()))
	if err != nil {
		return nil, fmt.Errorf("p2p: allocating %d bytes of shared memory for rank %d: %w", lay.size(), rank, err)
	}
	e := &Endpoint{f: f, rank: rank, lay: lay, noStreams: opts.NoStreams, probeEvery: opts.ProbeInterval, probeTimeout: opts.ProbeTimeout,
		base: base, mem: memview.Bytes(base, lay.size()), inst: rand.Uint64(),
		inflight: map[*Request]*inbound{}, aborted: map[uint64]*wire.AbortError{},
		abortSent: map[uint64]bool{},
		closed:    make(chan struct{}), kick: make(chan struct{}, 1)}
	e.bell = memview.Uint32(base + uintptr(lay.bell()))
	if ww, ok := f.(WordWatcher); ok {
		e.bellCh, e.unwatch = ww.WatchWord(base+uintptr(lay.bell()), e.drainHook)
	}
	for p := 0; p < maxPeers; p++ {
		pp := &peer{rank: p, sendSem: make(chan struct{}, 1), creditCh: make(chan struct{}, 1),
			early: make([]atomic.Uint64, lay.K)}
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
	if pl, ok := f.(PayloadLander); ok {
		mb := uintptr(lay.mailbox(0, 0))
		e.unland = pl.LandOn(base+mb, uintptr(lay.size())-mb, e.land)
	}
	e.wg.Add(1)
	go e.progress()
	return e, nil
}

// Info describes this endpoint for its peers.
func (e *Endpoint) Info() Info {
	info := Info{Rank: e.rank, Segment: e.f.SegmentName(), Addr: uint64(e.base), MaxPeers: e.lay.P,
		Credits: e.lay.K, CellBytes: e.lay.S, Instance: e.inst}
	if id, ok := e.f.(interface{ EngineID() string }); ok {
		info.Engine = id.EngineID()
	}
	return info
}

// Rank is the local rank.
func (e *Endpoint) Rank() int { return e.rank }

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
		if e.unland != nil {
			e.unland()
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
