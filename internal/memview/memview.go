// Package memview turns raw addresses (tensor data, registered buffers, mmaps that are not Go
// memory) into slices and pointers. It is the one place that converts a uintptr back to a
// pointer, so `go vet`'s unsafeptr check stays meaningful elsewhere. It also faults such
// memory in ahead of use and asks which of its pages are resident (populate.go).
//
// The rule for callers: the memory must stay mapped while the returned slice is used, and it
// must not be Go-heap memory (which the garbage collector may move or free).
package memview

import "unsafe"

// Pointer returns addr as an unsafe.Pointer.
func Pointer(addr uintptr) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&addr))
}

// Bytes returns the n bytes at addr as a slice; n == 0 or addr == 0 gives nil.
func Bytes(addr uintptr, n int) []byte {
	if n <= 0 || addr == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(Pointer(addr)), n)
}

// Addr returns the address of the first byte of b (0 for an empty slice).
func Addr(b []byte) uintptr {
	if len(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}

// Uint32 returns a pointer to the 32-bit word at addr (which must be 4-byte aligned).
func Uint32(addr uintptr) *uint32 {
	return (*uint32)(Pointer(addr))
}
