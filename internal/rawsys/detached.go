package rawsys

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Detached is a TCP socket that Go's network poller does not watch: reads and writes are
// system calls on a non-blocking descriptor (raw ones, as [Conn]'s), and a call that would block
// waits in poll(2) on the calling thread.
//
// Why: some sockets are used by one caller at a time that writes a request and reads its answer
// itself, often a foreign thread (Python's) that called into the library: the store's framed
// calls to the master, the engine's tcp runs (a store's get or put reading and writing a
// holder's memory). A socket of package net is registered with the runtime's epoll set, so every
// answer also wakes the thread that sleeps in epoll_wait (measured from Python: about two
// context switches and 30 µs of CPU per call, against one switch and 10 µs for a plain socket,
// docs/performance.md), although the caller reads the answer itself. Kept out of that set, a
// call costs what it costs any program: one write, one poll, one read. A socket read by a
// goroutine of its own (a server's connection, an engine stream's answers) is better left to
// the poller: the goroutine then parks without holding a thread.
//
// Deadlines (SetDeadline, SetReadDeadline, SetWriteDeadline) are honoured by bounding each poll
// by the deadline and by detachedPollSlice, so that a deadline moved earlier by another goroutine
// (context.AfterFunc on a cancelled call) is noticed within one slice. Close may run while an
// operation waits: the descriptor is closed once the last operation in flight has returned, so
// it is never reused under a waiting poll.
type Detached struct {
	local, remote net.Addr

	readDL, writeDL atomic.Int64 // unix nanoseconds; 0: none

	mu     sync.Mutex
	fd     int
	busy   int  // operations in flight (under mu)
	closed bool // Close was called (under mu)
}

// detachedPollSlice bounds one poll(2): how late a deadline moved earlier by another goroutine is seen.
const detachedPollSlice = 20 * time.Millisecond

// DialDetached connects to addr as net.Dialer would (ctx bounds the connect), with Nagle's
// algorithm off, and detaches the socket (Detach).
func DialDetached(ctx context.Context, addr string) (*Detached, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if err := c.(*net.TCPConn).SetNoDelay(true); err != nil {
		c.Close()
		return nil, err
	}
	return Detach(c)
}

// Detach takes the socket of c (a TCP connection of package net) out of the runtime's poller:
// its descriptor is duplicated and c closed, also when Detach fails. Bytes c had read ahead
// are not carried over (package net reads nothing ahead; a bufio.Reader over c would have).
func Detach(c net.Conn) (*Detached, error) {
	defer c.Close() // deregisters and closes the original; the duplicate stays open
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil, fmt.Errorf("rawsys: cannot detach a %T", c)
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
	return &Detached{fd: fd, local: c.LocalAddr(), remote: c.RemoteAddr()}, nil
}

// acquire marks an operation in flight; false when the connection is closed.
func (c *Detached) acquire() (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return -1, false
	}
	c.busy++
	return c.fd, true
}

func (c *Detached) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.busy--
	if c.closed && c.busy == 0 && c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
}

