//go:build race

package rawsys

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// Under the race detector, the ordinary system calls of package syscall: they tell the
// detector that a write to a socket happens before the peer's read of those bytes (as for
// package net), which orders the goroutine serving a request after the one that sent it. With
// raw system calls the detector would see no such order and report races that are not there.
func read(fd uintptr, b []byte) (int, syscall.Errno) {
	n, err := syscall.Read(int(fd), b)
	return max(n, 0), errnoOf(err)
}

func write(fd uintptr, b []byte) (int, syscall.Errno) {
	n, err := syscall.Write(int(fd), b)
	return max(n, 0), errnoOf(err)
}

func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if err != nil && !errors.As(err, &e) {
		return syscall.EIO
	}
	return e
}

func writev(fd uintptr, bufs [][]byte) (int, syscall.Errno) {
	n, err := unix.Writev(int(fd), bufs)
	return max(n, 0), errnoOf(err)
}
