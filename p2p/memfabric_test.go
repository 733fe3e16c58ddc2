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
}

func newHub() *memHub {
	return &memHub{maps: map[uintptr][]byte{}, dead: map[string]bool{}, mute: map[string]bool{}}
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
			continue
		}
		copy(memview.Bytes(uintptr(w.Dst), int(w.Len)), memview.Bytes(w.Src, int(w.Len)))
	}
	return nil
}
