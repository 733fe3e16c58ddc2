package client

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/internal/memview"
	"github.com/mooncake-go/mooncake/store/api"
)

// The request API: Put, Get, Exists and Remove of several items at once, every shape of item
// (parts, registered memory, caller buffers, an allocator), and exact per-item codes.

func codesOf(errs []error) []api.ErrorCode {
	out := make([]api.ErrorCode, len(errs))
	for i, e := range errs {
		out[i] = api.CodeOf(e)
	}
	return out
}

func wantCodes(t *testing.T, what string, errs []error, want ...api.ErrorCode) {
	t.Helper()
	if got := codesOf(errs); !slices.Equal(got, want) {
		t.Fatalf("%s: codes %v, want %v (%v)", what, got, want, errs)
	}
}

// TestRequestPutGetShapes writes and reads every shape of item, over shared memory and over
// tcp (registered memory then goes straight to the engine, the rest through staging).
func TestRequestPutGetShapes(t *testing.T) {
	for _, tcp := range []bool{false, true} {
		t.Run(fmt.Sprintf("force_tcp=%v", tcp), func(t *testing.T) {
			_, addr := startMaster(t)
			base := Config{Engine: engine.Config{ForceTCP: tcp}}
			a := newClientWith(t, addr, 16<<20, base)
			b := newClientWith(t, addr, 16<<20, base)
			ctx := context.Background()
			onB := PutOptions{Config: api.ReplicateConfig{PreferredSegments: []string{b.Hostname()}}}

			// a key with several parts, one of them empty, stored on the other client
			v := pattern(3<<20+5, 3)
			parts := [][]byte{v[:100], nil, v[100 : 2<<20], v[2<<20:]}
			wantCodes(t, "put parts", a.Put(ctx, []Item{{Key: "parts", Parts: parts}}, onB), api.OK)
			if got, err := b.GetValue(ctx, "parts"); err != nil || !bytes.Equal(got, v) {
				t.Fatalf("parts read back: %v equal %v", err, bytes.Equal(got, v))
			}

			// registered memory (zero copy), one item and a batch with several parts each
			reg := make([]byte, 2<<20)
			copy(reg, pattern(len(reg), 7))
			if err := a.RegisterBuffer(memview.Addr(reg), uint64(len(reg))); err != nil {
				t.Fatal(err)
			}
			defer a.UnregisterBuffer(memview.Addr(reg))
			wantCodes(t, "put registered", a.Put(ctx, []Item{{Key: "reg", Parts: [][]byte{reg}}}, onB), api.OK)
			wantCodes(t, "batch put registered",
				a.Put(ctx, []Item{{Key: "reg1", Parts: [][]byte{reg[:10], reg[1<<20:]}}, {Key: "reg2", Parts: [][]byte{reg[5:6]}}}, onB), api.OK, api.OK)
			for key, want := range map[string][]byte{"reg": reg, "reg1": append(slices.Clone(reg[:10]), reg[1<<20:]...), "reg2": reg[5:6]} {
				if got, err := b.GetValue(ctx, key); err != nil || !bytes.Equal(got, want) {
					t.Fatalf("%s read back: %v", key, err)
				}
			}

			// get into caller buffers: one buffer, several (larger than the value), registered ones
			one := make([]byte, len(v)+10)
			two := [][]byte{make([]byte, 1<<20), make([]byte, 3<<20)}
			n, errs := b.Get(ctx, []Item{{Key: "parts", Parts: [][]byte{one}}}, GetOptions{})
			wantCodes(t, "get into one buffer", errs, api.OK)
			if n[0] != uint64(len(v)) || !bytes.Equal(one[:len(v)], v) {
				t.Fatalf("get into one buffer: %d bytes", n[0])
			}
			n, errs = b.Get(ctx, []Item{{Key: "parts", Parts: two}, {Key: "reg2", Parts: [][]byte{make([]byte, 1)}}}, GetOptions{})
			wantCodes(t, "batch get into buffers", errs, api.OK, api.OK)
			if !slices.Equal(n, []uint64{uint64(len(v)), 1}) || !bytes.Equal(append(slices.Clone(two[0]), two[1][:len(v)-1<<20]...), v) {
				t.Fatalf("batch get into buffers: sizes %v", n)
			}
			clear(reg)
			n, errs = a.Get(ctx, []Item{{Key: "reg1", Parts: [][]byte{reg[:10], reg[10 : 1<<20+10]}}}, GetOptions{})
			wantCodes(t, "get into registered buffers", errs, api.OK)
			if n[0] != 10+1<<20 || !bytes.Equal(reg[:10+1<<20], append(pattern(2<<20, 7)[:10], pattern(2<<20, 7)[1<<20:]...)) {
				t.Fatalf("get into registered buffers: %d", n[0])
			}
		})
	}
}

