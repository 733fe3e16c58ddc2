package p2p

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/mooncake-go/mooncake/internal/futex"
	"github.com/mooncake-go/mooncake/internal/memview"
)

// memHub is an in-process stand-in for the engine: segments are anonymous shared mappings of
// this process, a write is a copy, a 4-byte aligned write wakes futex waiters.
type memHub struct {
	mu    sync.Mutex
	names []string
	maps  map[uintptr][]byte
	dead  map[string]bool
	mute  map[string]bool // its own writes fail (it cannot return credits)
	watch map[uint64]*memWatch
	zones []memZone    // netFabric's PayloadLander registrations
	land  atomic.Int64 // payload bytes a zone's hook took (read straight into its buffer)
}

type memZone struct {
	base, end uintptr
	hook      func(addr uintptr, n int, interrupt func()) ([]byte, func(bool))
}

// memWatch is a netFabric's WordWatcher registration.
type memWatch struct {
	ch    chan struct{}
	hook  func() bool
	taken atomic.Int64 // writes the hook handled
}

func newHub() *memHub {
	return &memHub{maps: map[uintptr][]byte{}, dead: map[string]bool{}, mute: map[string]bool{},
		watch: map[uint64]*memWatch{}}
}

func (h *memHub) fabric(name string) *memFabric { return &memFabric{h: h, name: name} }

func (h *memHub) kill(name string) {
	h.mu.Lock()
	h.dead[name] = true
	h.mu.Unlock()
}

type memFabric struct {
	h    *memHub
	name string
}

func (f *memFabric) SegmentName() string { return f.name }

func (f *memFabric) AllocateShared(n uint64) (uintptr, error) {
	// Go memory (kept alive by the map; the heap does not move), so that the race detector
	// sees the atomic head/tail words as the synchronisation they are.
	b := make([]byte, n)
	a := memview.Addr(b)
	f.h.mu.Lock()
	f.h.maps[a] = b
	f.h.mu.Unlock()
	return a, nil
}

func (f *memFabric) FreeShared(addr uintptr) error {
	f.h.mu.Lock()
	b := f.h.maps[addr]
	delete(f.h.maps, addr)
	f.h.mu.Unlock()
	clear(b)
	return nil
}

func (f *memFabric) OpenSegment(name string) (uint64, error) {
	f.h.mu.Lock()
	defer f.h.mu.Unlock()
	for i, n := range f.h.names {
		if n == name {
			return uint64(i + 1), nil
		}
	}
	f.h.names = append(f.h.names, name)
	return uint64(len(f.h.names)), nil
}

func (f *memFabric) Write(ctx context.Context, seg uint64, ws []Write) error {
	f.h.mu.Lock()
	name := f.h.names[seg-1]
	dead := f.h.dead[name] || f.h.dead[f.name] || f.h.mute[f.name]
	for _, w := range ws {
		ok := false
		for a, b := range f.h.maps {
			if uint64(a) <= w.Dst && w.Dst+w.Len <= uint64(a)+uint64(len(b)) {
				ok = true
			}
		}
		if !ok {
			f.h.mu.Unlock()
			return fmt.Errorf("segment %q: [%#x,+%d) is not registered", name, w.Dst, w.Len)
		}
	}
	f.h.mu.Unlock()
	if dead {
		return fmt.Errorf("segment %q: transfer FAILED (connection refused)", name)
	}
	for _, w := range ws {
		if w.Len == 4 && w.Dst%4 == 0 {
			atomic.StoreUint32(memview.Uint32(uintptr(w.Dst)), atomic.LoadUint32(memview.Uint32(w.Src)))
			futex.Wake(memview.Uint32(uintptr(w.Dst)), 1<<30)
			f.h.mu.Lock()
			wt := f.h.watch[w.Dst]
			f.h.mu.Unlock()
			if wt != nil {
				if wt.hook != nil && wt.hook() {
					wt.taken.Add(1)
				} else {
					select {
					case wt.ch <- struct{}{}:
					default:
					}
				}
			}
			continue
		}
		if f.landed(w) {
			continue
		}
		copy(memview.Bytes(uintptr(w.Dst), int(w.Len)), memview.Bytes(w.Src, int(w.Len)))
	}
	return nil
}

// landed offers w's payload to a PayloadLander zone's hook (netFabric's LandOn), as the
// engine's tcp server does, and reports whether the hook took it.
func (f *memFabric) landed(w Write) bool {
	f.h.mu.Lock()
	var hook func(uintptr, int, func()) ([]byte, func(bool))
	for _, z := range f.h.zones {
		if uintptr(w.Dst) >= z.base && uintptr(w.Dst+w.Len) <= z.end {
			hook = z.hook
		}
	}
	f.h.mu.Unlock()
	if hook == nil {
		return false
	}
	dst, done := hook(uintptr(w.Dst), int(w.Len), func() {})
	if dst == nil {
		return false
	}
	copy(dst, memview.Bytes(w.Src, int(w.Len)))
	f.h.land.Add(int64(w.Len))
	done(true)
	return true
}

// netFabric is a memFabric that plays a peer reached over the network, as EngineFabric's tcp
// path does: ordered streams that say so, and watched words whose writes run the watcher's
// hook (on the writer's goroutine, standing in for the engine's tcp server) and then signal.
type netFabric struct{ *memFabric }

func (h *memHub) netFabric(name string) netFabric { return netFabric{h.fabric(name)} }

func (f netFabric) WatchWord(addr uintptr, hook func() bool) (<-chan struct{}, func()) {
	w := &memWatch{ch: make(chan struct{}, 1), hook: hook}
	f.h.mu.Lock()
	f.h.watch[uint64(addr)] = w
	f.h.mu.Unlock()
	return w.ch, func() {
		f.h.mu.Lock()
		if f.h.watch[uint64(addr)] == w {
			delete(f.h.watch, uint64(addr))
		}
		f.h.mu.Unlock()
	}
}

// LandOn implements PayloadLander for every payload written into [base, base+length).
func (f netFabric) LandOn(base, length uintptr, hook func(addr uintptr, n int, interrupt func()) ([]byte, func(bool))) func() {
	f.h.mu.Lock()
	f.h.zones = append(f.h.zones, memZone{base, base + length, hook})
	f.h.mu.Unlock()
	return func() {
		f.h.mu.Lock()
		defer f.h.mu.Unlock()
		for i, z := range f.h.zones {
			if z.base == base {
				f.h.zones = append(f.h.zones[:i:i], f.h.zones[i+1:]...)
				return
			}
		}
	}
}

// taken is how many writes to the watched word at addr its hook handled.
func (h *memHub) taken(addr uintptr) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w := h.watch[uint64(addr)]; w != nil {
		return w.taken.Load()
	}
	return 0
}

func (f netFabric) OpenStream(seg uint64) (WriteStream, error) { return netStream{f, seg}, nil }

type netStream struct {
	f   netFabric
	seg uint64
}

func (s netStream) Write(ctx context.Context, ws []Write) error { return s.f.Write(ctx, s.seg, ws) }
func (s netStream) Close() error                                { return nil }
func (s netStream) Network() bool                               { return true }
