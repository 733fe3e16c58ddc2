package client

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/internal/memview"
	"github.com/mooncake-go/mooncake/store/api"
)

// TestBatchValuesMoveTogether: batch puts and gets over tcp (every value through the engine),
// values of sizes below, at and above a staging chunk (1 MiB buffer: 64 KiB chunks), in Go
// memory (packed into staging chunks) and in registered memory, each on two replicas (two
// target segments at once), with missing keys and a too-small buffer among them: every value
// read back exactly, every failing item with its own code, and more values than the staging
// buffer holds at once.
func TestBatchValuesMoveTogether(t *testing.T) {
	_, addr := startMaster(t)
	tcp := Config{Engine: engine.Config{ForceTCP: true}}
	a := newClientWith(t, addr, 0, tcp)
	newClientWith(t, addr, 32<<20, tcp)
	newClientWith(t, addr, 32<<20, tcp)
	ctx := context.Background()
	sizes := []int{1, 100, 4 << 10, 64 << 10, 64<<10 + 1, 200 << 10}
	var items []Item
	var want [][]byte
	for i := 0; i < 60; i++ {
		v := pattern(sizes[i%len(sizes)], byte(i))
		items = append(items, Item{Key: fmt.Sprint("bv", i), Parts: [][]byte{v}})
		want = append(want, v)
	}
	two := PutOptions{Config: api.ReplicateConfig{ReplicaNum: 2}}
	for i, err := range a.Put(ctx, items, two) {
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	// registered memory: values put from it and read into it without staging
	reg := make([]byte, 32<<20)
	if err := a.RegisterBuffer(memview.Addr(reg), uint64(len(reg))); err != nil {
		t.Fatal(err)
	}
	var ritems []Item
	off := 0
	for i := 0; i < 40; i++ {
		n := sizes[i%len(sizes)]
		copy(reg[off:off+n], pattern(n, byte(100+i)))
		ritems = append(ritems, Item{Key: fmt.Sprint("rv", i), Parts: [][]byte{reg[off : off+n]}})
		off += n
	}
	for i, err := range a.Put(ctx, ritems, two) {
		if err != nil {
			t.Fatalf("registered put %d: %v", i, err)
		}
	}
	clear(reg)
	for _, c := range []struct {
		name string
		mem  func(i, n int) []byte
	}{
		{"go memory", func(_, n int) []byte { return make([]byte, n) }},
		{"registered", func(i, n int) []byte { return reg[i*(256<<10) : i*(256<<10)+n] }},
	} {
		// gets: every other item a missing key, one buffer a byte short
		var gets []Item
		var wantVals [][]byte
		for i := range items {
			n := len(want[i])
			gets = append(gets, Item{Key: items[i].Key, Parts: [][]byte{c.mem(2*i, n)}})
			wantVals = append(wantVals, want[i])
			gets = append(gets, Item{Key: fmt.Sprint("missing", i), Parts: [][]byte{c.mem(2*i+1, 8)}})
			wantVals = append(wantVals, nil)
		}
		gets[4].Parts[0] = gets[4].Parts[0][:len(want[2])-1]
		got, errs := a.Get(ctx, gets, GetOptions{})
		for j, it := range gets {
			switch {
			case j == 4:
				if !api.Is(errs[j], api.BUFFER_OVERFLOW) {
					t.Fatalf("%s: short buffer: %v", c.name, errs[j])
				}
			case wantVals[j] == nil:
				if !api.Is(errs[j], api.OBJECT_NOT_FOUND) {
					t.Fatalf("%s: missing key %s: %v", c.name, it.Key, errs[j])
				}
			default:
				if errs[j] != nil || got[j] != uint64(len(wantVals[j])) || !bytes.Equal(it.Parts[0], wantVals[j]) {
					t.Fatalf("%s: %s: size %d err %v equal %v", c.name, it.Key, got[j], errs[j], bytes.Equal(it.Parts[0], wantVals[j]))
				}
			}
		}
	}
	vals, errs := getValues(ctx, a, itemKeys(ritems))
	for i, it := range ritems {
		if errs[i] != nil || !bytes.Equal(vals[i], pattern(len(it.Parts[0]), byte(100+i))) {
			t.Fatalf("registered value %s: %v", it.Key, errs[i])
		}
	}
}

// TestBatchPutToADeadSegment: a batch put whose keys land on two segments, one of whose holders
// no longer answers transfers (its engine closed, its segment still mounted): the keys written
// to the live segment are stored, the others fail with TRANSFER_FAIL and are not visible (the
// put revoked them), and a batch get reads the stored ones exactly.
func TestBatchPutToADeadSegment(t *testing.T) {
	_, addr := startMaster(t)
	tcp := Config{Engine: engine.Config{ForceTCP: true}}
	a := newClientWith(t, addr, 0, tcp)
	newClientWith(t, addr, 32<<20, tcp)
	dead := newClientWith(t, addr, 32<<20, tcp)
	dead.eng.(*engine.Engine).Close()
	ctx := context.Background()
	var items []Item
	for i := 0; i < 64; i++ {
		items = append(items, Item{Key: fmt.Sprint("d", i), Parts: [][]byte{pattern(4096, byte(i))}})
	}
	errs := a.Put(ctx, items, PutOptions{})
	var stored, failed []string
	for i, err := range errs {
		switch {
		case err == nil:
			stored = append(stored, items[i].Key)
		case api.Is(err, api.TRANSFER_FAIL):
			failed = append(failed, items[i].Key)
		default:
			t.Fatalf("put %s: %v", items[i].Key, err)
		}
	}
	if len(stored) == 0 || len(failed) == 0 {
		t.Fatalf("the keys did not land on both segments: %d stored, %d failed", len(stored), len(failed))
	}
	sizes, xerrs := a.Exists(ctx, failed)
	for i := range failed {
		if xerrs[i] != nil || sizes[i] != 0 {
			t.Fatalf("failed key %s visible: size %d err %v", failed[i], sizes[i], xerrs[i])
		}
	}
	vals, gerrs := getValues(ctx, a, stored)
	for i, k := range stored {
		var n int
		fmt.Sscanf(k, "d%d", &n)
		if gerrs[i] != nil || !bytes.Equal(vals[i], pattern(4096, byte(n))) {
			t.Fatalf("stored key %s: %v", k, gerrs[i])
		}
	}
}

// mergeAdjacent joins requests whose local and remote ranges both continue the previous one's,
// only within one local buffer (the staging buffer, or one registered buffer: two buffers
// registered side by side stay apart, as the engine takes a source inside one only).
func TestMergeAdjacentTransfers(t *testing.T) {
	c := &Client{stageAddr: 0x10000, stageSize: 0x1000, regions: map[uintptr]uint64{0x40000: 0x100, 0x40100: 0x100}}
	req := func(src uintptr, seg engine.SegmentID, off, n uint64) engine.TransferRequest {
		return engine.TransferRequest{Opcode: engine.OpWrite, Source: src, TargetID: seg, TargetOffset: off, Length: n}
	}
	got := c.mergeAdjacent([]engine.TransferRequest{
		req(0x10000, 1, 0x500, 0x100), req(0x10100, 1, 0x600, 0x100), req(0x10200, 1, 0x700, 0x80), // staged, one run
		req(0x10280, 1, 0x800, 0x80),  // remote gap: a new request
		req(0x10300, 2, 0x880, 0x80),  // another segment
		req(0x40000, 2, 0x900, 0x80),  // registered buffer A ...
		req(0x40080, 2, 0x980, 0x80),  // ... continued
		req(0x40100, 2, 0xa00, 0x100), // registered buffer B, adjacent in memory: kept apart
		req(0x90000, 2, 0xb00, 0x10),  // unregistered memory: never joined
		req(0x90010, 2, 0xb10, 0x10),
	})
	want := []engine.TransferRequest{
		req(0x10000, 1, 0x500, 0x280), req(0x10280, 1, 0x800, 0x80), req(0x10300, 2, 0x880, 0x80),
		req(0x40000, 2, 0x900, 0x100), req(0x40100, 2, 0xa00, 0x100), req(0x90000, 2, 0xb00, 0x10), req(0x90010, 2, 0xb10, 0x10),
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("merged:\n%v\nwant\n%v", got, want)
	}
	read := []engine.TransferRequest{req(0x10000, 1, 0, 0x10), req(0x10010, 1, 0x10, 0x10)}
	read[1].Opcode = engine.OpRead
	if got := c.mergeAdjacent(read); len(got) != 2 {
		t.Fatalf("a write and a read were joined: %v", got)
	}
}
