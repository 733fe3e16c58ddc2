package p2p

import (
	"context"
	"fmt"
	"sync"

	"github.com/mooncake-go/mooncake/auth"
	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/internal/memview"
)

// Fabric is what p2p needs from the transfer engine.
type Fabric interface {
	SegmentName() string
	AllocateShared(length uint64) (uintptr, error)
	FreeShared(addr uintptr) error
	OpenSegment(name string) (uint64, error)
	// Write applies ws to segment seg in order and returns once all are complete. Sources are
	// local registered memory; 4-byte aligned 4-byte writes wake futex waiters on the target.
	Write(ctx context.Context, seg uint64, ws []Write) error
}

// StreamOpener is implemented by fabrics with ordered write streams (EngineFabric): a
// stream's writes are applied in order, and over a network a Write returns once its bytes are
// sent, without waiting for the target's answer (a failure shows on a later Write). Send then
// costs no round trip: the sender's credits already say when a staging cell is free again (the
// receiver took the chunk, so it left the sender long before).
type StreamOpener interface {
	OpenStream(seg uint64) (WriteStream, error)
}

// WriteStream is an open write stream to one segment.
type WriteStream interface {
	Write(ctx context.Context, ws []Write) error
	Close() error
}

// WordWatcher is implemented by fabrics that can tell a goroutine of this process when a
// peer's 4-byte signal write to a local word arrived over the network (EngineFabric: the
// engine's tcp server), so that a wait on the word can park in the Go scheduler instead of
// sleeping in a futex syscall. Writes through shared memory still only wake futex waiters.
// hook (nil: none) runs first, on the goroutine that stored the word; when it returns true
// (it handled the write) no token is left. It must not block, and may run once after stop.
type WordWatcher interface {
	WatchWord(addr uintptr, hook func() bool) (ch <-chan struct{}, stop func())
}

// networked is implemented by streams that know whether they reach their segment over the
// network (engine streams).
type networked interface{ Network() bool }

// Write is one WRITE of Len bytes from local Src to the target address Dst.
type Write struct {
	Src uintptr
	Dst uint64
	Len uint64
}

// SharedMapper is implemented by fabrics that can map a same-host peer's shared buffer
// (EngineFabric). MapShared returns a view of [addr, addr+length) in segment seg that stays
// mapped until release, even if the peer dies; ok is false (and err nil) when the peer is on
// another host, the range is not shared memory, or MC_FORCE_TCP is set.
type SharedMapper interface {
	MapShared(seg uint64, addr, length uint64) (view []byte, release func(), ok bool, err error)
}

// NewSharedMemory gives the collective same-host fast path (it has the methods of
// collective.SharedMemory) the fabric's shared buffers: arenas are AllocateShared buffers, a
// peer's arena is a pinned mapping of its buffer in segment segs[rank]. ok is false when f
// cannot map peers' buffers.
func NewSharedMemory(f Fabric, segs []string) (sm SharedMemory, ok bool) {
	m, ok := f.(SharedMapper)
	if !ok {
		return SharedMemory{}, false
	}
	return SharedMemory{f: f, m: m, segs: segs}, true
}

// SharedMemory is the fabric's shared buffers as arenas of the same-host fast path: Alloc,
// Free and Map (see NewSharedMemory).
type SharedMemory struct {
	f    Fabric
	m    SharedMapper
	segs []string
}

// Alloc allocates an arena: an AllocateShared buffer, its address as the handle.
func (e SharedMemory) Alloc(n int) ([]byte, uint64, error) {
	a, err := e.f.AllocateShared(uint64(n))
	if err != nil {
		return nil, 0, err
	}
	return memview.Bytes(a, n), uint64(a), nil
}

// Free releases an arena from Alloc.
func (e SharedMemory) Free(_ []byte, h uint64) { e.f.FreeShared(uintptr(h)) }

// Map maps n bytes of rank's arena (its handle) from its segment; ok is false when rank has no
// segment here or the fabric cannot map it (another host).
func (e SharedMemory) Map(rank int, h uint64, n int) ([]byte, func(), bool, error) {
	if rank < 0 || rank >= len(e.segs) || e.segs[rank] == "" {
		return nil, nil, false, nil
	}
	seg, err := e.f.OpenSegment(e.segs[rank])
	if err != nil {
		return nil, nil, false, err
	}
	return e.m.MapShared(seg, h, uint64(n))
}

