package rawsys

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echoServer accepts connections on loopback and hands each to serve.
func echoServer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return lis.Addr().String()
}

func TestDetachedRoundTripAndEOF(t *testing.T) {
	addr := echoServer(t, func(c net.Conn) {
		defer c.Close()
		buf := make([]byte, 1<<20)
		if _, err := io.ReadFull(c, buf); err != nil {
			return
		}
		c.Write(buf) // then close: the client reads EOF
	})
	c, err := DialDetached(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.RemoteAddr().String(); got != addr {
		t.Fatalf("remote %s, want %s", got, addr)
	}
	// 1 MiB each way: more than a socket buffer, so both Write and Read wait in poll.
	out := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	if n, err := c.Write(out); err != nil || n != len(out) {
		t.Fatalf("write: %d, %v", n, err)
	}
	in := make([]byte, len(out))
	if _, err := io.ReadFull(c, in); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(in, out) {
		t.Fatal("echo differs")
	}
	if n, err := c.Read(in[:1]); n != 0 || err != io.EOF {
		t.Fatalf("after the peer closed: %d, %v; want 0, EOF", n, err)
	}
}

func TestDetachedDeadlineAndClose(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	addr := echoServer(t, func(c net.Conn) {
		defer c.Close()
		<-hold // never answers
	})
	c, err := DialDetached(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	// A deadline already past fails at once.
	c.SetReadDeadline(time.Unix(1, 0))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("past deadline: %v", err)
	}
	// A deadline moved earlier by another goroutine ends a waiting read (the AfterFunc of a
	// cancelled call does this).
	c.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		done <- err
	}()
	time.AfterFunc(50*time.Millisecond, func() { c.SetDeadline(time.Unix(1, 0)) })
	if err := <-done; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("deadline moved earlier: %v", err)
	}
	// Close ends a waiting read with net.ErrClosed; later calls fail the same way.
	c.SetDeadline(time.Time{})
	go func() {
		_, err := c.Read(make([]byte, 1))
		done <- err
	}()
	time.AfterFunc(50*time.Millisecond, func() { c.Close() })
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("closed while reading: %v", err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
	if err := c.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second close: %v", err)
	}
}

func TestDetachedRefused(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	if c, err := DialDetached(context.Background(), addr); err == nil {
		c.Close()
		t.Fatal("dial to a closed port succeeded")
	}
}

// ReadFull of a large payload sent in pieces with pauses between them gets every byte; a
// small Read after it is answered at once (the low-water mark is back at 1 byte); a peer that
// stops sending and closes mid-payload ends it with io.ErrUnexpectedEOF, not a hang.
func TestDetachedReadFull(t *testing.T) {
	want := readFullPattern(3 << 20)
	next := make(chan struct{})
	addr := echoServer(t, func(c net.Conn) {
		defer c.Close()
		sendForReadFull(c, want, next)
	})
	c, err := DialDetached(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := make([]byte, len(want))
	if n, err := c.ReadFull(got); err != nil || n != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("ReadFull = %d, %v (equal: %v)", n, err, bytes.Equal(got, want))
	}
	next <- struct{}{}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	one := make([]byte, 64<<10)
	if n, err := c.Read(one); err != nil || n != 1 || one[0] != 42 {
		t.Fatalf("small Read after ReadFull = %d, %v", n, err)
	}
	c.SetReadDeadline(time.Time{})
	next <- struct{}{}
	n, err := c.ReadFull(make([]byte, 1<<20))
	if !errors.Is(err, io.ErrUnexpectedEOF) || n != 300<<10 {
		t.Fatalf("ReadFull cut short = %d, %v; want %d, io.ErrUnexpectedEOF", n, err, 300<<10)
	}
}

// readFullPattern returns n bytes of the ReadFull tests' pattern.
func readFullPattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 7)
	}
	return b
}

// sendForReadFull plays the peer of the ReadFull tests on c: want in pieces of 100 KiB with
// pauses between them; after next, one byte (42); after next again, 300 KiB of want (of the
// 1 MiB the reader waits for).
func sendForReadFull(c net.Conn, want []byte, next <-chan struct{}) {
	for off := 0; off < len(want); off += 100 << 10 {
		c.Write(want[off:min(off+100<<10, len(want))])
		time.Sleep(time.Millisecond)
	}
	<-next
	c.Write([]byte{42})
	<-next
	c.Write(want[:300<<10])
}

// A deadline ends a ReadFull that waits with a low-water mark set.
func TestDetachedReadFullDeadline(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	addr := echoServer(t, func(c net.Conn) {
		defer c.Close()
		c.Write(make([]byte, 100<<10))
		<-hold
	})
	c, err := DialDetached(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	n, err := c.ReadFull(make([]byte, 1<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) || n > 100<<10 {
		t.Fatalf("ReadFull = %d, %v; want at most %d bytes and the deadline's error", n, err, 100<<10)
	}
}