// TestRequestGetWithAllocator: the allocator is called on the calling goroutine, in item
// order, once per key the master found, with the value's exact size, before any read.
func TestRequestGetWithAllocator(t *testing.T) {
	_, addr := startMaster(t)
	a := newClient(t, addr, 16<<20)
	ctx := context.Background()
	wantCodes(t, "put", a.Put(ctx, []Item{value("x", "xx"), value("y", "yyyy"), value("z", "z")}, PutOptions{}), api.OK, api.OK, api.OK)
	type call struct {
		i    int
		size uint64
	}
	var calls []call
	mem := map[int][]byte{}
	sizes, errs := a.Get(ctx, []Item{{Key: "z"}, {Key: "missing"}, {Key: "x"}, {Key: "y"}}, GetOptions{Alloc: func(i int, n uint64) ([]byte, error) {
		calls = append(calls, call{i, n})
		if i == 3 {
			return nil, api.Errorf(api.INTERNAL_ERROR, "no memory for item 3")
		}
		mem[i] = make([]byte, n)
		return mem[i], nil
	}})
	wantCodes(t, "get with allocator", errs, api.OK, api.OBJECT_NOT_FOUND, api.OK, api.INTERNAL_ERROR)
	if !slices.Equal(calls, []call{{0, 1}, {2, 2}, {3, 4}}) {
		t.Fatalf("allocator calls %v", calls)
	}
	if !slices.Equal(sizes, []uint64{1, 0, 2, 0}) || string(mem[0]) != "z" || string(mem[2]) != "xx" {
		t.Fatalf("sizes %v, values %q %q", sizes, mem[0], mem[2])
	}
	// one item: the single-key path calls it the same way
	calls = nil
	sizes, errs = a.Get(ctx, []Item{{Key: "y"}}, GetOptions{Alloc: func(i int, n uint64) ([]byte, error) {
		calls = append(calls, call{i, n})
		return make([]byte, n+3), nil // more than asked: the value takes its first bytes
	}})
	wantCodes(t, "single get with allocator", errs, api.OK)
	if sizes[0] != 4 || !slices.Equal(calls, []call{{0, 4}}) {
		t.Fatalf("single get with allocator: size %d calls %v", sizes[0], calls)
	}
	_, errs = a.Get(ctx, []Item{{Key: "y"}}, GetOptions{Alloc: func(int, uint64) ([]byte, error) { return make([]byte, 1), nil }})
	wantCodes(t, "allocator giving too little", errs, api.BUFFER_OVERFLOW)
}

// TestRequestUpsert: a put leaves an existing key as it is (and succeeds); an upsert replaces
// it, alone or in a batch with new keys, with a value in several parts.
func TestRequestUpsert(t *testing.T) {
	_, addr := startMaster(t)
	a := newClient(t, addr, 16<<20)
	ctx := context.Background()
	wantCodes(t, "put", a.Put(ctx, []Item{value("u", "old")}, PutOptions{}), api.OK)
	wantCodes(t, "write-once put", a.Put(ctx, []Item{value("u", "ignored")}, PutOptions{}), api.OK)
	if got, _ := a.GetValue(ctx, "u"); string(got) != "old" {
		t.Fatalf("write-once put replaced the value: %q", got)
	}
	up := PutOptions{Upsert: true}
	wantCodes(t, "upsert", a.Put(ctx, []Item{{Key: "u", Parts: [][]byte{[]byte("ne"), []byte("w")}}}, up), api.OK)
	if got, _ := a.GetValue(ctx, "u"); string(got) != "new" {
		t.Fatalf("after upsert %q", got)
	}
	wantCodes(t, "batch upsert", a.Put(ctx, []Item{value("u", "newer"), value("u2", "first")}, up), api.OK, api.OK)
	vals, errs := getValues(ctx, a, []string{"u", "u2"})
	wantCodes(t, "read back", errs, api.OK, api.OK)
	if string(vals[0]) != "newer" || string(vals[1]) != "first" {
		t.Fatalf("after batch upsert %q", vals)
	}
}

