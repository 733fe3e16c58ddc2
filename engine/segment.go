package engine

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/auth"
	"github.com/mooncake-go/mooncake/engine/transport"
	"github.com/mooncake-go/mooncake/engine/transport/shm"
	"github.com/mooncake-go/mooncake/internal/memview"
)

// Buffer is one range for RegisterLocalMemoryBatch.
type Buffer struct {
	Addr   uintptr
	Length uint64
}

// localBuf is a registered local buffer. refs counts transfers using it; Unregister waits
// for them so a buffer is never unmapped under a copy.
type localBuf struct {
	addr     uint64
	length   uint64
	location string
	region   *shm.Region // non-nil for AllocateShared buffers
	guard    *auth.Token // non-nil: only connections that proved it (or the own token) reach it
	refs     atomic.Int32
	holds    int  // MapRemotePinned views of it (under Engine.segMu)
	freeLate bool // freed while held: the last view's release unmaps it (under Engine.segMu)
}

// Release implements tcp.Pin.
func (b *localBuf) Release() { b.refs.Add(-1) }

func (b *localBuf) end() uint64 { return b.addr + b.length }

// find returns the buffer holding [addr, addr+length); the caller holds e.segMu.
func (e *Engine) find(addr, length uint64) *localBuf {
	end := addr + length
	if end < addr {
		return nil
	}
	bufs := e.bufs
	i := sort.Search(len(bufs), func(i int) bool { return bufs[i].end() > addr })
	if i < len(bufs) && bufs[i].addr <= addr && end <= bufs[i].end() {
		return bufs[i]
	}
	return nil
}

// acquire pins the local buffer holding the range.
func (e *Engine) acquire(addr, length uint64) (*localBuf, error) {
	e.segMu.RLock()
	b := e.find(addr, length)
	if b != nil {
		b.refs.Add(1)
	}
	e.segMu.RUnlock()
	if b == nil {
		return nil, errf(ErrAddressNotRegistered, "[%#x, +%d) is not inside a registered buffer of segment %q", addr, length, e.name)
	}
	return b, nil
}

func (e *Engine) insertLocked(b *localBuf) error {
	if b.length == 0 {
		return errf(ErrInvalidArgument, "cannot register %#x: zero length", b.addr)
	}
	if b.addr == 0 {
		return errf(ErrInvalidArgument, "cannot register a null address")
	}
	if b.addr+b.length < b.addr {
		return errf(ErrInvalidArgument, "cannot register %#x+%d: range wraps around", b.addr, b.length)
	}
	i := sort.Search(len(e.bufs), func(i int) bool { return e.bufs[i].addr >= b.addr })
	if i > 0 && e.bufs[i-1].end() > b.addr {
		p := e.bufs[i-1]
		return errf(ErrAddressOverlapped, "cannot register [%#x, +%d): overlaps registered [%#x, +%d)", b.addr, b.length, p.addr, p.length)
	}
	if i < len(e.bufs) && e.bufs[i].addr < b.end() {
		p := e.bufs[i]
		return errf(ErrAddressOverlapped, "cannot register [%#x, +%d): overlaps registered [%#x, +%d)", b.addr, b.length, p.addr, p.length)
	}
	e.bufs = append(e.bufs, nil)
	copy(e.bufs[i+1:], e.bufs[i:])
	e.bufs[i] = b
	return nil
}

func (e *Engine) removeLocked(addr uint64) (*localBuf, error) {
	i := sort.Search(len(e.bufs), func(i int) bool { return e.bufs[i].addr >= addr })
	if i == len(e.bufs) || e.bufs[i].addr != addr {
		return nil, errf(ErrAddressNotRegistered, "cannot unregister %#x: no registered buffer starts there", addr)
	}
	b := e.bufs[i]
	e.bufs = append(e.bufs[:i], e.bufs[i+1:]...)
	return b, nil
}

