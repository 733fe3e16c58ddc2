package master

import "sort"

// allocAlign is the granularity of segment allocations: every replica starts on a cache line.
const allocAlign = 64

func alignUp(n uint64) uint64 { return (n + allocAlign - 1) &^ (allocAlign - 1) }

type span struct{ off, len uint64 }

// rangeAllocator hands out aligned ranges of [0, size) first-fit from a sorted, coalesced free
// list. It is deterministic (same calls, same offsets), which the state machine relies on. It is
// written by hand because it must be exactly reproducible on replay and needs no more than this.
type rangeAllocator struct {
	size uint64
	used uint64
	free []span // sorted by off, never adjacent
}

func newRangeAllocator(size uint64) *rangeAllocator {
	size &^= allocAlign - 1
	a := &rangeAllocator{size: size}
	if size > 0 {
		a.free = []span{{0, size}}
	}
	return a
}

// alloc returns the offset of n bytes (rounded up to allocAlign).
func (a *rangeAllocator) alloc(n uint64) (uint64, bool) {
	n = alignUp(n)
	if n == 0 || n > a.size-a.used {
		return 0, false
	}
	for i := range a.free {
		f := &a.free[i]
		if f.len < n {
			continue
		}
		off := f.off
		f.off += n
		f.len -= n
		if f.len == 0 {
			a.free = append(a.free[:i], a.free[i+1:]...)
		}
		a.used += n
		return off, true
	}
	return 0, false
}

// release returns [off, off+n) (n as passed to alloc) to the free list.
func (a *rangeAllocator) release(off, n uint64) {
	n = alignUp(n)
	if n == 0 {
		return
	}
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].off > off })
	a.free = append(a.free, span{})
	copy(a.free[i+1:], a.free[i:])
	a.free[i] = span{off, n}
	a.used -= n
	// merge with the next, then with the previous
	if i+1 < len(a.free) && a.free[i].off+a.free[i].len == a.free[i+1].off {
		a.free[i].len += a.free[i+1].len
		a.free = append(a.free[:i+1], a.free[i+2:]...)
	}
	if i > 0 && a.free[i-1].off+a.free[i-1].len == a.free[i].off {
		a.free[i-1].len += a.free[i].len
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
}

func (a *rangeAllocator) largestFree() uint64 {
	var m uint64
	for _, f := range a.free {
		m = max(m, f.len)
	}
	return m
}