// TestRequestMixedBatches: one bad item in a batch fails alone, with its exact code, in every
// family; an empty request does nothing.
func TestRequestMixedBatches(t *testing.T) {
	_, addr := startMaster(t)
	a := newClient(t, addr, 16<<20)
	ctx := context.Background()
	wantCodes(t, "put with an empty value", a.Put(ctx, []Item{value("m1", "one"), {Key: "empty"}, value("m2", "two"), value("m5", "five")}, PutOptions{}),
		api.OK, api.INVALID_PARAMS, api.OK, api.OK)
	wantCodes(t, "put with an empty key", a.Put(ctx, []Item{value("m3", "three"), value("", "x")}, PutOptions{}), api.OK, api.INVALID_KEY)
	wantCodes(t, "put with a value larger than any segment", a.Put(ctx, []Item{{Key: "huge", Parts: [][]byte{make([]byte, 17<<20)}}, value("m4", "four")}, PutOptions{}),
		api.NO_AVAILABLE_HANDLE, api.OK)

	buf1, buf2, small := make([]byte, 8), make([]byte, 8), make([]byte, 2)
	sizes, errs := a.Get(ctx, []Item{{Key: "m1", Parts: [][]byte{buf1}}, {Key: "missing", Parts: [][]byte{buf2}}, {Key: "m2", Parts: [][]byte{small}}, {Key: "m3"}, {Key: "m4", Parts: [][]byte{buf2[:1], buf2[1:]}}}, GetOptions{})
	wantCodes(t, "get", errs, api.OK, api.OBJECT_NOT_FOUND, api.BUFFER_OVERFLOW, api.INVALID_PARAMS, api.OK)
	if !slices.Equal(sizes, []uint64{3, 0, 0, 0, 4}) || string(buf1[:3]) != "one" || string(buf2[:4]) != "four" {
		t.Fatalf("get sizes %v, values %q %q", sizes, buf1, buf2)
	}
	// the same items one at a time give the same codes
	for i, it := range []Item{{Key: "missing", Parts: [][]byte{buf2}}, {Key: "m2", Parts: [][]byte{small}}, {Key: "m3"}} {
		_, errs := a.Get(ctx, []Item{it}, GetOptions{})
		wantCodes(t, fmt.Sprintf("single get %d", i), errs, []api.ErrorCode{api.OBJECT_NOT_FOUND, api.BUFFER_OVERFLOW, api.INVALID_PARAMS}[i])
	}

	sz, errs := a.Exists(ctx, []string{"m1", "missing", "m4"})
	wantCodes(t, "exists", errs, api.OK, api.OK, api.OK)
	if !slices.Equal(sz, []uint64{3, 0, 4}) {
		t.Fatalf("exists sizes %v", sz)
	}
	if sz, errs := a.Exists(ctx, []string{"missing"}); errs[0] != nil || sz[0] != 0 {
		t.Fatalf("single exists of a missing key: %d %v", sz[0], errs[0])
	}
	// the gets above leased m1 (and m2, m3, m4): a plain remove refuses it, m5 was never read
	wantCodes(t, "remove", a.Remove(ctx, []string{"m5", "missing", "m1"}, false), api.OK, api.OBJECT_NOT_FOUND, api.OBJECT_HAS_LEASE)
	wantCodes(t, "single remove", a.Remove(ctx, []string{"m2"}, false), api.OBJECT_HAS_LEASE)
	wantCodes(t, "forced remove", a.Remove(ctx, []string{"m1", "m3"}, true), api.OK, api.OK)
	if sz, _ := a.Exists(ctx, []string{"m1", "m2", "m3", "m4", "m5"}); !slices.Equal(sz, []uint64{0, 3, 0, 4, 0}) {
		t.Fatalf("after removal: %v", sz)
	}

	if errs := a.Put(ctx, nil, PutOptions{}); len(errs) != 0 {
		t.Fatalf("empty put: %v", errs)
	}
	if sizes, errs := a.Get(ctx, nil, GetOptions{}); len(sizes) != 0 || len(errs) != 0 {
		t.Fatalf("empty get: %v %v", sizes, errs)
	}
	if sizes, errs := a.Exists(ctx, nil); len(sizes) != 0 || len(errs) != 0 {
		t.Fatalf("empty exists: %v %v", sizes, errs)
	}
	if errs := a.Remove(ctx, nil, false); len(errs) != 0 {
		t.Fatalf("empty remove: %v", errs)
	}
}
