// Command tcpstream measures what TCP carries one way between two hosts (or two network
// namespaces): bench/engine_netns.py's bound for the transfer engine's tcp transport.
//
//	tcpstream -recv -port 17001 -conns 4          # prints LISTENING, exits after the sender
//	tcpstream -send -addr 10.0.0.1:17001 -conns 4 -seconds 2 -chunk 4194304
//	tcpstream -send -addr 10.0.0.1:17001 -zerocopy      # MSG_ZEROCOPY sends (Linux 4.14+)
//
// The sender writes chunk-sized buffers on each connection until the time is up, closes its
// side, and waits for the receiver's byte count: the figure (printed as "BOUND <GB/s>",
// 1 GB = 1e9 B) covers bytes that reached the receiver, not bytes queued in the sender's kernel.
// Go moves the bytes, as in the engine, with no copy beyond the kernel's.
//
// -zerocopy sends with MSG_ZEROCOPY (SO_ZEROCOPY set on each connection): the kernel sends from
// the pages of the buffer instead of copying them, and reports each send's completion on the
// socket's error queue, which the sender drains as it goes. It also prints "ZEROCOPY <sent>
// <copied>": how many completions the kernel reported and how many of them say that it copied
// after all (SO_EE_CODE_ZEROCOPY_COPIED: what it does when the receiver is on the same host,
// through loopback or a veth into another namespace).
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	recv := flag.Bool("recv", false, "receive (listen on -port)")
	send := flag.Bool("send", false, "send to -addr")
	port := flag.Int("port", 17001, "port to listen on (-recv)")
	addr := flag.String("addr", "", "receiver's host:port (-send)")
	conns := flag.Int("conns", 1, "connections")
	seconds := flag.Float64("seconds", 2, "how long to send")
	chunk := flag.Int("chunk", 4<<20, "bytes per write")
	zerocopy := flag.Bool("zerocopy", false, "send with MSG_ZEROCOPY (-send)")
	flag.Parse()
	var err error
	switch {
	case *recv:
		err = receive(*port, *conns)
	case *send:
		err = stream(*addr, *conns, *chunk, time.Duration(*seconds*float64(time.Second)), *zerocopy)
	default:
		err = errors.New("give -recv or -send")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcpstream:", err)
		os.Exit(1)
	}
}

func receive(port, conns int) error {
	ln, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		return err
	}
	defer ln.Close()
	fmt.Println("LISTENING")
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := 0; i < conns; i++ {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			// Large reads, as the engine's receiver makes (io.Discard would read 8 KiB at a
			// time and make the receiver's system calls the bound).
			buf := make([]byte, 4<<20)
			var n int64
			for {
				k, err := c.Read(buf)
				n += int64(k)
				if err == io.EOF {
					break
				}
				if err != nil {
					errs <- err
					return
				}
			}
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], uint64(n))
			if _, err := c.Write(b[:]); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func stream(addr string, conns, chunk int, d time.Duration, zerocopy bool) error {
	cs := make([]*net.TCPConn, conns)
	zs := make([]*zcSender, conns)
	for i := range cs {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		cs[i] = c.(*net.TCPConn)
		defer c.Close()
		if zerocopy {
			if zs[i], err = newZCSender(cs[i]); err != nil {
				return err
			}
			defer zs[i].f.Close()
		}
	}
	buf := make([]byte, chunk)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	start := time.Now()
	deadline := start.Add(d)
	got := make([]uint64, conns)
	errs := make([]error, conns)
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func(i int, c *net.TCPConn) {
			defer wg.Done()
			// A zerocopy connection is driven through a blocking descriptor of its own (zcSender).
			var w io.Writer = c
			var r io.Reader = c
			closeWrite := c.CloseWrite
			if z := zs[i]; z != nil {
				w, r, closeWrite = z, z, z.closeWrite
			}
			for time.Now().Before(deadline) {
				if _, err := w.Write(buf); err != nil {
					errs[i] = err
					return
				}
			}
			if err := closeWrite(); err != nil {
				errs[i] = err
				return
			}
			var b [8]byte
			if _, err := io.ReadFull(r, b[:]); err != nil {
				errs[i] = fmt.Errorf("the receiver's count: %w", err)
				return
			}
			got[i] = binary.LittleEndian.Uint64(b[:])
			if zs[i] != nil { // every byte arrived: take the last completions
				zs[i].drain(0)
			}
		}(i, c)
	}
	wg.Wait()
	elapsed := time.Since(start)
	var total uint64
	for i := range got {
		if errs[i] != nil {
			return errs[i]
		}
		total += got[i]
	}
	fmt.Printf("BOUND %.4f\n", float64(total)/elapsed.Seconds()/1e9)
	if zerocopy {
		var done, copied uint64
		for _, z := range zs {
			done += z.done
			copied += z.copied
		}
		fmt.Printf("ZEROCOPY %d %d\n", done, copied)
	}
	return nil
}