// waitUnpinned waits (bounded by the transfer timeout) until no transfer uses b.
func (e *Engine) waitUnpinned(b *localBuf) {
	deadline := time.Now().Add(e.timeout)
	for b.refs.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Microsecond)
	}
}

func normLocation(loc string) string {
	if loc == "" || loc == "*" {
		return "cpu:0"
	}
	return loc
}

// RegisterLocalMemory makes [addr, addr+length) reachable by peers and usable as a local
// transfer buffer. A zero length is ErrInvalidArgument (-1); a range overlapping a registered
// buffer is ErrAddressOverlapped (-7). The memory must not be Go-heap memory that may be
// freed while registered.
func (e *Engine) RegisterLocalMemory(addr uintptr, length uint64, location string) error {
	return e.RegisterLocalMemoryBatch([]Buffer{{addr, length}}, location)
}

// RegisterLocalMemoryBatch registers several buffers; either all are registered or none.
func (e *Engine) RegisterLocalMemoryBatch(bufs []Buffer, location string) error {
	if e.closed.Load() {
		return ErrClosed
	}
	location = normLocation(location)
	if err := realHost().deviceLocation(location); err != nil {
		return err
	}
	e.segMu.Lock()
	for i, b := range bufs {
		if err := e.insertLocked(&localBuf{addr: uint64(b.Addr), length: b.Length, location: location}); err != nil {
			for _, d := range bufs[:i] {
				e.removeLocked(uint64(d.Addr))
			}
			e.segMu.Unlock()
			return err
		}
	}
	e.segMu.Unlock()
	return e.publish()
}

// UnregisterLocalMemory removes the buffer that starts at addr (ErrAddressNotRegistered, -3,
// when none does). It waits for transfers that use the buffer.
func (e *Engine) UnregisterLocalMemory(addr uintptr) error {
	return e.UnregisterLocalMemoryBatch([]uintptr{addr})
}

// UnregisterLocalMemoryBatch unregisters several buffers; it stops at the first unknown one.
func (e *Engine) UnregisterLocalMemoryBatch(addrs []uintptr) error {
	var firstErr error
	var removed []*localBuf
	e.segMu.Lock()
	for _, a := range addrs {
		b, err := e.removeLocked(uint64(a))
		if err != nil {
			firstErr = err
			break
		}
		if b.region != nil {
			// Shared buffers are owned by AllocateShared; keep them until FreeShared.
			e.insertLocked(b)
			firstErr = errf(ErrInvalidArgument, "buffer %#x was made by AllocateShared; release it with FreeShared", a)
			break
		}
		removed = append(removed, b)
	}
	e.segMu.Unlock()
	for _, b := range removed {
		e.waitUnpinned(b)
	}
	if len(removed) > 0 {
		if err := e.publish(); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// AllocateShared allocates a zero-filled memfd-backed MAP_SHARED buffer, registers it, and
// returns its address. Same-host peers map it and copy directly (shm transport).
func (e *Engine) AllocateShared(length uint64) (uintptr, error) {
	return e.AllocateSharedGuarded(length, nil)
}

// AllocateSharedGuarded is AllocateShared for a group that uses guard (nil: none): over the
// network only connections that proved guard, or the engine's own token, reach the buffer,
// and only they get its entry (with its memfd) in the descriptor the engine answers (auth.go).
func (e *Engine) AllocateSharedGuarded(length uint64, guard *auth.Token) (uintptr, error) {
	if e.closed.Load() {
		return 0, ErrClosed
	}
	if length == 0 {
		return 0, errf(ErrInvalidArgument, "cannot allocate a zero-length shared buffer")
	}
	r, err := shm.Alloc(length)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrMemory, err)
	}
	e.segMu.Lock()
	err = e.insertLocked(&localBuf{addr: uint64(r.Addr), length: length, location: "cpu:0", region: r, guard: guard})
	e.segMu.Unlock()
	if err != nil {
		r.Free()
		return 0, err
	}
	if err := e.publish(); err != nil {
		return r.Addr, err
	}
	return r.Addr, nil
}

