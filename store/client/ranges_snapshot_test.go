package client

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/internal/memview"
	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/master"
)

// registered returns n bytes of memory registered with c, filled with fill.
func registeredBuf(t *testing.T, c *Client, n int, fill byte) []byte {
	t.Helper()
	b := bytes.Repeat([]byte{fill}, n)
	if err := c.RegisterBuffer(memview.Addr(b), uint64(n)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.UnregisterBuffer(memview.Addr(b)) })
	return b
}

func frag(buf []byte, dst int, src, size uint64) Range {
	return Range{Src: src, Dst: memview.Addr(buf) + uintptr(dst), Size: size}
}

func wantCode(t *testing.T, what string, err error, code api.ErrorCode) {
	t.Helper()
	if !api.Is(err, code) {
		t.Fatalf("%s: got %v, want %s", what, err, code)
	}
}

// TestSnapshotRanges: one snapshot, several batches, over shared memory and over tcp; errors
// per fragment; an upsert after the snapshot (old bytes through the snapshot, new ones through
// a plain ranged read).
func TestSnapshotRanges(t *testing.T) {
	for _, tcp := range []bool{false, true} {
		t.Run(fmt.Sprintf("forceTCP=%v", tcp), func(t *testing.T) {
			_, addr := startMaster(t)
			base := Config{Engine: engine.Config{ForceTCP: tcp}}
			owner := newClientWith(t, addr, 16<<20, base)
			reader := newClientWith(t, addr, 16<<20, base)
			ctx := context.Background()
			v1, v2 := pattern(3<<20+5, 1), pattern(4096, 2)
			cfg := api.ReplicateConfig{PreferredSegments: []string{owner.Hostname()}}
			for k, v := range map[string][]byte{"k1": v1, "k2": v2} {
				if err := owner.PutValue(ctx, k, v, PutOptions{Config: cfg}); err != nil {
					t.Fatal(err)
				}
			}
			snap := reader.PrepareSnapshot(ctx, []string{"k1", "k2", "missing", "k1"})
			if got := strings.Join(snap.Keys(), ","); got != "k1,k2,missing" {
				t.Fatalf("keys %s", got)
			}
			out := registeredBuf(t, reader, 1<<20, 0xA5)
			want := bytes.Repeat([]byte{0xA5}, len(out))
			for batch := 0; batch < 3; batch++ {
				src := uint64(batch * 1000)
				groups := []RangeGroup{
					{Key: "k2", Frags: []Range{frag(out, 100, 0, 10), frag(out, 0, 4000, 96)}},
					{Key: "k1", Frags: []Range{frag(out, 200, 3<<20, 5), frag(out, 4096, src, 512<<10)}},
				}
				got, errs := snap.GetRanges(ctx, groups, false)
				for i, g := range groups {
					for j, f := range g.Frags {
						if errs[i][j] != nil || got[i][j] != f.Size {
							t.Fatalf("batch %d group %d frag %d: %d %v", batch, i, j, got[i][j], errs[i][j])
						}
					}
				}
				copy(want[100:], v2[:10])
				copy(want[0:], v2[4000:])
				copy(want[200:], v1[3<<20:])
				copy(want[4096:], v1[src:src+512<<10])
				if !bytes.Equal(out, want) {
					t.Fatalf("batch %d: bytes differ", batch)
				}
			}
			// errors per fragment; the valid fragment beside them lands
			copy(out, bytes.Repeat([]byte{0xA5}, len(out)))
			other := make([]byte, 64)
			got, errs := snap.GetRanges(ctx, []RangeGroup{
				{Key: "missing", Frags: []Range{frag(out, 0, 0, 1)}},
				{Key: "never-prepared", Frags: []Range{frag(out, 0, 0, 1)}},
				{Key: "k2", Frags: []Range{frag(out, 0, 4090, 7), frag(out, len(out)-2, 0, 3), frag(other, 0, 0, 1), frag(out, 0, 0, 0), frag(out, 8, 1, 2)}},
			}, false)
			wantCode(t, "missing key", errs[0][0], api.OBJECT_NOT_FOUND)
			wantCode(t, "key not in the snapshot", errs[1][0], api.INVALID_PARAMS)
			wantCode(t, "source past the value", errs[2][0], api.INVALID_PARAMS)
			wantCode(t, "destination past the buffer", errs[2][1], api.BUFFER_OVERFLOW)
			wantCode(t, "unregistered destination", errs[2][2], api.INVALID_PARAMS)
			wantCode(t, "zero size", errs[2][3], api.INVALID_PARAMS)
			if errs[2][4] != nil || got[2][4] != 2 || !bytes.Equal(out[8:10], v2[1:3]) || out[7] != 0xA5 || out[10] != 0xA5 {
				t.Fatalf("valid fragment beside bad ones: %d %v", got[2][4], errs[2][4])
			}
			// the same with Whole: nothing is written
			copy(out, bytes.Repeat([]byte{0xA5}, len(out)))
			_, errs = snap.GetRanges(ctx, []RangeGroup{{Key: "k2", Whole: true, Frags: []Range{frag(out, 8, 1, 2), frag(out, 0, 4090, 7)}}}, false)
			wantCode(t, "whole row, valid fragment", errs[0][0], api.INVALID_PARAMS)
			wantCode(t, "whole row, bad fragment", errs[0][1], api.INVALID_PARAMS)
			if !bytes.Equal(out, bytes.Repeat([]byte{0xA5}, len(out))) {
				t.Fatal("a whole row with a bad fragment wrote its valid one")
			}

			// upsert: the snapshot's lease keeps the old copy, a plain read sees the new one
			newer := bytes.Repeat([]byte{'q'}, len(v2))
			if err := owner.PutValue(ctx, "k2", newer, PutOptions{Config: cfg, Upsert: true}); err != nil {
				t.Fatal(err)
			}
			got, errs = snap.GetRanges(ctx, []RangeGroup{{Key: "k2", Frags: []Range{frag(out, 0, 0, 4096)}}}, false)
			if errs[0][0] != nil || !bytes.Equal(out[:4096], v2) {
				t.Fatalf("snapshot read after upsert: %v (want the old bytes)", errs[0][0])
			}
			if _, errs := reader.GetRanges(ctx, "k2", []Range{frag(out, 0, 0, 4096)}); errs[0] != nil || !bytes.Equal(out[:4096], newer) {
				t.Fatalf("plain ranged read after upsert: %v (want the new bytes)", errs[0])
			}
			snap.Close()
			_, errs = snap.GetRanges(ctx, []RangeGroup{{Key: "k2", Frags: []Range{frag(out, 0, 0, 1)}}}, false)
			wantCode(t, "closed snapshot", errs[0][0], api.INVALID_PARAMS)
		})
	}
}

