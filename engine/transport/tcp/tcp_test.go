package tcp

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/auth"
	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/engine/transport"
	"github.com/mooncake-go/mooncake/internal/memview"
)

type memHandler struct{ mem []byte }

type nopPin struct{}

func (nopPin) Release() {}

func (h *memHandler) Acquire(addr, n uint64, _ []*auth.Token) ([]byte, Pin, error) {
	base := uint64(memview.Addr(h.mem))
	if addr < base || addr+n > base+uint64(len(h.mem)) || addr+n < addr {
		return nil, nil, &RemoteError{Code: StatusAddressNotRegistered, Msg: "outside"}
	}
	return memview.Bytes(uintptr(addr), int(n)), nopPin{}, nil
}

func (h *memHandler) Control(op Op, p []byte, _ []*auth.Token) ([]byte, error) {
	if op == OpNotify {
		return append([]byte("echo:"), p...), nil
	}
	return nil, nil
}

type rec struct {
	mu    sync.Mutex
	errs  []error
	done  []bool
	bytes []uint64
}

func newRec(n int) *rec {
	return &rec{errs: make([]error, n), done: make([]bool, n), bytes: make([]uint64, n)}
}
func (r *rec) Progress(i int, n uint64) {
	r.mu.Lock()
	r.bytes[i] += n
	r.mu.Unlock()
}
func (r *rec) Done(i int, err error) {
	r.mu.Lock()
	if r.done[i] {
		panic("Done twice")
	}
	r.done[i], r.errs[i] = true, err
	r.mu.Unlock()
}

func mmap(t *testing.T, n int) []byte {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

func TestClientServer(t *testing.T) {
	remote := mmap(t, 8<<20)
	local := mmap(t, 8<<20)
	for i := range local {
		local[i] = byte(i * 31)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := NewServer(ln, &memHandler{remote})
	go srv.Serve()
	defer srv.Close()
	c := NewClient()
	c.ChunkSize = 1 << 20 // exercise chunking
	defer c.Close()
	tg := &transport.Target{Addr: ln.Addr().String()}
	base := uint64(memview.Addr(remote))
	la := memview.Addr(local)
	reqs := []transport.Request{
		{Write: true, Local: la, Remote: base, Length: 3<<20 + 5},
		{Write: true, Local: la, Remote: base + 8<<20 - 4, Length: 8}, // outside
		{Write: false, Local: la + 4<<20, Remote: base, Length: 3<<20 + 5},
		{Write: true, Local: la, Remote: base + 7<<20, Length: 1},
	}
	for round := 0; round < 3; round++ { // reuses pooled connections
		r := newRec(len(reqs))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c.Execute(ctx, tg, reqs, r)
		cancel()
		var re *RemoteError
		if r.errs[0] != nil || r.errs[2] != nil || r.errs[3] != nil || !errors.As(r.errs[1], &re) {
			t.Fatalf("errs %v", r.errs)
		}
		if r.bytes[0] != 3<<20+5 || r.bytes[1] != 0 {
			t.Fatalf("progress %v", r.bytes)
		}
		if !bytes.Equal(remote[:3<<20+5], local[:3<<20+5]) || !bytes.Equal(local[4<<20:4<<20+3<<20+5], local[:3<<20+5]) {
			t.Fatal("data mismatch")
		}
	}
	out, err := c.Call(context.Background(), tg.Addr, OpNotify, []byte("hi"))
	if err != nil || string(out) != "echo:hi" {
		t.Fatalf("call %q %v", out, err)
	}
	// Dead address: every request fails, none hangs.
	ln2, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln2.Addr().String()
	ln2.Close()
	r := newRec(2)
	c.Execute(context.Background(), &transport.Target{Addr: dead}, reqs[:2], r)
	if r.errs[0] == nil || r.errs[1] == nil {
		t.Fatal("dead peer succeeded")
	}
	// Server restarted behind a pooled connection: the retry on a fresh one succeeds.
	srv.Close()
	ln3, err := net.Listen("tcp", tg.Addr)
	if err != nil {
		t.Skip("port reuse:", err)
	}
	srv3 := NewServer(ln3, &memHandler{remote})
	go srv3.Serve()
	defer srv3.Close()
	r = newRec(1)
	c.Execute(context.Background(), tg, reqs[:1], r)
	if r.errs[0] != nil {
		t.Fatalf("after restart: %v", r.errs[0])
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	var b [reqHdrLen]byte
	h := Header{Op: OpWrite, Flags: 3, Seq: 9, Addr: 1 << 40, Length: 12345}
	EncodeHeader(b[:], &h)
	var g Header
	if err := DecodeHeader(b[:], &g); err != nil || g != h {
		t.Fatalf("%+v %v", g, err)
	}
	b[4] = 2
	if DecodeHeader(b[:], &g) == nil {
		t.Fatal("bad version accepted")
	}
}

func FuzzDecodeHeader(f *testing.F) {
	var b [reqHdrLen]byte
	EncodeHeader(b[:], &Header{Op: OpRead, Seq: 1, Addr: 4096, Length: 100})
	f.Add(b[:])
	EncodeHeader(b[:], &Header{Op: OpNotify, Length: 10})
	f.Add(b[:])
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var h Header
		if err := DecodeHeader(data, &h); err != nil {
			return
		}
		switch h.Op {
		case OpRead, OpWrite:
			if h.Length > MaxDataFrame || h.Addr+h.Length < h.Addr {
				t.Fatal("accepted a bad data frame")
			}
		case OpDescriptor, OpNotify, OpPing:
			if h.Length > MaxControlFrame {
				t.Fatal("accepted a big control frame")
			}
		default:
			t.Fatal("accepted an unknown op")
		}
		var out [reqHdrLen]byte
		EncodeHeader(out[:], &h)
		var h2 Header
		if DecodeHeader(out[:], &h2) != nil || h2 != h {
			t.Fatal("round trip")
		}
	})
}

// FuzzServer feeds arbitrary bytes to a live server connection: it must never crash and
// must keep serving other connections.
func FuzzServer(f *testing.F) {
	var b [reqHdrLen]byte
	EncodeHeader(b[:], &Header{Op: OpPing, Seq: 1})
	f.Add(b[:])
	EncodeHeader(b[:], &Header{Op: OpWrite, Seq: 1, Addr: 1, Length: 3})
	f.Add(append(b[:], 1, 2, 3))
	remote := make([]byte, 0) // no memory: every data op is refused
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := NewServer(ln, &memHandler{remote})
	go srv.Serve()
	defer srv.Close()
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write(data)
		c.(*net.TCPConn).CloseWrite()
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 4096)
		for {
			if _, err := c.Read(buf); err != nil {
				break
			}
		}
		c.Close()
	})
}

