package shm

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/engine/transport"
	"github.com/mooncake-go/mooncake/internal/futex"
	"github.com/mooncake-go/mooncake/internal/memview"
)

type rec struct{ errs []error }

func (r *rec) Progress(int, uint64)  {}
func (r *rec) Done(i int, err error) { r.errs[i] = err }

func TestAllocMapCopy(t *testing.T) {
	r, err := Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Free()
	local, err := Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Free()
	lb := memview.Bytes(local.Addr, 1<<20)
	for i := range lb {
		lb[i] = byte(i)
	}
	info := r.Info
	d := &transport.SegmentDescriptor{Name: "x", Buffers: []transport.BufferDesc{{Name: "cpu:0", Addr: uint64(r.Addr), Length: 1 << 20, Shm: &info}}}
	tr := New()
	defer tr.Close()
	word := memview.Uint32(r.Addr + 4096)
	woke := make(chan struct{})
	go func() {
		for *(*uint32)(word) == 0 { // racy read of non-Go memory is fine here
			futex.Wait(word, 0, 50*time.Millisecond)
		}
		close(woke)
	}()
	rc := &rec{errs: make([]error, 3)}
	tr.Execute(context.Background(), &transport.Target{Desc: d}, []transport.Request{
		{Write: true, Local: local.Addr, Remote: uint64(r.Addr), Length: 4096},
		{Write: true, Local: local.Addr + 1, Remote: uint64(r.Addr) + 4096, Length: 4}, // signal
		{Write: false, Local: local.Addr + 8192, Remote: uint64(r.Addr), Length: 4096},
	}, rc)
	for _, e := range rc.errs {
		if e != nil {
			t.Fatal(e)
		}
	}
	rb := memview.Bytes(r.Addr, 1<<20)
	if !bytes.Equal(rb[:4096], lb[:4096]) || !bytes.Equal(lb[8192:8192+4096], lb[:4096]) {
		t.Fatal("copy mismatch")
	}
	select {
	case <-woke:
	case <-time.After(5 * time.Second):
		t.Fatal("signal did not wake the waiter")
	}
	v, err := tr.View(d, uint64(r.Addr)+10, 10)
	if err != nil || !bytes.Equal(v, rb[10:20]) {
		t.Fatal("view", err)
	}
	// A descriptor naming a different memfd is refused.
	bad := info
	bad.Name = "mooncake-nope"
	d2 := &transport.SegmentDescriptor{Name: "y", Buffers: []transport.BufferDesc{{Name: "cpu:0", Addr: 1 << 20, Length: 1 << 20, Shm: &bad}}}
	if _, err := tr.View(d2, 1<<20, 1); err == nil {
		t.Fatal("mapped the wrong file")
	}
}
