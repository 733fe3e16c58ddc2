package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

const (
	minPercent = 100     // Go's default: the floor never makes collections more frequent
	maxPercent = 100_000 // a bound for a nearly empty heap
	// minLive is Go's least heap goal at GOGC=100, which the runtime scales by the percent
	// (4 MiB x percent/100): below it the percent is computed as for minLive, so that the
	// least goal is the floor.
	minLive = 4 << 20
)

var started sync.Once

// Start sets the floor for the rest of the process's life; 0 does nothing. Only the first
// call counts.
func Start(floor uint64) {
	if floor == 0 {
		return
	}
	started.Do(func() {
		t := &tuner{floor: floor, live: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
		t.tune()
		t.arm()
	})
}

// tuner re-sets the GC percent after every collection: a sentinel object, unreachable from
// the start, has a cleanup that the runtime runs after the collection that found it dead;
// the cleanup tunes and arms a new sentinel.
type tuner struct {
	floor uint64
	live  []metrics.Sample
}

type sentinel struct{ _ *byte } // holds a pointer: never in the tiny allocator, whose objects may not be cleaned up

func (t *tuner) arm() {
	runtime.AddCleanup(new(sentinel), func(t *tuner) {
		t.tune()
		t.arm()
	}, t)
}

// tune sets the percent that puts the next collection at max(2 x live, live + floor).
func (t *tuner) tune() {
	metrics.Read(t.live)
	debug.SetGCPercent(Percent(t.live[0].Value.Uint64(), t.floor))
}

// Percent is the GC percent for a live heap of live bytes under floor.
func Percent(live, floor uint64) int {
	live = max(live, minLive)
	p := floor * 100 / live
	return int(min(max(p, minPercent), maxPercent))
}