// wait polls fd for events until it is ready, the deadline passes or the connection closes.
func (c *Detached) wait(fd int, events int16, dl *atomic.Int64) error {
	for {
		c.mu.Lock()
		closed := c.closed
		c.mu.Unlock()
		if closed {
			return net.ErrClosed
		}
		slice := detachedPollSlice
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

func (c *Detached) Read(b []byte) (int, error) {
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
		n, err := read(uintptr(fd), b)
		switch {
		case err == 0 && n == 0:
			return 0, io.EOF
		case err == 0:
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

// ReadFull reads exactly len(b) bytes, as io.ReadFull would. While it waits for more than
// lowatFrom bytes it asks the kernel (SO_RCVLOWAT) to report the socket readable only once up
// to lowatMax of them are there, so that a large payload arriving a few segments at a time
// wakes the caller once per lowatMax rather than at every segment.
func (c *Detached) ReadFull(b []byte) (int, error) {
	fd, ok := c.acquire()
	if !ok {
		return 0, net.ErrClosed
	}
	defer c.release()
	done := 0
	lowat := 1
	defer func() {
		if lowat != 1 {
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1)
		}
	}()
	for done < len(b) {
		if d := c.readDL.Load(); d != 0 && time.Now().UnixNano() >= d {
			return done, os.ErrDeadlineExceeded
		}
		n, err := read(uintptr(fd), b[done:])
		switch {
		case err == 0 && n == 0 && done == 0:
			return 0, io.EOF
		case err == 0 && n == 0:
			return done, io.ErrUnexpectedEOF
		case err == 0:
			done += n
		case err == unix.EINTR:
		case err == unix.EAGAIN:
			want := 1
			if left := len(b) - done; left > lowatFrom {
				want = min(left, lowatMax)
			}
			if want != lowat && unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVLOWAT, want) == nil {
				lowat = want
			}
			if err := c.wait(fd, unix.POLLIN, &c.readDL); err != nil {
				return done, err
			}
		default:
			return done, os.NewSyscallError("read", err)
		}
	}
	return done, nil
}

// lowatFrom and lowatMax bound ReadFull's low-water mark (see there).
const (
	lowatFrom = 32 << 10
	lowatMax  = 256 << 10
)

func (c *Detached) Write(b []byte) (int, error) {
	v := net.Buffers{b}
	n, err := c.writeBuffers(&v)
	return int(n), err
}

// writeBuffers is WriteBuffers for c: writev(2) as far as the socket takes the buffers,
// waiting in poll(2) while its send buffer is full.
func (c *Detached) writeBuffers(v *net.Buffers) (int64, error) {
	fd, ok := c.acquire()
	if !ok {
		return 0, net.ErrClosed
	}
	defer c.release()
	var total int64
	for len(*v) > 0 {
		if d := c.writeDL.Load(); d != 0 && time.Now().UnixNano() >= d {
			return total, os.ErrDeadlineExceeded
		}
		n, err := writevSome(uintptr(fd), v)
		total += int64(n)
		switch err {
		case 0, unix.EINTR:
		case unix.EAGAIN:
			if err := c.wait(fd, unix.POLLOUT, &c.writeDL); err != nil {
				return total, err
			}
		default:
			return total, os.NewSyscallError("writev", err)
		}
	}
	return total, nil
}

// Close closes the connection; an operation waiting on it returns net.ErrClosed within
// detachedPollSlice.
func (c *Detached) Close() error {
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

func (c *Detached) LocalAddr() net.Addr  { return c.local }
func (c *Detached) RemoteAddr() net.Addr { return c.remote }

func deadlineNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func (c *Detached) SetDeadline(t time.Time) error {
	c.readDL.Store(deadlineNanos(t))
	c.writeDL.Store(deadlineNanos(t))
	return nil
}

func (c *Detached) SetReadDeadline(t time.Time) error {
	c.readDL.Store(deadlineNanos(t))
	return nil
}

func (c *Detached) SetWriteDeadline(t time.Time) error {
	c.writeDL.Store(deadlineNanos(t))
	return nil
}

// SyscallConn gives Control access to the descriptor (framedSock's hang-up check); it has no
// Read or Write (the connection does its own).
func (c *Detached) SyscallConn() (syscall.RawConn, error) { return detachedControl{c}, nil }

type detachedControl struct{ c *Detached }

func (r detachedControl) Control(f func(fd uintptr)) error {
	fd, ok := r.c.acquire()
	if !ok {
		return net.ErrClosed
	}
	defer r.c.release()
	f(uintptr(fd))
	return nil
}

var errDetachedNoRW = errors.New("Detached: use the connection's own Read and Write")

func (detachedControl) Read(func(fd uintptr) bool) error  { return errDetachedNoRW }
func (detachedControl) Write(func(fd uintptr) bool) error { return errDetachedNoRW }
