//go:build !race

package rawsys

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// read is the raw read(2) of a non-blocking descriptor; b is not empty.
func read(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(n), e
}

// writev writes bufs (the first not empty, at most iovMax) in one raw system call.
func writev(fd uintptr, bufs [][]byte) (int, syscall.Errno) {
	var small [16]unix.Iovec
	iov := small[:0]
	if len(bufs) > len(small) {
		iov = make([]unix.Iovec, 0, len(bufs))
	}
	for _, b := range bufs {
		if len(b) > 0 {
			v := unix.Iovec{Base: &b[0]}
			v.SetLen(len(b))
			iov = append(iov, v)
		}
	}
	n, _, e := unix.RawSyscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
	return int(n), e
}