// countingListener counts the bytes the server writes on its connections.
type countingListener struct {
	net.Listener
	n  *int64
	mu *sync.Mutex
}

type countingConn struct {
	net.Conn
	l countingListener
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l}, nil
}

func (c countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.l.mu.Lock()
	*c.l.n += int64(n)
	c.l.mu.Unlock()
	return n, err
}

// A run of WRITEs is answered once (plus once per failed WRITE): every WRITE but the last is
// quiet, the last answer confirms them, and a failure in the middle still reaches its request.
func TestQuietWrites(t *testing.T) {
	remote := mmap(t, 4<<20)
	local := mmap(t, 4<<20)
	for i := range local {
		local[i] = byte(i*7 + 1)
	}
	inner, _ := net.Listen("tcp", "127.0.0.1:0")
	var written int64
	var mu sync.Mutex
	ln := countingListener{inner, &written, &mu}
	srv := NewServer(ln, &memHandler{remote})
	go srv.Serve()
	defer srv.Close()
	c := NewClient()
	defer c.Close()
	tg := &transport.Target{Addr: inner.Addr().String()}
	base := uint64(memview.Addr(remote))
	la := memview.Addr(local)
	var reqs []transport.Request
	off := uint64(0)
	for i := 0; i < 20; i++ {
		n := uint64(8)
		if i%3 == 0 {
			n = 100 << 10 // large: written from local memory, read straight into remote
		}
		reqs = append(reqs, transport.Request{Write: true, Local: la + uintptr(off), Remote: base + off, Length: n})
		off += n
	}
	bad := 7
	reqs[bad].Remote = base + 4<<20 - 4 // 8 bytes, half outside
	r := newRec(len(reqs))
	c.Execute(context.Background(), tg, reqs, r)
	for i := range reqs {
		if i == bad {
			var re *RemoteError
			if !errors.As(r.errs[i], &re) || re.Code != StatusAddressNotRegistered || r.bytes[i] != 0 {
				t.Fatalf("request %d: err %v, %d bytes", i, r.errs[i], r.bytes[i])
			}
			continue
		}
		q := reqs[i]
		if !r.done[i] || r.errs[i] != nil || r.bytes[i] != q.Length {
			t.Fatalf("request %d: done %v err %v bytes %d", i, r.done[i], r.errs[i], r.bytes[i])
		}
		if !bytes.Equal(memview.Bytes(uintptr(q.Remote), int(q.Length)), memview.Bytes(q.Local, int(q.Length))) {
			t.Fatalf("request %d: data mismatch", i)
		}
	}
	msg := (&RemoteError{Code: StatusAddressNotRegistered, Msg: "outside"}).Error() // as the server words it
	want := int64(2*respHdrLen + len(msg))
	// The server counts a write once its Write call returns, which can be after the client
	// read the bytes: give it a moment, then check nothing more came.
	var got int64
	for end := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		got = written
		mu.Unlock()
		if got >= want || time.Now().After(end) {
			break
		}
	}
	time.Sleep(20 * time.Millisecond)
	mu.Lock()
	got = written
	mu.Unlock()
	if got != want {
		t.Fatalf("server wrote %d bytes of answers, want %d (one error, one final answer)", got, want)
	}
}

