package client

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// Linux madvise advice values (5.14+) that fault a range in with one system call.
const (
	madvPopulateRead  = 22
	madvPopulateWrite = 23
)

// populateMin is the smallest destination populated before a copy. Smaller buffers mostly come
// from memory the allocator reuses (already faulted in), where populating only costs a page-table
// walk; from 32 MiB on (glibc's largest mmap threshold) a buffer is a fresh mapping every time.
const populateMin = 32 << 20

var pageSize = uintptr(os.Getpagesize())

// populate faults [addr, addr+n) in (page tables and, for write, backing pages) with one
// madvise instead of one fault per 4 KiB page during a copy. Best effort: kernels without
// MADV_POPULATE_* (before 5.14) return EINVAL and the copy faults pages in as before.
func populate(addr uintptr, n uint64, write bool) {
	if n == 0 {
		return
	}
	start := addr &^ (pageSize - 1)
	end := (addr + uintptr(n) + pageSize - 1) &^ (pageSize - 1)
	advice := madvPopulateRead
	if write {
		advice = madvPopulateWrite
	}
	syscall.Syscall(syscall.SYS_MADVISE, start, end-start, uintptr(advice))
}

// populateView is populate over a slice.
func populateView(b []byte, write bool) {
	if len(b) >= populateMin {
		populate(uintptr(unsafe.Pointer(unsafe.SliceData(b))), uint64(len(b)), write)
	}
}

// prefaultSegment reports whether a mounted segment of n bytes is populated when allocated, so
// puts do not pay a page fault per 4 KiB of fresh replica memory (as RDMA registration pins and
// faults in upstream Mooncake's segments). It is skipped when the segment exceeds half of the
// memory available now (committing it all up front could push the host into reclaim or OOM);
// MC_STORE_PREFAULT=0 turns it off, =1 forces it.
func prefaultSegment(n uint64) bool {
	switch os.Getenv("MC_STORE_PREFAULT") {
	case "0":
		return false
	case "1":
		return true
	}
	avail, ok := memAvailable()
	return ok && n <= avail/2
}

// memAvailable is MemAvailable from /proc/meminfo, in bytes.
func memAvailable() (uint64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0, false
			}
			kb, err := strconv.ParseUint(f[0], 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}
