package rawsys

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pair returns the two ends of a loopback TCP connection, both wrapped.
func pair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			acc <- nil
			return
		}
		acc <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-acc
	if b == nil {
		t.Fatal("accept failed")
	}
	wa, wb := Wrap(a), Wrap(b)
	if _, ok := wa.(*Conn); !ok {
		t.Fatalf("Wrap(%T) did not wrap", a)
	}
	t.Cleanup(func() { wa.Close(); wb.Close() })
	return wa, wb
}

// More bytes than the sockets' buffers hold in both directions at once: writes meet a full
// send buffer and reads an empty receive buffer, so both wait on the poller many times.
func TestBothWaysMoreThanTheBuffersHold(t *testing.T) {
	a, b := pair(t)
	const n = 24 << 20
	want := make([]byte, n)
	for i := range want {
		want[i] = byte(rand.Uint32())
	}
	errc := make(chan error, 2)
	for _, c := range []net.Conn{a, b} {
		go func() {
			w, err := c.Write(want)
			if err == nil && w != n {
				err = io.ErrShortWrite
			}
			errc <- err
		}()
	}
	for _, c := range []net.Conn{a, b} {
		got := make([]byte, n)
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatal("bytes read differ from the bytes written")
		}
	}
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

func TestReadAfterThePeerClosed(t *testing.T) {
	a, b := pair(t)
	if _, err := a.Write([]byte("last words")); err != nil {
		t.Fatal(err)
	}
	a.Close()
	got, err := io.ReadAll(b)
	if err != nil || string(got) != "last words" {
		t.Fatalf("ReadAll = %q, %v; want the bytes then EOF", got, err)
	}
	if n, err := b.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("Read after EOF = %d, %v", n, err)
	}
}

func TestWriteToAClosedPeerFails(t *testing.T) {
	a, b := pair(t)
	b.Close()
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := a.Write(buf); err != nil {
			return // EPIPE or ECONNRESET, once the peer's reset arrived
		}
		if time.Now().After(deadline) {
			t.Fatal("writes to a closed peer kept succeeding")
		}
	}
}

func TestReadDeadline(t *testing.T) {
	_, b := pair(t)
	b.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	start := time.Now()
	_, err := b.Read(make([]byte, 8))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read = %v; want the deadline's error", err)
	}
	if waited := time.Since(start); waited < 40*time.Millisecond {
		t.Fatalf("Read returned after %v, before its deadline", waited)
	}
	// A deadline moved into the past from another goroutine ends a Read that waits.
	b.SetReadDeadline(time.Time{})
	errc := make(chan error, 1)
	go func() {
		_, err := b.Read(make([]byte, 8))
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	b.SetReadDeadline(time.Now())
	if err := <-errc; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("interrupted Read = %v; want the deadline's error", err)
	}
}

func TestCloseEndsAWaitingRead(t *testing.T) {
	_, b := pair(t)
	errc := make(chan error, 1)
	go func() {
		_, err := b.Read(make([]byte, 8))
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	b.Close()
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read on a closed connection = %v; want net.ErrClosed", err)
	}
}

func TestOtherConnectionsAreLeftAlone(t *testing.T) {
	p, q := net.Pipe()
	defer p.Close()
	defer q.Close()
	if Wrap(p) != p {
		t.Fatal("Wrap wrapped a net.Pipe end")
	}
}

// WriteBuffers with more buffers than one writev takes, empty ones among them, and more bytes
// than the socket's buffers hold: the reader gets every byte in order, and the buffers are
// consumed.
func TestWriteBuffersInOrder(t *testing.T) {
	a, b := pair(t)
	var v net.Buffers
	var want []byte
	for i := range 3000 {
		n := []int{0, 1, 7, 4096, 70000}[i%5]
		p := make([]byte, n)
		for j := range p {
			p[j] = byte(rand.Uint32())
		}
		v = append(v, p)
		want = append(want, p...)
	}
	type res struct {
		n   int64
		err error
	}
	done := make(chan res, 1)
	go func() {
		n, err := WriteBuffers(a, &v)
		done <- res{n, err}
	}()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(b, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("bytes read differ from the buffers written")
	}
	r := <-done
	if r.err != nil || r.n != int64(len(want)) {
		t.Fatalf("WriteBuffers = %d, %v; want %d, nil", r.n, r.err, len(want))
	}
	if len(v) != 0 {
		t.Fatalf("%d buffers left after WriteBuffers", len(v))
	}
}