// landHandler is a memHandler whose Lander sends the payload of every large write to
// mem[redirect] elsewhere (alt), and declines the others.
type landHandler struct {
	memHandler
	redirect uint64 // target address whose payload goes to alt
	alt      []byte
	offered  chan uint64 // every offer's length
	began    chan func() // interrupt of each redirected read
	ended    chan bool   // done's ok of each redirected read
}

func (h *landHandler) Land(addr, n uint64, interrupt func()) ([]byte, func(bool)) {
	h.offered <- n
	if addr != h.redirect {
		return nil, nil
	}
	h.began <- interrupt
	return h.alt[:n], func(ok bool) { h.ended <- ok }
}

// TestLander: the payload of a large write that the Lander redirects is read into its other
// buffer and not into the target; a declined one, or one under landBytes, goes to its target.
// A redirected read whose payload stops coming ends, with done(false) and the connection
// dropped, when the Lander calls interrupt.
func TestLander(t *testing.T) {
	remote := mmap(t, 1<<20)
	local := mmap(t, 1<<20)
	for i := range local {
		local[i] = byte(i*7 + 1)
	}
	base := uint64(memview.Addr(remote))
	h := &landHandler{memHandler: memHandler{remote}, redirect: base + 4096, alt: make([]byte, 256<<10),
		offered: make(chan uint64, 16), began: make(chan func(), 16), ended: make(chan bool, 16)}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := NewServer(ln, h)
	go srv.Serve()
	defer srv.Close()
	c := NewClient()
	defer c.Close()
	tg := &transport.Target{Addr: ln.Addr().String()}
	la := memview.Addr(local)
	const big = 100 << 10
	reqs := []transport.Request{
		{Write: true, Local: la, Remote: base + 4096, Length: big},             // redirected
		{Write: true, Local: la + big, Remote: base + 512<<10, Length: big},    // declined
		{Write: true, Local: la + 2*big, Remote: base + 4096, Length: 8 << 10}, // too small to offer
	}
	r := newRec(len(reqs))
	c.Execute(context.Background(), tg, reqs, r)
	for i := range reqs {
		if !r.done[i] || r.errs[i] != nil {
			t.Fatalf("request %d: done %v err %v", i, r.done[i], r.errs[i])
		}
	}
	if n := <-h.offered; n != big {
		t.Fatalf("offered %d bytes, want %d", n, big)
	}
	<-h.offered
	select {
	case n := <-h.offered:
		t.Fatalf("a write of %d bytes was offered", n)
	default:
	}
	<-h.began
	if !<-h.ended {
		t.Fatal("the redirected read reported a failure")
	}
	if !bytes.Equal(h.alt[:big], local[:big]) {
		t.Fatal("the redirected payload differs")
	}
	if !bytes.Equal(remote[4096:4096+8<<10], local[2*big:2*big+8<<10]) || remote[4096+8<<10] != 0 {
		t.Fatal("the redirected payload reached its target, or the small write did not")
	}
	if !bytes.Equal(remote[512<<10:512<<10+big], local[big:2*big]) {
		t.Fatal("the declined payload did not reach its target")
	}

	// A frame whose payload stops after 1 KiB: the read waits until interrupted.
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var hb [reqHdrLen]byte
	EncodeHeader(hb[:], &Header{Op: OpWrite, Seq: 1, Addr: base + 4096, Length: big})
	conn.Write(hb[:])
	conn.Write(local[:1024])
	<-h.offered
	interrupt := <-h.began
	select {
	case ok := <-h.ended:
		t.Fatalf("the read ended (%v) with most of its payload still to come", ok)
	case <-time.After(100 * time.Millisecond):
	}
	interrupt()
	select {
	case ok := <-h.ended:
		if ok {
			t.Fatal("an interrupted read reported success")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("interrupt did not end the read")
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(hb[:]); err == nil {
		t.Fatal("the connection stayed open after an interrupted read")
	}
}
