//go:build cgo && !mooncake_purego

package reduce

/*
#cgo CFLAGS: -O3 -std=gnu11 -Wall
#cgo noescape mc_red_reduce
#cgo nocallback mc_red_reduce
#cgo noescape mc_red_reduce2
#cgo nocallback mc_red_reduce2
#cgo noescape mc_red_divide
#cgo nocallback mc_red_divide
#cgo noescape mc_copy_stream
#cgo nocallback mc_copy_stream
#cgo noescape mc_red_narrow
#cgo nocallback mc_red_narrow
#include "kernels.h"
*/
import "C"

import (
	"runtime"
	"unsafe"
)

func bestLevel() level { return level(C.mc_red_best_level()) }

// availableLevels lists every level this build and CPU can run, lowest first.
func availableLevels() []level {
	var ls []level
	for l := levelGo; l <= bestLevel(); l++ {
		ls = append(ls, l)
	}
	return ls
}

// cgoPiece is the most bytes one call into C works on; longer work is several calls.
//
// Why: a call into C is a system call to Go's scheduler. One that is still running when the
// runtime's monitor thread (sysmon) looks twice, 20 µs or more apart, while other goroutines
// wait, has its P taken away and handed to another thread, which is woken for it; the caller
// then needs a P back when the call returns. A collective over the network reduces and copies
// 256 KiB chunks (30-60 µs each on the 2-core VM) while its sender and receiver goroutines are
// runnable, so most such calls were handed off, and each hand-off also kept the monitor polling
// every 20 µs. Pieces of 64 KiB take a few microseconds each and cost an extra call (tens of
// nanoseconds) per piece.
const cgoPiece = 64 << 10

func cReduce2(dst, src []byte, dt DType, op Op, l level) {
	es, _ := ElemSize(dt)
	for len(dst) > 0 {
		k := min(len(dst), cgoPiece)
		rc := C.mc_red_reduce2(unsafe.Pointer(unsafe.SliceData(dst)), unsafe.Pointer(unsafe.SliceData(src)),
			C.size_t(k/es), C.int(dt), C.int(op), C.int(l))
		if rc != 0 {
			panic("reduce: C kernel rejected validated arguments")
		}
		dst, src = dst[k:], src[k:]
	}
}

// maxStackSrcs sources fit in a stack array of pointers; more take an allocation.
const maxStackSrcs = 16

func cReduceMany(dst []byte, srcs [][]byte, dt DType, op Op, l level) {
	es, _ := ElemSize(dt)
	// The pointer array lives in Go memory, so cgo's rules want every pointer in it pinned.
	// Pinning memory that is not Go's (mapped shared buffers) is a no-op.
	var pin runtime.Pinner
	defer pin.Unpin()
	var stack [maxStackSrcs]unsafe.Pointer
	ptrs := stack[:0]
	if len(srcs) > maxStackSrcs {
		ptrs = make([]unsafe.Pointer, 0, len(srcs))
	}
	for _, s := range srcs {
		p := unsafe.Pointer(unsafe.SliceData(s))
		pin.Pin(p)
		ptrs = append(ptrs, p)
	}
	rc := C.mc_red_reduce(unsafe.Pointer(unsafe.SliceData(dst)), (*unsafe.Pointer)(unsafe.Pointer(&ptrs[0])),
		C.int(len(srcs)), C.size_t(len(dst)/es), C.int(dt), C.int(op), C.int(l))
	if rc != 0 {
		panic("reduce: C kernel rejected validated arguments")
	}
}

func cDivide(dst []byte, dt DType, n int, l level) {
	es, _ := ElemSize(dt)
	for len(dst) > 0 {
		k := min(len(dst), cgoPiece)
		rc := C.mc_red_divide(unsafe.Pointer(unsafe.SliceData(dst)), C.size_t(k/es), C.int(dt), C.double(n), C.int(l))
		if rc != 0 {
			panic("reduce: C kernel rejected validated arguments")
		}
		dst = dst[k:]
	}
}

// cNarrow converts float32 to float16/bfloat16 with level l's conversion code (test hook).
func cNarrow(dst []byte, src []float32, dt DType, l level) {
	if len(src) == 0 {
		return
	}
	if C.mc_red_narrow(unsafe.Pointer(unsafe.SliceData(dst)), (*C.float)(unsafe.Pointer(unsafe.SliceData(src))),
		C.size_t(len(src)), C.int(dt), C.int(l)) != 0 {
		panic("reduce: bad narrow arguments")
	}
}

func cCopyStream(dst, src []byte) {
	for len(dst) > 0 {
		k := min(len(dst), cgoPiece)
		C.mc_copy_stream(unsafe.Pointer(unsafe.SliceData(dst)), unsafe.Pointer(unsafe.SliceData(src)), C.size_t(k))
		dst, src = dst[k:], src[k:]
	}
}
