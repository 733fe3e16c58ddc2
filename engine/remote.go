package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/engine/metadata"
	"github.com/mooncake-go/mooncake/engine/transport"
	"github.com/mooncake-go/mooncake/engine/transport/tcp"
	"github.com/mooncake-go/mooncake/internal/memview"
)

// remoteSeg is an open remote segment.
type remoteSeg struct {
	id    SegmentID
	name  string
	addr  string // host:port of its listener
	desc  atomic.Pointer[transport.SegmentDescriptor]
	stale atomic.Bool // refetch the descriptor before the next submit
}

// resolve returns the listener address of the engine called name.
func (e *Engine) resolve(ctx context.Context, name string) (string, error) {
	if e.store == nil {
		host, port, err := net.SplitHostPort(name)
		if err != nil || host == "" {
			return "", errf(ErrUnknownSegment, "segment %q is not host:port (P2PHANDSHAKE names segments by their owner's address)", name)
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			return "", errf(ErrUnknownSegment, "segment %q has an invalid port", name)
		}
		return name, nil
	}
	raw, err := e.store.Get(ctx, RPCMetaKey(e.cluster, name))
	if err != nil {
		if errors.Is(err, metadata.ErrNotFound) {
			return "", fmt.Errorf("segment %q is not registered in the metadata store: %w", name, ErrUnknownSegment)
		}
		return "", fmt.Errorf("looking up segment %q: %w: %w", name, ErrMetadata, err)
	}
	var m RPCMeta
	if err := json.Unmarshal(raw, &m); err != nil || m.IPOrHostName == "" || m.RPCPort <= 0 || m.RPCPort > 65535 {
		return "", fmt.Errorf("endpoint of segment %q is malformed: %w", name, ErrMalformedJSON)
	}
	return net.JoinHostPort(m.IPOrHostName, strconv.Itoa(m.RPCPort)), nil
}

// fetchDescriptor gets a segment's descriptor from the store or from its owner.
func (e *Engine) fetchDescriptor(ctx context.Context, name, addr string) (*transport.SegmentDescriptor, error) {
	var raw []byte
	var err error
	if e.store != nil {
		raw, err = e.store.Get(ctx, SegmentKey(e.cluster, name))
		if err != nil {
			if errors.Is(err, metadata.ErrNotFound) {
				return nil, fmt.Errorf("segment %q has no descriptor in the metadata store: %w", name, ErrUnknownSegment)
			}
			return nil, fmt.Errorf("reading the descriptor of segment %q: %w: %w", name, ErrMetadata, err)
		}
	} else {
		raw, err = e.tcp.Call(ctx, addr, tcp.OpDescriptor, nil)
		if err != nil {
			return nil, fmt.Errorf("handshake with segment %q at %s failed: %w: %w", name, addr, ErrSocket, err)
		}
	}
	d, err := transport.DecodeDescriptor(raw)
	if err != nil {
		return nil, fmt.Errorf("descriptor of segment %q: %w: %w", name, ErrMalformedJSON, err)
	}
	if d.Protocol != "" && d.Protocol != "tcp" {
		return nil, fmt.Errorf("segment %q uses protocol %q: %w", name, d.Protocol, ErrNotSupported)
	}
	return d, nil
}

// OpenSegment looks a segment up by name (its owner's name; host:port with P2PHANDSHAKE) and
// returns its id. Opening the same name twice returns the same id; the engine's own name is
// LocalSegment.
func (e *Engine) OpenSegment(name string) (SegmentID, error) {
	if e.closed.Load() {
		return 0, ErrClosed
	}
	if name == "" {
		return 0, errf(ErrInvalidArgument, "empty segment name")
	}
	if name == e.name {
		return LocalSegment, nil
	}
	e.remMu.RLock()
	id, ok := e.byName[name]
	r := e.remotes[id]
	e.remMu.RUnlock()
	if ok {
		// Re-opening refetches the descriptor: the peer may have freed a shared buffer and
		// allocated a new one at the same address (a new memfd), which a cached descriptor
		// would still describe as the old one.
		if err := e.refresh(r); err != nil {
			return 0, err
		}
		return id, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(e.timeout, 10*time.Second))
	defer cancel()
	addr, err := e.resolve(ctx, name)
	if err != nil {
		return 0, err
	}
	d, err := e.fetchDescriptor(ctx, name, addr)
	if err != nil {
		return 0, err
	}
	e.remMu.Lock()
	defer e.remMu.Unlock()
	if id, ok := e.byName[name]; ok {
		return id, nil
	}
	r = &remoteSeg{id: e.nextSeg, name: name, addr: addr}
	r.desc.Store(d)
	e.nextSeg++
	e.remotes[r.id] = r
	e.byName[name] = r.id
	return r.id, nil
}

// CloseSegment forgets an open segment; later transfers to its id fail.
func (e *Engine) CloseSegment(id SegmentID) error {
	if id == LocalSegment {
		return nil
	}
	e.remMu.Lock()
	r, ok := e.remotes[id]
	if ok {
		delete(e.remotes, id)
		delete(e.byName, r.name)
	}
	e.remMu.Unlock()
	if !ok {
		return errf(ErrUnknownSegment, "segment id %d is not open", id)
	}
	return nil
}

