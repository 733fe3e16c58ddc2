package api

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// rawConn is a client socket to the master that Go's network poller does not watch: reads and
// writes are plain system calls on a non-blocking descriptor, and a call that would block waits
// in poll(2) on the calling thread.
//
// Why: a framed call is a write and a read of a few hundred bytes on a socket used by one
// caller at a time, often a foreign thread (Python's) that called into the library. A socket of
// package net is registered with the runtime's epoll set, so every reply also wakes the thread
// that sleeps in epoll_wait (measured from Python: about two context switches and 30 µs of CPU
// per call, against one switch and 10 µs for a plain socket, docs/performance.md), although the
// caller reads the reply itself. Kept out of that set, a call costs what it costs any program:
// one write, one poll, one read.
//
// Deadlines (SetDeadline, SetReadDeadline, SetWriteDeadline) are honoured by bounding each poll
// by the deadline and by rawPollSlice, so that a deadline moved earlier by another goroutine
// (context.AfterFunc on a cancelled call) is noticed within one slice. Close may run while an
// operation waits: the descriptor is closed once the last operation in flight has returned, so
// it is never reused under a waiting poll.
type rawConn struct {
	local, remote net.Addr

	readDL, writeDL atomic.Int64 // unix nanoseconds; 0: none

	mu     sync.Mutex
	fd     int
	busy   int  // operations in flight (under mu)
	closed bool // Close was called (under mu)
}

// rawPollSlice bounds one poll(2): how late a deadline moved earlier by another goroutine is seen.
const rawPollSlice = 20 * time.Millisecond

// dialRaw connects to addr as net.Dialer would (ctx bounds the connect), then takes the socket
// out of the runtime's poller: its descriptor is duplicated and the net.Conn closed.
func dialRaw(ctx context.Context, addr string) (*rawConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close() // deregisters and closes the original; the duplicate stays open
	tc := c.(*net.TCPConn)
	if err := tc.SetNoDelay(true); err != nil {
		return nil, err
	}
	sc, err := tc.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var derr error
	if err := sc.Control(func(f uintptr) { fd, derr = unix.Dup(int(f)) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, os.NewSyscallError("dup", derr)
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("setnonblock", err)
	}
	return &rawConn{fd: fd, local: c.LocalAddr(), remote: c.RemoteAddr()}, nil
}

// acquire marks an operation in flight; false when the connection is closed.
func (c *rawConn) acquire() (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return -1, false
	}
	c.busy++
	return c.fd, true
}

func (c *rawConn) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.busy--
	if c.closed && c.busy == 0 && c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
}

// wait polls fd for events until it is ready, the deadline passes or the connection closes.
func (c *rawConn) wait(fd int, events int16, dl *atomic.Int64) error {
	for {
		c.mu.Lock()
		closed := c.closed
		c.mu.Unlock()
		if closed {
			return net.ErrClosed
		}
		slice := rawPollSlice
		if d := dl.Load(); d != 0 {
			left := time.Until(time.Unix(0, d))
			if left <= 0 {
				return os.ErrDeadlineExceeded
			}
			slice = min(slice, left)
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: events}}
		n, err := unix.Poll(fds, int((slice+time.Millisecond-1)/time.Millisecond))
		if err != nil && err != unix.EINTR {
			return os.NewSyscallError("poll", err)
		}
		if n > 0 {
			return nil // ready, or an error condition the next read/write reports
		}
	}
}

func (c *rawConn) Read(b []byte) (int, error) {
	fd, ok := c.acquire()
	if !ok {
		return 0, net.ErrClosed
	}
	defer c.release()
	if len(b) == 0 {
		return 0, nil
	}
	for {
		if d := c.readDL.Load(); d != 0 && time.Now().UnixNano() >= d {
			return 0, os.ErrDeadlineExceeded
		}
		n, err := unix.Read(fd, b)
		switch {
		case err == nil && n == 0:
			return 0, io.EOF
		case err == nil:
			return n, nil
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			if err := c.wait(fd, unix.POLLIN, &c.readDL); err != nil {
				return 0, err
			}
		default:
			return 0, os.NewSyscallError("read", err)
		}
	}
}

func (c *rawConn) Write(b []byte) (int, error) {
	fd, ok := c.acquire()
	if !ok {
		return 0, net.ErrClosed
	}
	defer c.release()
	done := 0
	for done < len(b) {
		if d := c.writeDL.Load(); d != 0 && time.Now().UnixNano() >= d {
			return done, os.ErrDeadlineExceeded
		}
		n, err := unix.Write(fd, b[done:])
		switch {
		case err == nil:
			done += n
		case err == unix.EINTR:
		case err == unix.EAGAIN:
			if err := c.wait(fd, unix.POLLOUT, &c.writeDL); err != nil {
				return done, err
			}
		default:
			return done, os.NewSyscallError("write", err)
		}
	}
	return done, nil
}

// Close closes the connection; an operation waiting on it returns net.ErrClosed within
// rawPollSlice.
func (c *rawConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return net.ErrClosed
	}
	c.closed = true
	if c.busy == 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
	return nil
}

func (c *rawConn) LocalAddr() net.Addr  { return c.local }
func (c *rawConn) RemoteAddr() net.Addr { return c.remote }

func deadlineNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func (c *rawConn) SetDeadline(t time.Time) error {
	c.readDL.Store(deadlineNanos(t))
	c.writeDL.Store(deadlineNanos(t))
	return nil
}

func (c *rawConn) SetReadDeadline(t time.Time) error {
	c.readDL.Store(deadlineNanos(t))
	return nil
}

func (c *rawConn) SetWriteDeadline(t time.Time) error {
	c.writeDL.Store(deadlineNanos(t))
	return nil
}

// SyscallConn gives Control access to the descriptor (framedSock's hang-up check); it has no
// Read or Write (the connection does its own).
func (c *rawConn) SyscallConn() (syscall.RawConn, error) { return rawControl{c}, nil }

type rawControl struct{ c *rawConn }

func (r rawControl) Control(f func(fd uintptr)) error {
	fd, ok := r.c.acquire()
	if !ok {
		return net.ErrClosed
	}
	defer r.c.release()
	f(uintptr(fd))
	return nil
}

var errRawNoRW = errors.New("rawConn: use the connection's own Read and Write")

func (rawControl) Read(func(fd uintptr) bool) error  { return errRawNoRW }
func (rawControl) Write(func(fd uintptr) bool) error { return errRawNoRW }