// A connection that is not wrapped gets the bytes through its own writes.
func TestWriteBuffersToAPipe(t *testing.T) {
	p, q := net.Pipe()
	defer p.Close()
	defer q.Close()
	v := net.Buffers{[]byte("ab"), nil, []byte("cd")}
	go WriteBuffers(p, &v)
	got := make([]byte, 4)
	if _, err := io.ReadFull(q, got); err != nil || string(got) != "abcd" {
		t.Fatalf("read %q, %v", got, err)
	}
}

// A write deadline ends WriteBuffers on a peer that stopped reading, with the bytes written
// before it counted.
func TestWriteBuffersDeadline(t *testing.T) {
	a, _ := pair(t)
	a.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	v := net.Buffers{make([]byte, 64<<20)}
	n, err := WriteBuffers(a, &v)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("WriteBuffers = %d, %v; want the deadline's error", n, err)
	}
	if n <= 0 || n >= 64<<20 {
		t.Fatalf("WriteBuffers wrote %d bytes before its deadline; want some, not all", n)
	}
}

// ReadFull of a large payload sent in pieces with pauses between them (so that it waits on the
// poller with a low-water mark raised, down to exactly the bytes still to come) gets every
// byte; the mark is back at 1 byte afterwards, so a small Read is answered at once; a peer that
// closes mid-payload ends it with io.ErrUnexpectedEOF, not a hang.
func TestConnReadFull(t *testing.T) {
	a, b := pair(t)
	want := readFullPattern(3<<20 + 5000)
	next := make(chan struct{})
	go func() {
		sendForReadFull(a, want, next)
		a.Close()
	}()
	b.SetReadDeadline(time.Now().Add(20 * time.Second)) // a lost wake-up fails, never hangs
	got := make([]byte, len(want))
	n, err := b.(*Conn).ReadFull(got)
	if err != nil || n != len(want) || !bytes.Equal(got, want) {
		t.Fatalf("ReadFull = %d, %v (equal: %v)", n, err, bytes.Equal(got, want))
	}
	var lowat int
	b.(*Conn).rc.Control(func(fd uintptr) { lowat, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT) })
	if err != nil || lowat != 1 {
		t.Fatalf("SO_RCVLOWAT after ReadFull = %d, %v; want 1", lowat, err)
	}
	next <- struct{}{}
	b.SetReadDeadline(time.Now().Add(5 * time.Second))
	one := make([]byte, 64<<10)
	if n, err := b.Read(one); err != nil || n != 1 || one[0] != 42 {
		t.Fatalf("small Read after ReadFull = %d, %v", n, err)
	}
	b.SetReadDeadline(time.Now().Add(20 * time.Second))
	next <- struct{}{}
	n, err = b.(*Conn).ReadFull(make([]byte, 1<<20))
	if !errors.Is(err, io.ErrUnexpectedEOF) || n != 300<<10 {
		t.Fatalf("ReadFull cut short = %d, %v; want %d, io.ErrUnexpectedEOF", n, err, 300<<10)
	}
}

// A deadline ends a ReadFull that waits with a low-water mark raised, and so does one moved
// into the past from another goroutine (the engine's tcp server interrupts a landing read so).
func TestConnReadFullDeadline(t *testing.T) {
	a, b := pair(t)
	a.Write(make([]byte, 100<<10))
	b.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	n, err := b.(*Conn).ReadFull(make([]byte, 1<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) || n > 100<<10 {
		t.Fatalf("ReadFull = %d, %v; want at most %d bytes and the deadline's error", n, err, 100<<10)
	}
	b.SetReadDeadline(time.Time{})
	errc := make(chan error, 1)
	go func() {
		_, err := b.(*Conn).ReadFull(make([]byte, 1<<20))
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	b.SetReadDeadline(time.Now())
	if err := <-errc; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("interrupted ReadFull = %v; want the deadline's error", err)
	}
}
