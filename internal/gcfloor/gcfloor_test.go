package gcfloor

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestPercent(t *testing.T) {
	for _, c := range []struct {
		live, floor uint64
		want        int
	}{
		{8 << 20, 64 << 20, 800},       // next collection at live + floor
		{64 << 20, 64 << 20, 100},      // at 2 x live: Go's default
		{1 << 30, 64 << 20, 100},       // a large heap paces as before
		{0, 64 << 20, 1600},            // as for 4 MiB: the runtime's least goal, 4 MiB x 16, is the floor
		{4 << 20, 1 << 40, maxPercent}, // bounded
	} {
		if got := Percent(c.live, c.floor); got != c.want {
			t.Errorf("Percent(%d, %d) = %d, want %d", c.live, c.floor, got, c.want)
		}
	}
}

// sink keeps the allocations below from being optimised away.
var sink []byte

// With a 64 MiB floor, allocating 512 MiB of short-lived garbage takes a handful of
// collections, where Go's default pacing (a 4 MiB minimum heap) takes more than a hundred;
// the percent stays set by the floor after every collection.
func TestFloorSpacesCollections(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	Start(64 << 20)
	runtime.GC() // a collection with the floor's percent in place
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 512 * 16 {
		sink = make([]byte, 64<<10)
	}
	runtime.ReadMemStats(&after)
	n := after.NumGC - before.NumGC
	if n < 4 || n > 16 {
		t.Fatalf("%d collections for 512 MiB allocated under a 64 MiB floor, want 4 to 16", n)
	}
	if p := debug.SetGCPercent(100); p <= 100 {
		t.Fatalf("GC percent %d after the collections, want the floor's (above 100 for this test's heap, under 64 MiB)", p)
	}
	t.Logf("%d collections", n)
}
