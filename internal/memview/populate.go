package memview

import (
	"os"
	"syscall"
	"unsafe"
)

// Linux madvise advice values (5.14+) that fault a range in with one system call.
const (
	madvPopulateRead  = 22
	madvPopulateWrite = 23
)

var pageSize = uintptr(os.Getpagesize())

// Populate faults the pages of [addr, addr+n) in (page tables and, for write, backing pages)
// with one madvise instead of one fault per 4 KiB page on first touch. Kernels without
// MADV_POPULATE_* (before 5.14) answer syscall.EINVAL; callers treat it as best effort.
func Populate(addr uintptr, n uint64, write bool) error {
	if n == 0 {
		return nil
	}
	start := addr &^ (pageSize - 1)
	end := (addr + uintptr(n) + pageSize - 1) &^ (pageSize - 1)
	advice := madvPopulateRead
	if write {
		advice = madvPopulateWrite
	}
	if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, start, end-start, uintptr(advice)); e != 0 {
		return e
	}
	return nil
}

// Resident returns mincore(2)'s answer for b (page-aligned): one byte per page, bit 0 set when
// the page is in memory. Asking does not fault anything in.
func Resident(b []byte) ([]byte, error) {
	vec := make([]byte, (len(b)+int(pageSize)-1)/int(pageSize))
	if len(b) == 0 {
		return vec, nil
	}
	if _, _, e := syscall.Syscall(syscall.SYS_MINCORE, Addr(b), uintptr(len(b)), uintptr(unsafe.Pointer(unsafe.SliceData(vec)))); e != 0 {
		return nil, e
	}
	return vec, nil
}