// Authenticator is implemented by fabrics whose connections can be authenticated
// (EngineFabric; docs/security.md).
type Authenticator interface {
	// Token is the fabric's own token (its engine's MC_AUTH_TOKEN), nil when it has none.
	Token() *auth.Token
	// WithToken returns a fabric for a group that uses tok: its buffers are reached over the
	// network only by peers that prove tok (or the engine's own token), and its connections to
	// the segments it opens prove tok. The engine accepts tok until release is called.
	WithToken(tok *auth.Token) (f Fabric, release func())
}

// EngineFabric runs p2p over a transfer engine.
func EngineFabric(e *engine.Engine) Fabric { return &engineFabric{e: e} }

type engineFabric struct {
	e    *engine.Engine
	tok  *auth.Token // WithToken's: guards its buffers, proven to its segments
	pool sync.Pool
}

func (f *engineFabric) SegmentName() string { return f.e.SegmentName() }
func (f *engineFabric) AllocateShared(n uint64) (uintptr, error) {
	return f.e.AllocateSharedGuarded(n, f.tok)
}
func (f *engineFabric) FreeShared(addr uintptr) error { return f.e.FreeShared(addr) }

// Token implements Authenticator.
func (f *engineFabric) Token() *auth.Token { return f.e.Token() }

// WithToken implements Authenticator.
func (f *engineFabric) WithToken(tok *auth.Token) (Fabric, func()) {
	return &engineFabric{e: f.e, tok: tok}, f.e.AddToken(tok)
}

func (f *engineFabric) MapShared(seg uint64, addr, length uint64) ([]byte, func(), bool, error) {
	return f.e.MapRemotePinned(engine.SegmentID(seg), addr, length)
}

func (f *engineFabric) OpenSegment(name string) (uint64, error) {
	id, err := f.e.OpenSegmentAuth(name, f.tok)
	return uint64(id), err
}

func (f *engineFabric) Write(ctx context.Context, seg uint64, ws []Write) error {
	var reqs []engine.TransferRequest
	if v := f.pool.Get(); v != nil {
		reqs = (*(v.(*[]engine.TransferRequest)))[:0]
	}
	for _, w := range ws {
		reqs = append(reqs, engine.TransferRequest{Opcode: engine.OpWrite, Source: w.Src,
			TargetID: engine.SegmentID(seg), TargetOffset: w.Dst, Length: w.Len})
	}
	err := f.e.TransferSync(ctx, reqs)
	f.pool.Put(&reqs)
	return err
}

// OpenStream opens an ordered write stream to seg. Over the network a Write returns once its
// bytes are in the socket; on this host it is applied (memcpys into the peer's mapping) before
// it returns. Either way it takes any source, so a send's payload goes from the caller's
// buffer straight into the peer's mailbox cell, without a staging copy.
func (f *engineFabric) OpenStream(seg uint64) (WriteStream, error) {
	st, err := f.e.OpenStream(engine.SegmentID(seg))
	if err != nil {
		return nil, err
	}
	return &engineStream{st: st, seg: engine.SegmentID(seg)}, nil
}

// LandOn implements PayloadLander with the engine's tcp server.
func (f *engineFabric) LandOn(base, length uintptr, hook func(addr uintptr, n int, interrupt func()) ([]byte, func(bool))) func() {
	return f.e.LandOn(base, length, hook)
}

// WatchWord implements WordWatcher.
func (f *engineFabric) WatchWord(addr uintptr, hook func() bool) (<-chan struct{}, func()) {
	return f.e.WatchWord(addr, hook)
}

// Network reports whether the stream reaches its segment over the network.
func (s *engineStream) Network() bool { return s.st.Network() }

type engineStream struct {
	st   *engine.Stream
	seg  engine.SegmentID
	mu   sync.Mutex
	reqs []engine.TransferRequest
}

func (s *engineStream) Write(ctx context.Context, ws []Write) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	reqs := s.reqs[:0]
	for _, w := range ws {
		reqs = append(reqs, engine.TransferRequest{Opcode: engine.OpWrite, Source: w.Src,
			TargetID: s.seg, TargetOffset: w.Dst, Length: w.Len})
	}
	s.reqs = reqs
	return s.st.Write(ctx, reqs)
}

func (s *engineStream) Close() error { return s.st.Close() }

// EngineID is the engine instance's id (Info.Engine).
func (f *engineFabric) EngineID() string { return f.e.ID() }

// Probe implements Prober with the engine's ping.
func (f *engineFabric) Probe(ctx context.Context, segment, engine string) error {
	done := make(chan error, 1)
	go func() { done <- f.e.ProbePeerID(segment, engine) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("peer %q did not answer within the probe timeout: %w", segment, ctx.Err())
	}
}
