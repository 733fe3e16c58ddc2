package tcp

import (
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// awaitSlice bounds how long a small run's caller waits for its answer in poll(2) before
// leaving the wait to the runtime's poller.
const awaitSlice = 10 * time.Millisecond

// awaitReadable sleeps in poll(2) on the calling thread until c has bytes to read, for at most
// max; the read that follows goes through the normal, deadline-aware path either way.
//
// Why: the answer to a small run (a 4 KiB get or put of the store) comes back within tens of
// microseconds, and its caller is often a foreign thread (Python's) that called into the
// library. Parked on the runtime's poller, that goroutine is woken by the thread in epoll_wait,
// which must then hand it back to the caller's thread (its goroutine is locked to it): two
// more context switches per run. Polling here, the kernel wakes the caller directly.
func awaitReadable(c net.Conn, max time.Duration) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		unix.Poll(fds, int(max/time.Millisecond)) // EINTR, a timeout: the read below waits
	})
}
