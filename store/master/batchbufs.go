package master

import "sync"

// batchBufs keeps the slices of batch entries and of their results for reuse (Server.batch):
// a batch call of n keys would otherwise leave n Entry and n Result structs (about 500 bytes a
// key) to the garbage collector, whose marking of a large state is most of a busy master's
// CPU under load (docs/performance.md, "Small operations on a store in use").
type batchBufs struct {
	mu   sync.Mutex
	free []batchBuf // at most keptBatchBufs
}

// batchBuf is one pair of slices, kept together.
type batchBuf struct {
	entries []Entry
	results []Result
}

const (
	// keptBatchBufs: pairs kept (one per batch call in flight, as many as connections
	// calling at once, up to this).
	keptBatchBufs = 8
	// maxBatchBuf: the slices of larger batches are not kept (a rare huge batch does not pin
	// its memory).
	maxBatchBuf = 1024
)

// get returns n entries to fill and room for their n results.
func (b *batchBufs) get(n int) ([]Entry, []Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := len(b.free) - 1; i >= 0; i-- {
		if p := b.free[i]; cap(p.entries) >= n && cap(p.results) >= n {
			b.free = append(b.free[:i], b.free[i+1:]...)
			return p.entries[:n], p.results[:0]
		}
	}
	return make([]Entry, n, max(n, 64)), make([]Result, 0, max(n, 64))
}

// put takes back the slices of a batch call that is over (entries and results as long as the
// batch), cleared, so that what they pointed to can be collected. Only their length is
// cleared: past it a kept slice is still zero from its last put (a batch writes only its own
// n entries and results), so a small batch costs a small clear.
func (b *batchBufs) put(entries []Entry, results []Result) {
	if cap(entries) > maxBatchBuf || cap(results) > maxBatchBuf || cap(entries) == 0 || cap(results) == 0 {
		return
	}
	clear(entries)
	clear(results)
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.free) < keptBatchBufs {
		b.free = append(b.free, batchBuf{entries: entries[:0], results: results[:0]})
	}
}