// zcSender writes with MSG_ZEROCOPY on one connection and drains its completions. It uses a
// blocking duplicate of the connection's descriptor (TCPConn.File) rather than the runtime's
// poller: completions raise EPOLLERR on the socket, which the poller reports as an error on the
// connection's next read or write.
type zcSender struct {
	f      *os.File
	fd     int
	done   uint64 // sends the kernel reported complete
	copied uint64 // of those, sends it copied anyway
	oob    []byte
}

func newZCSender(c *net.TCPConn) (*zcSender, error) {
	f, err := c.File() // a duplicate, in blocking mode
	if err != nil {
		return nil, err
	}
	fd := int(f.Fd())
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ZEROCOPY, 1); err != nil {
		f.Close()
		return nil, fmt.Errorf("SO_ZEROCOPY: %w", err)
	}
	return &zcSender{f: f, fd: fd, oob: make([]byte, 256)}, nil
}

// Write sends all of buf with MSG_ZEROCOPY and takes the completions queued so far (the buffer
// is the same every time: what it holds does not matter for the figure, only that the kernel
// may keep its pages until it reports them done).
func (z *zcSender) Write(buf []byte) (int, error) {
	off := 0
	for off < len(buf) {
		n, err := unix.SendmsgN(z.fd, buf[off:], nil, nil, unix.MSG_ZEROCOPY)
		switch {
		case err == unix.ENOBUFS: // too many sends in flight: wait for completions
			z.drain(100)
			continue
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			unix.Poll([]unix.PollFd{{Fd: int32(z.fd), Events: unix.POLLOUT}}, 100)
			continue
		case err != nil:
			return off, err
		}
		off += n
		z.drain(0)
	}
	return off, nil
}

func (z *zcSender) closeWrite() error { return unix.Shutdown(z.fd, unix.SHUT_WR) }

// Read reads from the descriptor itself (the receiver's count, after closeWrite).
func (z *zcSender) Read(b []byte) (int, error) {
	for {
		n, err := unix.Read(z.fd, b)
		switch {
		case err == unix.EAGAIN:
			unix.Poll([]unix.PollFd{{Fd: int32(z.fd), Events: unix.POLLIN}}, 100)
			continue
		case err == unix.EINTR:
			continue
		case err != nil:
			return 0, err
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// drain reads the completions queued on the socket's error queue; with waitMs > 0 it first
// waits up to that long for one.
func (z *zcSender) drain(waitMs int) {
	if waitMs > 0 {
		unix.Poll([]unix.PollFd{{Fd: int32(z.fd)}}, waitMs) // POLLERR: a completion is queued
	}
	for {
		_, oobn, _, _, err := unix.Recvmsg(z.fd, nil, z.oob, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
		if err != nil {
			return
		}
		msgs, err := unix.ParseSocketControlMessage(z.oob[:oobn])
		if err != nil {
			return
		}
		for _, m := range msgs {
			if len(m.Data) < 16 {
				continue
			}
			// struct sock_extended_err: errno u32, origin u8, type u8, code u8, pad u8,
			// info u32 (first send id), data u32 (last send id)
			if m.Data[4] != unix.SO_EE_ORIGIN_ZEROCOPY {
				continue
			}
			lo := binary.LittleEndian.Uint32(m.Data[8:])
			hi := binary.LittleEndian.Uint32(m.Data[12:])
			n := uint64(hi-lo) + 1
			z.done += n
			if m.Data[6]&unix.SO_EE_CODE_ZEROCOPY_COPIED != 0 {
				z.copied += n
			}
		}
	}
}
