package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
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

// gogc is the GC percent in effect, read without changing it.
func gogc() uint64 {
	m := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(m)
	return m[0].Value.Uint64()
}

// After a collection the tuner sets the percent (never below 100, so a 99 set before the
// collection must go); then 512 MiB of short-lived garbage takes a handful of collections under
// a 64 MiB floor, where Go's default pacing (a 4 MiB minimum heap) takes more than a hundred.
// (How few depends on how much the collector finds live, which slow marking raises: only the
// upper bound is the floor's.)
func TestFloorSpacesCollections(t *testing.T) {
	Start(64 << 20)
	debug.SetGCPercent(99)
	runtime.GC()
	for deadline := time.Now().Add(30 * time.Second); gogc() == 99; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the GC percent was not set after a collection")
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 512 * 16 {
		sink = make([]byte, 64<<10)
	}
	runtime.ReadMemStats(&after)
	if n := after.NumGC - before.NumGC; n > 32 {
		t.Fatalf("%d collections for 512 MiB allocated under a 64 MiB floor, want at most 32", n)
	} else {
		t.Logf("%d collections", n)
	}
}
