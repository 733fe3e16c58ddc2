//go:build race

package rawsys

import (
	"errors"
	"syscall"
)

// Under the race detector, the ordinary system calls of package syscall: they tell the
// detector that a write to a socket happens before the peer's read of those bytes (as for
// package net), which orders the goroutine serving a request after the one that sent it. With
// raw system calls the detector would see no such order and report races that are not there.
func read(fd uintptr, b []byte) (int, syscall.Errno) {
	n, err := syscall.Read(int(fd), b)
	return max(n, 0), errnoOf(err)
}

func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if err != nil && !errors.As(err, &e) {
		return syscall.EIO
	}
	return e
}

// writev writes the buffers one syscall.Write each (as far as the socket takes them), so
// that the detector sees each as a write that happens before the peer's read.
func writev(fd uintptr, bufs [][]byte) (int, syscall.Errno) {
	done := 0
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		n, err := syscall.Write(int(fd), b)
		if err != nil {
			if done > 0 {
				return done, 0
			}
			return 0, errnoOf(err)
		}
		done += n
		if n < len(b) {
			break
		}
	}
	return done, 0
}
