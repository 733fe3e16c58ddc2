package rawsys

import (
	"io"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Conn is a net.Conn whose Read and Write are raw system calls (package doc); every other
// method is the wrapped connection's.
type Conn struct {
	net.Conn
	rc syscall.RawConn
}

// Wrap returns c with raw reads and writes when it is a TCP or Unix-domain socket of package
// net, and c itself otherwise (a TLS connection, a wrapper of another kind).
func Wrap(c net.Conn) net.Conn {
	sc, ok := c.(interface {
		SyscallConn() (syscall.RawConn, error)
	})
	if !ok {
		return c
	}
	switch c.(type) {
	case *net.TCPConn, *net.UnixConn:
	default:
		return c
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	return &Conn{Conn: c, rc: rc}
}

// Read reads into b what the socket holds, waiting on the runtime's poller while it holds
// nothing; io.EOF once the peer closed its side.
func (c *Conn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := c.rc.Read(func(fd uintptr) bool {
		for {
			n, errno = read(fd, b)
			if errno != unix.EINTR {
				return errno != unix.EAGAIN
			}
		}
	})
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, os.NewSyscallError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// ReadFull reads exactly len(b) bytes, as io.ReadFull would, waiting on the runtime's poller
// while the socket holds nothing. While more than lowatFrom bytes are still to come it asks the
// kernel (SO_RCVLOWAT) to report the socket readable only once min(left, lowatMax) bytes are
// there, as [Detached.ReadFull] does: a payload arriving a few segments at a time wakes the
// reading goroutine once per lowatMax rather than at every segment. The mark never exceeds the
// bytes this call still expects, and it is back at 1 byte when ReadFull returns, so the
// frame header read next is not held back. (The poller is edge-triggered: an arrival before the
// mark is raised is remembered by the poller, and the next arrival is reported only once the
// socket holds the mark's bytes.)
func (c *Conn) ReadFull(b []byte) (int, error) {
	done := 0
	lowat := 1
	var errno syscall.Errno
	var eof bool
	err := c.rc.Read(func(fd uintptr) bool {
		for done < len(b) {
			n, e := read(fd, b[done:])
			switch {
			case e == unix.EINTR:
				continue
			case e == unix.EAGAIN:
				want := 1
				if left := len(b) - done; left > lowatFrom {
					want = min(left, lowatMax)
				}
				if want != lowat && unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, want) == nil {
					lowat = want
				}
				return false
			case e != 0:
				errno = e
				return true
			case n == 0:
				eof = true
				return true
			}
			done += n
		}
		return true
	})
	if lowat != 1 {
		c.rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1) })
	}
	switch {
	case err != nil:
		return done, err
	case errno != 0:
		return done, os.NewSyscallError("read", errno)
	case eof && done == 0:
		return 0, io.EOF
	case eof:
		return done, io.ErrUnexpectedEOF
	}
	return done, nil
}

// Write writes all of b, waiting on the runtime's poller while the socket's send buffer is
// full; on an error it returns how many bytes were written before it.
func (c *Conn) Write(b []byte) (int, error) {
	v := net.Buffers{b}
	n, err := WriteBuffers(c, &v)
	return int(n), err
}

// WriteBuffers writes all of v to c, as v.WriteTo(c) would: one writev(2) for as many of the
// buffers as it takes (at most iovMax), raw when c is a [Conn] or a [Detached], through c
// otherwise. It consumes v as it goes; on an error it returns how many bytes were written
// before it.
func WriteBuffers(c net.Conn, v *net.Buffers) (int64, error) {
	if d, ok := c.(*Detached); ok {
		return d.writeBuffers(v)
	}
	rc, ok := c.(*Conn)
	if !ok {
		return v.WriteTo(c)
	}
	var total int64
	var errno syscall.Errno
	err := rc.rc.Write(func(fd uintptr) bool {
		for len(*v) > 0 {
			n, e := writevSome(fd, v)
			total += int64(n)
			switch e {
			case 0, unix.EINTR:
			case unix.EAGAIN:
				return false
			default:
				errno = e
				return true
			}
		}
		return true
	})
	switch {
	case err != nil:
		return total, err
	case errno != 0:
		return total, os.NewSyscallError("writev", errno)
	}
	return total, nil
}

// writevSome makes one writev of v's first buffers (at most iovMax) and consumes from v what it
// wrote, empty buffers included; with v empty it writes nothing.
func writevSome(fd uintptr, v *net.Buffers) (int, syscall.Errno) {
	for len(*v) > 0 && len((*v)[0]) == 0 {
		*v = (*v)[1:]
	}
	if len(*v) == 0 {
		return 0, 0
	}
	n, e := writev(fd, (*v)[:min(len(*v), iovMax)])
	if e != 0 {
		return 0, e
	}
	consume(v, n)
	return n, 0
}

// iovMax is how many buffers one writev takes (Linux's IOV_MAX).
const iovMax = 1024

// consume drops the first n bytes of v.
func consume(v *net.Buffers, n int) {
	for n > 0 {
		if n < len((*v)[0]) {
			(*v)[0] = (*v)[0][n:]
			return
		}
		n -= len((*v)[0])
		(*v)[0] = nil
		*v = (*v)[1:]
	}
}