func (e *Engine) remote(id SegmentID) (*remoteSeg, error) {
	e.remMu.RLock()
	r := e.remotes[id]
	e.remMu.RUnlock()
	if r == nil {
		return nil, errf(ErrUnknownSegment, "segment id %d is not open", id)
	}
	return r, nil
}

// refresh refetches r's descriptor; on failure the old one stays.
func (e *Engine) refresh(r *remoteSeg) error {
	ctx, cancel := context.WithTimeout(context.Background(), min(e.timeout, 5*time.Second))
	defer cancel()
	d, err := e.fetchDescriptor(ctx, r.name, r.addr)
	if err != nil {
		return err
	}
	if old := r.desc.Load(); old != nil && old.PID != d.PID && old.PID != 0 {
		e.shm.Forget(old.PID)
		e.tcp.Forget(r.addr)
	}
	r.desc.Store(d)
	r.stale.Store(false)
	return nil
}

// SegmentDescriptor returns the cached descriptor of an open segment (the live one for
// LocalSegment).
func (e *Engine) SegmentDescriptor(id SegmentID) (*transport.SegmentDescriptor, error) {
	if id == LocalSegment {
		return e.Descriptor(), nil
	}
	r, err := e.remote(id)
	if err != nil {
		return nil, err
	}
	return r.desc.Load(), nil
}

// sameHostShm reports whether [addr, +length) of d can be reached through shared memory.
func (e *Engine) sameHostShm(d *transport.SegmentDescriptor, b *transport.BufferDesc) bool {
	return !e.forceTCP && b != nil && b.Shm != nil && d.HostID != "" && d.HostID == e.hostID
}

// sharedRange finds [addr, +length) among the registered buffers of peer segment id (reading
// the peer's descriptor again when it is not there). ok: the range is in a shared buffer of a
// peer on this host, which d describes. Not ok with a nil error: the range exists but is not
// reachable through shared memory (another host, a private buffer, or MC_FORCE_TCP).
func (e *Engine) sharedRange(id SegmentID, addr uint64, length uint64) (d *transport.SegmentDescriptor, ok bool, err error) {
	r, err := e.remote(id)
	if err != nil {
		return nil, false, err
	}
	d = r.desc.Load()
	b := d.Find(addr, length)
	if b == nil {
		if err := e.refresh(r); err == nil {
			d = r.desc.Load()
			b = d.Find(addr, length)
		}
	}
	if b == nil {
		return nil, false, errf(ErrAddressNotRegistered, "[%#x, +%d) is not inside a registered buffer of segment %q", addr, length, r.name)
	}
	return d, e.sameHostShm(d, b), nil
}

// MapRemotePinned is MapRemote with a hold on the mapping: the view stays mapped until
// release is called, even when the peer dies (its memfd pages stay valid while mapped), the
// peer is forgotten, the buffer is freed (LocalSegment) or the engine closes. Without ok there
// is no view and release is nil. release may be called more than once; call it exactly when
// the view is no longer used, or the mapping leaks.
func (e *Engine) MapRemotePinned(id SegmentID, addr uint64, length uint64) (view []byte, release func(), ok bool, err error) {
	if length == 0 {
		return nil, nil, false, errf(ErrInvalidArgument, "MapRemotePinned of zero bytes")
	}
	if e.closed.Load() {
		return nil, nil, false, ErrClosed
	}
	if id == LocalSegment {
		e.segMu.Lock()
		b := e.find(addr, length)
		if b == nil || b.region == nil {
			e.segMu.Unlock()
			return nil, nil, false, nil
		}
		b.holds++
		e.segMu.Unlock()
		var once sync.Once
		release = func() {
			once.Do(func() {
				e.segMu.Lock()
				b.holds--
				late := b.holds == 0 && b.freeLate
				e.segMu.Unlock()
				if late {
					b.region.Free()
				}
			})
		}
		return memview.Bytes(uintptr(addr), int(length)), release, true, nil
	}
	d, ok, err := e.sharedRange(id, addr, length)
	if !ok {
		return nil, nil, false, err
	}
	v, rel, err := e.shm.Hold(d, addr, length)
	if err != nil {
		return nil, nil, false, err
	}
	return v, rel, true, nil
}

// MapRemote gives a local view of a same-host peer's shared buffer range (ok=false when the
// range is not in a shared buffer of a peer on this host, or MC_FORCE_TCP is set). For
// LocalSegment it returns the local registered memory. The view is valid while the peer's
// buffer exists and the engine is open.
func (e *Engine) MapRemote(id SegmentID, addr uint64, length uint64) ([]byte, bool, error) {
	if length == 0 {
		return nil, false, errf(ErrInvalidArgument, "MapRemote of zero bytes")
	}
	if id == LocalSegment {
		v, ok := e.localView(addr, length)
		return v, ok, nil
	}
	d, ok, err := e.sharedRange(id, addr, length)
	if !ok {
		return nil, false, err
	}
	v, err := e.shm.View(d, addr, length)
	if err != nil {
		return nil, false, err
	}
	return v, true, nil
}
