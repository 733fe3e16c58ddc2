package shm

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/engine/transport"
	"github.com/mooncake-go/mooncake/internal/memview"
)

// resident reports, per page of b, whether it is in memory.
func resident(t *testing.T, b []byte) []bool {
	t.Helper()
	vec, err := memview.Resident(b)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]bool, len(vec))
	for i, v := range vec {
		out[i] = v&1 != 0
	}
	return out
}

func mapped(t *testing.T, tr *Transport, info *transport.ShmInfo) *mapping {
	t.Helper()
	tr.mu.RLock()
	defer tr.mu.RUnlock()
	m := tr.lookup(info)
	if m == nil {
		t.Fatal("not mapped")
	}
	return m
}

func waitBackground(t *testing.T, m *mapping) {
	t.Helper()
	select {
	case <-m.bgDone:
	case <-time.After(20 * time.Second):
		t.Fatal("background fill did not finish")
	}
}

// The background pass fills the chunks the owner has touched and leaves the others alone, so a
// peer never commits memory its owner has not; a transfer into an untouched chunk fills it.
func TestFillResidentChunksOnly(t *testing.T) {
	const size = 8 * fillChunk
	r, err := Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Free()
	own := memview.Bytes(r.Addr, size)
	for i := 0; i < 3*fillChunk; i += 4096 { // the owner touches chunks 0-2 only
		own[i] = 1
	}
	info := r.Info
	d := &transport.SegmentDescriptor{Name: "x", Buffers: []transport.BufferDesc{{Name: "cpu:0", Addr: uint64(r.Addr), Length: size, Shm: &info}}}
	tr := New()
	defer tr.Close()
	v, release, err := tr.Hold(d, uint64(r.Addr)+4090, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if v[0] != 0 || v[6] != 1 {
		t.Fatalf("view does not show the owner's bytes: %d %d", v[0], v[6])
	}
	m := mapped(t, tr, &info)
	waitBackground(t, m)
	if fillUnsupported.Load() {
		t.Skip("kernel has no MADV_POPULATE_WRITE (before 5.14)")
	}
	for c := 0; c < 8; c++ {
		if want := c < 3; m.filled.has(c) != want {
			t.Errorf("chunk %d filled = %v, want %v", c, m.filled.has(c), want)
		}
	}
	res := resident(t, own)
	for p := 3 * fillChunk / 4096; p < len(res); p++ {
		if res[p] {
			t.Fatalf("page %d of an untouched chunk became resident through the peer's mapping", p)
		}
	}
	// A write into chunk 5 fills chunk 5 (and only it) and lands in the owner's memory.
	src := bytes.Repeat([]byte{7}, 3000)
	rc := &rec{errs: make([]error, 1)}
	tr.Execute(context.Background(), &transport.Target{Desc: d}, []transport.Request{
		{Write: true, Local: memview.Addr(src), Remote: uint64(r.Addr) + 5*fillChunk + 100, Length: uint64(len(src))},
	}, rc)
	if rc.errs[0] != nil {
		t.Fatal(rc.errs[0])
	}
	if !bytes.Equal(own[5*fillChunk+100:5*fillChunk+100+3000], src) {
		t.Fatal("write did not land")
	}
	for c := 3; c < 8; c++ {
		if want := c == 5; m.filled.has(c) != want {
			t.Errorf("after the write: chunk %d filled = %v, want %v", c, m.filled.has(c), want)
		}
	}
}

// Closing the transport (or losing the peer) while the background pass runs stops it; nothing
// is touched after the unmap.
func TestBackgroundFillStopsOnClose(t *testing.T) {
	const size = 256 << 20
	r, err := Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Free()
	own := memview.Bytes(r.Addr, size)
	for i := 0; i < size; i += 4096 {
		own[i] = 1
	}
	info := r.Info
	d := &transport.SegmentDescriptor{Name: "x", Buffers: []transport.BufferDesc{{Name: "cpu:0", Addr: uint64(r.Addr), Length: size, Shm: &info}}}
	for _, stop := range []string{"close", "forget"} {
		tr := New()
		if _, err := tr.View(d, uint64(r.Addr), 8); err != nil {
			t.Fatal(err)
		}
		m := mapped(t, tr, &info)
		if stop == "close" {
			tr.Close()
		} else {
			tr.Forget(info.PID)
		}
		waitBackground(t, m)
		tr.Close()
	}
}