// FreeShared unregisters and unmaps a buffer from AllocateShared.
func (e *Engine) FreeShared(addr uintptr) error {
	e.segMu.Lock()
	b, err := e.removeLocked(uint64(addr))
	if err == nil && b.region == nil {
		e.insertLocked(b)
		err = errf(ErrInvalidArgument, "buffer %#x was not made by AllocateShared; use UnregisterLocalMemory", addr)
	}
	e.segMu.Unlock()
	if err != nil {
		return err
	}
	e.waitUnpinned(b)
	perr := e.publish()
	if ferr := e.freeRegion(b); ferr != nil {
		return fmt.Errorf("freeing shared buffer %#x: %w", addr, ferr)
	}
	return perr
}

// freeRegion unmaps a removed shared buffer now, or defers that to the release of its last
// MapRemotePinned view (peers' mappings of the memfd are theirs and stay valid either way).
func (e *Engine) freeRegion(b *localBuf) error {
	e.segMu.Lock()
	if b.holds > 0 {
		b.freeLate = true
		e.segMu.Unlock()
		return nil
	}
	e.segMu.Unlock()
	return b.region.Free()
}

// Descriptor returns this engine's current segment descriptor.
func (e *Engine) Descriptor() *transport.SegmentDescriptor {
	e.segMu.RLock()
	defer e.segMu.RUnlock()
	return e.descriptorLocked()
}

func (e *Engine) descriptorLocked() *transport.SegmentDescriptor {
	return e.descriptorOf(nil, true)
}

// descriptorFor is the descriptor (JSON) the listener answers a connection that proved who:
// without the buffers it may not reach.
func (e *Engine) descriptorFor(who []*auth.Token) []byte {
	e.segMu.RLock()
	defer e.segMu.RUnlock()
	for _, b := range e.bufs {
		if !e.mayReach(b, who) {
			return e.descriptorOf(who, false).Encode()
		}
	}
	return *e.descJSON.Load()
}

// descriptorOf builds the descriptor; with all false, only of the buffers who may reach. The
// caller holds e.segMu.
func (e *Engine) descriptorOf(who []*auth.Token, all bool) *transport.SegmentDescriptor {
	d := &transport.SegmentDescriptor{
		Name:        e.name,
		Protocol:    "tcp",
		TCPDataPort: e.port,
		RPCPort:     e.port,
		IP:          e.ip,
		HostID:      e.hostID,
		PID:         e.pid,
		Buffers:     make([]transport.BufferDesc, 0, len(e.bufs)),
	}
	for _, b := range e.bufs {
		if !all && !e.mayReach(b, who) {
			continue
		}
		bd := transport.BufferDesc{Name: b.location, Addr: b.addr, Length: b.length}
		if b.region != nil {
			info := b.region.Info
			bd.Shm = &info
		}
		d.Buffers = append(d.Buffers, bd)
	}
	return d
}

// publish re-encodes the descriptor and, with a metadata store, writes it there.
func (e *Engine) publish() error {
	e.pubMu.Lock()
	defer e.pubMu.Unlock()
	e.segMu.RLock()
	js := e.descriptorLocked().Encode()
	e.segMu.RUnlock()
	e.descJSON.Store(&js)
	if e.store == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.store.Put(ctx, SegmentKey(e.cluster, e.name), js); err != nil {
		return fmt.Errorf("publishing the descriptor of segment %q: %w: %w", e.name, ErrMetadata, err)
	}
	return nil
}

// localView returns the local registered memory of [addr, addr+length).
func (e *Engine) localView(addr, length uint64) ([]byte, bool) {
	e.segMu.RLock()
	defer e.segMu.RUnlock()
	if e.find(addr, length) == nil {
		return nil, false
	}
	return memview.Bytes(uintptr(addr), int(length)), true
}
