package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/engine/metadata"
	"github.com/mooncake-go/mooncake/internal/memview"
)

// anon maps n bytes of anonymous (non-Go) memory, unmapped at test end.
func anon(t testing.TB, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatalf("mmap %d: %v", n, err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

func addr(b []byte) uintptr { return memview.Addr(b) }

func newEngine(t testing.TB, cfg Config) *Engine {
	t.Helper()
	if cfg.LocalServerName == "" {
		cfg.LocalServerName = "127.0.0.1"
	}
	if cfg.TransferTimeout == 0 {
		cfg.TransferTimeout = 5 * time.Second
	}
	e, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// shared allocates a shared buffer on e and returns it as a slice.
func shared(t testing.TB, e *Engine, n int) []byte {
	t.Helper()
	a, err := e.AllocateShared(uint64(n))
	if err != nil {
		t.Fatalf("AllocateShared: %v", err)
	}
	return memview.Bytes(a, n)
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7+int(seed)) ^ byte(i>>9)
	}
}

// fillFast fills large buffers quickly with a non-repeating-per-page pattern.
func fillFast(b []byte, seed byte) {
	const blk = 4093
	n := min(len(b), blk)
	fill(b[:n], seed)
	for i := n; i < len(b); i *= 2 {
		copy(b[i:], b[:i])
	}
	// make pages differ
	for i := 0; i+8 <= len(b); i += 65536 {
		b[i] ^= byte(i >> 16)
		b[i+1] ^= byte(i >> 24)
	}
}

// fakeStore is an in-memory metadata.Store.
type fakeStore struct {
	mu *sync.Mutex
	m  map[string][]byte
}

func newFakeStore() *fakeStore { return &fakeStore{mu: &sync.Mutex{}, m: map[string][]byte{}} }

func (f *fakeStore) Get(_ context.Context, k string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.m[k]
	if !ok {
		return nil, metadata.ErrNotFound
	}
	return append([]byte(nil), v...), nil
}

func (f *fakeStore) Put(_ context.Context, k string, v []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[k] = append([]byte(nil), v...)
	return nil
}

func (f *fakeStore) Delete(_ context.Context, k string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, k)
	return nil
}

func (f *fakeStore) Close() error { return nil }

func (f *fakeStore) has(k string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.m[k]
	return ok
}