// TestSnapshotLease: a batch after half the lease queries again (the upsert becomes visible,
// a key put after the snapshot appears); a view whose lease is over is never read.
func TestSnapshotLease(t *testing.T) {
	_, addr := startMaster(t, func(c *master.Config) { c.DefaultKVLeaseTTL = 600 * time.Millisecond })
	owner := newClient(t, addr, 8<<20)
	reader := newClient(t, addr, 8<<20)
	ctx := context.Background()
	old := pattern(1000, 3)
	if err := owner.PutValue(ctx, "a", old, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	out := registeredBuf(t, reader, 1000, 0)
	snap := reader.PrepareSnapshot(ctx, []string{"a", "later"})
	read := func(key string) error {
		_, errs := snap.GetRanges(ctx, []RangeGroup{{Key: key, Frags: []Range{frag(out, 0, 0, 1000)}}}, false)
		return errs[0][0]
	}
	newer := pattern(1000, 4)
	if err := owner.PutValue(ctx, "a", newer, PutOptions{Upsert: true}); err != nil {
		t.Fatal(err)
	}
	if err := owner.PutValue(ctx, "later", newer, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := read("a"); err != nil || !bytes.Equal(out, old) {
		t.Fatalf("before the refresh: %v, old bytes %v", err, bytes.Equal(out, old))
	}
	wantCode(t, "key missing when prepared", read("later"), api.OBJECT_NOT_FOUND)
	if time.Since(start) > 250*time.Millisecond {
		t.Skip("the machine is too slow for a 600 ms lease")
	}
	time.Sleep(350 * time.Millisecond) // past half the lease
	if err := read("a"); err != nil || !bytes.Equal(out, newer) {
		t.Fatalf("after the refresh: %v, new bytes %v", err, bytes.Equal(out, newer))
	}
	if err := read("later"); err != nil {
		t.Fatalf("key put after the snapshot, after the refresh: %v", err)
	}
	time.Sleep(700 * time.Millisecond) // past the whole lease: refreshed again
	if err := read("a"); err != nil || !bytes.Equal(out, newer) {
		t.Fatalf("after the lease: %v", err)
	}
	// a view whose lease ended but whose refresh time has not come (a batch that started
	// before the midpoint and ran past the end): nothing is read
	v := snap.view.Load()
	stale := *v
	stale.refresh, stale.deadline = time.Now().Add(time.Hour), time.Now().Add(-time.Millisecond)
	snap.view.Store(&stale)
	clear(out)
	wantCode(t, "expired lease", read("a"), api.LEASE_EXPIRED)
	if !bytes.Equal(out, make([]byte, len(out))) {
		t.Fatal("read through a descriptor whose lease is over")
	}
}

func TestRangeTemplateAndPlanValidation(t *testing.T) {
	const max64 = math.MaxUint64
	for _, c := range []struct {
		dst, src, size []uint64
		msg            string
	}{
		{nil, nil, nil, "Invalid ranged-read template shape"},
		{[]uint64{0}, nil, []uint64{1}, "Invalid ranged-read template shape"},
		{[]uint64{0}, []uint64{0}, []uint64{0}, "Ranged-read template exceeds bounds"},
		{[]uint64{max64}, []uint64{0}, []uint64{1}, "Ranged-read template exceeds bounds"},
		{[]uint64{0}, []uint64{max64}, []uint64{1}, "Ranged-read template exceeds bounds"},
		{[]uint64{0, 0}, []uint64{0, 0}, []uint64{1 << 40, 1}, "Ranged-read template exceeds bounds"},
		{make([]uint64, MaxTemplateRanges+1), make([]uint64, MaxTemplateRanges+1), make([]uint64, MaxTemplateRanges+1), "Invalid ranged-read template shape"},
	} {
		if _, err := NewRangeTemplate(c.dst, c.src, c.size); !api.Is(err, api.INVALID_PARAMS) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("template %v/%v/%v: %v, want %q", len(c.dst), len(c.src), len(c.size), err, c.msg)
		}
	}
	tpl := func(dst, src, size []uint64) *RangeTemplate {
		t.Helper()
		x, err := NewRangeTemplate(dst, src, size)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	run := tpl([]uint64{0, 16}, []uint64{100, 0}, []uint64{16, 16})
	gap := tpl([]uint64{0, 32}, []uint64{0, 16}, []uint64{16, 16})
	early := tpl([]uint64{8}, []uint64{0}, []uint64{4})
	for _, c := range []struct {
		ts      []*RangeTemplate
		suffix  []string
		regions []uint64
		msg     string
	}{
		{nil, nil, nil, "Invalid ranged-read plan shape"},
		{[]*RangeTemplate{run}, nil, []uint64{0}, "Invalid ranged-read plan shape"},
		{[]*RangeTemplate{nil}, []string{"a"}, []uint64{0}, "Ranged-read plan exceeds bounds"},
		{[]*RangeTemplate{run}, []string{"a"}, []uint64{MaxPlanRegion}, "Ranged-read plan exceeds bounds"},
		{[]*RangeTemplate{gap}, []string{"a"}, []uint64{0}, "Plan run destination is not contiguous"},
		{[]*RangeTemplate{run, early}, []string{"a", "a"}, []uint64{0, 0}, "Plan object destinations are not ordered"},
	} {
		if _, err := NewRangePlan(c.ts, c.suffix, c.regions); !api.Is(err, api.INVALID_PARAMS) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("plan: %v, want %q", err, c.msg)
		}
	}
	p, err := NewRangePlan([]*RangeTemplate{run, early, run}, []string{"a", "b", "a"}, []uint64{0, 0, 1})
	if err != nil || p.Objects() != 3 || p.Ranges() != 5 {
		t.Fatalf("plan: %v objects %d ranges %d", err, p.Objects(), p.Ranges())
	}
	if _, err := NewRangePlan([]*RangeTemplate{early, run}, []string{"a", "a"}, []uint64{0, 0}); !strings.Contains(fmt.Sprint(err), "not ordered") {
		t.Fatalf("overlapping rows of one object: %v", err)
	}
	if p, err := NewRangePlan([]*RangeTemplate{run, tpl([]uint64{32}, []uint64{0}, []uint64{4})}, []string{"a", "a"}, []uint64{0, 0}); err != nil || p.Objects() != 1 {
		t.Fatalf("rows of one object in order: %v", err)
	}
}

// TestSnapshotTemplatesAndPlans: rows from several objects into several buffers with
// translations; holes stay as they were; the batch errors and the rows that are just false.
func TestSnapshotTemplatesAndPlans(t *testing.T) {
	_, addr := startMaster(t)
	owner := newClient(t, addr, 16<<20)
	reader := newClient(t, addr, 16<<20)
	ctx := context.Background()
	vals := map[string][]byte{"p0-a": pattern(8192, 5), "p0-b": pattern(8192, 6), "p1-a": pattern(8192, 7), "p1-b": pattern(8192, 8)}
	for k, v := range vals {
		if err := owner.PutValue(ctx, k, v, PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	snap := reader.PrepareSnapshot(ctx, []string{"p0-a", "p0-b", "p1-a", "p1-b", "p1-missing"})
	// two registered buffers next to each other in memory: a row past the end of the first
	// must not spill into the second
	mem := bytes.Repeat([]byte{0xA5}, 8192)
	bufs := [][]byte{mem[:4096:4096], mem[4096:]}
	ptrs := []uintptr{memview.Addr(bufs[0]), memview.Addr(bufs[1])}
	for _, p := range ptrs {
		if err := reader.RegisterBuffer(p, 4096); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { reader.UnregisterBuffer(p) })
	}
	// 8 ranges of 32 bytes, destinations reversed with 32-byte holes, sources every 512 bytes
	var dst, src, size []uint64
	for i := range 8 {
		dst, src, size = append(dst, uint64((7-i)*64)), append(src, uint64(i*512)), append(size, 32)
	}
	tp, err := NewRangeTemplate(dst, src, size)
	if err != nil {
		t.Fatal(err)
	}
	ok, err := snap.ReadTemplates(ctx, []*RangeTemplate{tp, tp, tp}, ptrs, []uint64{1, 0, 0}, []string{"p0-a", "p1-b", "p0-b"}, []uint64{3, 1000, 2000}, false)
	if err != nil || fmt.Sprint(ok) != "[true true true]" {
		t.Fatalf("templates: %v %v", ok, err)
	}
	want := [][]byte{bytes.Repeat([]byte{0xA5}, 4096), bytes.Repeat([]byte{0xA5}, 4096)}
	for _, row := range []struct {
		buf   int
		key   string
		shift int
	}{{1, "p0-a", 3}, {0, "p1-b", 1000}, {0, "p0-b", 2000}} {
		for i := range dst {
			copy(want[row.buf][int(dst[i])+row.shift:], vals[row.key][src[i]:src[i]+32])
		}
	}
	if !bytes.Equal(bufs[0], want[0]) || !bytes.Equal(bufs[1], want[1]) {
		t.Fatal("template rows: bytes differ")
	}
	// rows that are false, the buffer untouched: missing key, destination past the buffer,
	// source past the object
	past, _ := NewRangeTemplate([]uint64{0, 32}, []uint64{8192 - 32, 8192 - 16}, []uint64{32, 32})
	ok, err = snap.ReadTemplates(ctx, []*RangeTemplate{tp, tp, past}, ptrs, []uint64{0, 0, 0}, []string{"p1-missing", "p0-a", "p0-a"}, []uint64{0, 4000, 0}, false)
	if err != nil || fmt.Sprint(ok) != "[false false false]" || !bytes.Equal(bufs[0], want[0]) || !bytes.Equal(bufs[1], want[1]) {
		t.Fatalf("false rows: %v %v", ok, err)
	}
	for _, c := range []struct {
		ts    []*RangeTemplate
		idx   []uint64
		keys  []string
		trans []uint64
		msg   string
	}{
		{[]*RangeTemplate{tp}, []uint64{2}, []string{"p0-a"}, []uint64{0}, "Ranged-read template batch exceeds bounds"},
		{[]*RangeTemplate{tp}, []uint64{0}, []string{"p0-a"}, []uint64{math.MaxUint64}, "Ranged-read template batch exceeds bounds"},
		{[]*RangeTemplate{nil}, []uint64{0}, []string{"p0-a"}, []uint64{0}, "Ranged-read template batch exceeds bounds"},
		{nil, []uint64{0}, []string{"p0-a"}, []uint64{0}, "Ranged-read template batch shape differs"},
	} {
		if _, err := snap.ReadTemplates(ctx, c.ts, ptrs, c.idx, c.keys, c.trans, false); !strings.Contains(fmt.Sprint(err), c.msg) {
			t.Errorf("template batch: %v, want %q", err, c.msg)
		}
	}
	if ok, err := snap.ReadTemplates(ctx, nil, ptrs, nil, nil, nil, false); err != nil || len(ok) != 0 {
		t.Fatalf("empty batch: %v %v", ok, err)
	}

	// plans: object "-a" interleaved with "-b", 16-byte runs, region 0 and 1
	var ts []*RangeTemplate
	var suffixes []string
	var regions []uint64
	for i := range 4 {
		for j, sfx := range []string{"-a", "-b"} {
			x, _ := NewRangeTemplate([]uint64{uint64((2*i + j) * 16), uint64((2*i+j)*16 + 8)}, []uint64{uint64(i * 100), uint64(i*100 + 8)}, []uint64{8, 8})
			ts, suffixes, regions = append(ts, x), append(suffixes, sfx), append(regions, uint64(j))
		}
	}
	plan, err := NewRangePlan(ts, suffixes, regions)
	if err != nil {
		t.Fatal(err)
	}
	for i := range bufs {
		copy(bufs[i], bytes.Repeat([]byte{0xA5}, 4096))
	}
	ok, err = snap.ReadPlans(ctx, []*RangePlan{plan, plan}, ptrs, []string{"p1", "p0"}, [][]uint64{{0, 512}, {1024, 2048}}, false)
	if err != nil || fmt.Sprint(ok) != "[true true]" {
		t.Fatalf("plans: %v %v", ok, err)
	}
	want = [][]byte{bytes.Repeat([]byte{0xA5}, 4096), bytes.Repeat([]byte{0xA5}, 4096)}
	for page, prefix := range []string{"p1", "p0"} {
		shifts := [][]int{{0, 512}, {1024, 2048}}[page]
		for i := range 4 {
			for j, sfx := range []string{"-a", "-b"} {
				off := (2*i+j)*16 + shifts[j]
				copy(want[j][off:off+16], vals[prefix+sfx][i*100:i*100+16])
			}
		}
	}
	if !bytes.Equal(bufs[0], want[0]) || !bytes.Equal(bufs[1], want[1]) {
		t.Fatal("plan pages: bytes differ")
	}
	missing, _ := NewRangePlan(ts[:1], []string{"-missing"}, []uint64{0})
	if ok, err := snap.ReadPlans(ctx, []*RangePlan{missing, plan}, ptrs, []string{"p1", "p0"}, [][]uint64{{0, 0}, {1024, 2048}}, false); err != nil || fmt.Sprint(ok) != "[false true]" {
		t.Fatalf("plan with a missing object: %v %v", ok, err)
	}
	for _, c := range []struct {
		plans    []*RangePlan
		prefixes []string
		trans    [][]uint64
		msg      string
	}{
		{[]*RangePlan{plan}, nil, [][]uint64{{0, 0}}, "Ranged-read plan batch shape differs"},
		{[]*RangePlan{nil}, []string{"p0"}, [][]uint64{{0, 0}}, "Ranged-read plan batch exceeds bounds"},
		{[]*RangePlan{plan}, []string{"p0"}, [][]uint64{{0}}, "Ranged-read plan batch exceeds bounds"},
		{[]*RangePlan{plan}, []string{"p0"}, [][]uint64{{0, math.MaxUint64}}, "Ranged-read plan translation exceeds bounds"},
	} {
		if _, err := snap.ReadPlans(ctx, c.plans, ptrs, c.prefixes, c.trans, false); !strings.Contains(fmt.Sprint(err), c.msg) {
			t.Errorf("plan batch: %v, want %q", err, c.msg)
		}
	}
	if _, err := snap.ReadPlans(ctx, []*RangePlan{plan}, ptrs[:1], []string{"p0"}, [][]uint64{{0}}, false); !strings.Contains(fmt.Sprint(err), "translation exceeds bounds") {
		t.Errorf("plan object in a region past the buffers: %v", err)
	}
}

// TestSnapshotStaging: objects the G3 tier holds alone (evicted from memory) read through a
// staging buffer with allowStaging, refused without it.
func TestSnapshotStaging(t *testing.T) {
	if testing.Short() {
		t.Skip("fills memory until objects move to the G3 tier")
	}
	root := t.TempDir()
	_, addr := startMaster(t, func(c *master.Config) {
		c.RootFSDir, c.EvictionHighWatermarkRatio, c.EvictionRatio = root, 0.5, 0.2
	})
	holder := newClient(t, addr, 4<<20)
	reader := newClient(t, addr, 0)
	ctx := context.Background()
	const n, size = 16, 256 << 10
	for i := range n {
		if err := reader.PutValue(ctx, fmt.Sprintf("s%d", i), pattern(size, byte(i)), PutOptions{}); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	_ = holder
	key, idx := "", 0
	for deadline := time.Now().Add(20 * time.Second); key == "" && time.Now().Before(deadline); {
		for i := range n {
			reps, err := reader.ReplicaDesc(ctx, fmt.Sprintf("s%d", i))
			if err == nil && len(reps) == 1 && reps[0].IsDisk() {
				key, idx = fmt.Sprintf("s%d", i), i
				break
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if key == "" {
		t.Fatal("no object moved to the G3 tier alone")
	}
	val := pattern(size, byte(idx))
	snap := reader.PrepareSnapshot(ctx, []string{key})
	out := registeredBuf(t, reader, 4096, 0xA5)
	groups := []RangeGroup{{Key: key, Frags: []Range{frag(out, 0, 1000, 100), frag(out, 200, size-50, 50)}}, {Key: key, Frags: []Range{frag(out, 300, 7, 9)}}}
	_, errs := snap.GetRanges(ctx, groups, false)
	wantCode(t, "disk-only object without staging", errs[0][0], api.REPLICA_NOT_FOUND)
	if !bytes.Equal(out, bytes.Repeat([]byte{0xA5}, len(out))) {
		t.Fatal("refused read wrote")
	}
	got, errs := snap.GetRanges(ctx, groups, true)
	if errs[0][0] != nil || errs[0][1] != nil || errs[1][0] != nil || got[0][0] != 100 || got[1][0] != 9 {
		t.Fatalf("staged read: %v %v", got, errs)
	}
	want := bytes.Repeat([]byte{0xA5}, len(out))
	copy(want[0:], val[1000:1100])
	copy(want[200:], val[size-50:])
	copy(want[300:], val[7:16])
	if !bytes.Equal(out, want) {
		t.Fatal("staged read: bytes differ")
	}
	tp, _ := NewRangeTemplate([]uint64{64, 0}, []uint64{0, size - 64}, []uint64{64, 64})
	clear(out)
	ok, err := snap.ReadTemplates(ctx, []*RangeTemplate{tp}, []uintptr{memview.Addr(out)}, []uint64{0}, []string{key}, []uint64{1024}, true)
	if err != nil || !ok[0] || !bytes.Equal(out[1024:1088], val[size-64:]) || !bytes.Equal(out[1088:1152], val[:64]) {
		t.Fatalf("staged template: %v %v", ok, err)
	}
}
