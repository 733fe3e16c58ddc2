package shm

import (
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/internal/memview"
)

// Page tables of a peer's buffer.
//
// The owner's pages are resident (store segments are pre-faulted when mounted), but this
// process's mapping of them starts with empty page tables, and each first touch of a 4 KiB page
// takes a fault; on a virtual machine the faults cost several times the copy itself, so a copy
// into fresh replica memory ran far below memcpy speed (figures in docs/performance.md). A
// mapping is therefore filled in two ways:
//
//   - in the background, once, from the moment it is made: resident pages only (mincore), so a
//     peer never commits memory its owner has not touched;
//   - on use, per chunk of fillChunk bytes, with one MADV_POPULATE_WRITE for the chunk, when the
//     background pass has not reached it yet.
//
// Both mark the chunks they completed, so a chunk is filled once (populating an already-filled
// range is not free: it walks every page again). Kernels without MADV_POPULATE_* (before 5.14)
// answer EINVAL; the transport then stops trying and copies fault pages in as before.

const (
	fillChunk          = 1 << 20
	backgroundFillStep = 16 << 20 // the background pass takes the mapping's lock once per step
)

// fillUnsupported is set when the kernel refused MADV_POPULATE_WRITE.
var fillUnsupported atomic.Bool

// filled is a bitmap of chunks of a mapping whose page tables are in place.
type filled []atomic.Uint64

func newFilled(size int) filled {
	chunks := (size + fillChunk - 1) / fillChunk
	return make(filled, (chunks+63)/64)
}

func (f filled) has(c int) bool { return f[c/64].Load()&(1<<(c%64)) != 0 }
func (f filled) set(c int)      { f[c/64].Or(1 << (c % 64)) }

// chunk returns the bytes of chunk c of m.
func (m *mapping) chunk(c int) []byte {
	return m.mem[c*fillChunk : min((c+1)*fillChunk, len(m.mem))]
}

// fill makes sure the page tables of mem[off:off+n] are in place, populating whole chunks that
// are not marked yet. mem must stay mapped during the call (the caller holds the mapping).
func (m *mapping) fill(off, n uint64) {
	if n == 0 || fillUnsupported.Load() {
		return
	}
	for c := int(off / fillChunk); uint64(c)*fillChunk < off+n; c++ {
		if m.filled.has(c) {
			continue
		}
		if !populateWrite(m.chunk(c)) {
			return
		}
		m.filled.set(c)
	}
}

// populateWrite populates b for writing and reports whether that worked; a kernel that does not
// know MADV_POPULATE_WRITE turns filling off for the process.
func populateWrite(b []byte) bool {
	err := memview.Populate(memview.Addr(b), uint64(len(b)), true)
	if err == unix.EINVAL {
		fillUnsupported.Store(true)
	}
	return err == nil
}

// residentRuns calls fn for each maximal run of resident pages of b (page-aligned) and reports
// whether all of b was resident.
func residentRuns(b []byte, fn func([]byte)) bool {
	vec, err := memview.Resident(b)
	if err != nil {
		return false
	}
	page := unix.Getpagesize()
	all := true
	start := -1
	for i := 0; i <= len(vec); i++ {
		in := i < len(vec) && vec[i]&1 != 0
		if !in && i < len(vec) {
			all = false
		}
		switch {
		case in && start < 0:
			start = i
		case !in && start >= 0:
			fn(b[start*page : min(i*page, len(b))])
			start = -1
		}
	}
	return all
}

// backgroundFill fills m's resident pages, step by step, while m stays in use; it holds m (so
// it cannot be unmapped under the pass) only during each step, and ends when m is dropped
// (Close drops every mapping).
func (t *Transport) backgroundFill(m *mapping) {
	defer close(m.bgDone)
	for lo := 0; lo < len(m.mem) && !fillUnsupported.Load(); lo += backgroundFillStep {
		t.mu.Lock()
		if m.dropped {
			t.mu.Unlock()
			return
		}
		m.holds++
		t.mu.Unlock()
		for c := lo / fillChunk; c*fillChunk < min(lo+backgroundFillStep, len(m.mem)); c++ {
			if m.filled.has(c) {
				continue
			}
			ok := true
			all := residentRuns(m.chunk(c), func(run []byte) { ok = populateWrite(run) && ok })
			if all && ok {
				m.filled.set(c)
			}
		}
		t.release(m)
	}
}
