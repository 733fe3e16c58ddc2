package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/auth"
	"github.com/mooncake-go/mooncake/engine/metadata"
	"github.com/mooncake-go/mooncake/engine/transport"
	"github.com/mooncake-go/mooncake/engine/transport/tcp"
	"github.com/mooncake-go/mooncake/internal/futex"
	"github.com/mooncake-go/mooncake/internal/memview"
)

func TestRegistration(t *testing.T) {
	e := newEngine(t, Config{})
	if !strings.HasPrefix(e.SegmentName(), "127.0.0.1:") || e.RPCPort() < 15000 || e.RPCPort() >= 17000 {
		t.Fatalf("name %q port %d", e.SegmentName(), e.RPCPort())
	}
	m := anon(t, 1<<16)
	a := addr(m)
	if err := e.RegisterLocalMemory(a, 0, "cpu:0"); Code(err) != -1 || !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("zero length: %v (code %d)", err, Code(err))
	}
	if err := e.RegisterLocalMemory(a, 4096, "cpu:0"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ off, n uint64 }{{0, 4096}, {100, 10}, {4095, 2}, {0, 1 << 16}} {
		if err := e.RegisterLocalMemory(a+uintptr(c.off), c.n, ""); Code(err) != -7 || !errors.Is(err, ErrAddressOverlapped) {
			t.Fatalf("overlap %+v: %v", c, err)
		}
	}
	// Adjacent is fine; a batch with one bad entry registers nothing.
	if err := e.RegisterLocalMemoryBatch([]Buffer{{a + 8192, 100}, {a + 8192 + 50, 10}}, "cpu:0"); Code(err) != -7 {
		t.Fatalf("batch overlap: %v", err)
	}
	if err := e.RegisterLocalMemoryBatch([]Buffer{{a + 4096, 4096}, {a + 8192, 4096}}, "cpu:0"); err != nil {
		t.Fatal(err)
	}
	d := e.Descriptor()
	if len(d.Buffers) != 3 || d.Buffers[0].Addr != uint64(a) || d.Buffers[0].Name != "cpu:0" || d.TCPDataPort != e.RPCPort() {
		t.Fatalf("descriptor %+v", d)
	}
	if _, err := transport.DecodeDescriptor(d.Encode()); err != nil {
		t.Fatalf("own descriptor does not decode: %v", err)
	}
	if err := e.UnregisterLocalMemory(a + 1); Code(err) != -3 || !errors.Is(err, ErrAddressNotRegistered) {
		t.Fatalf("unknown unregister: %v", err)
	}
	if err := e.UnregisterLocalMemoryBatch([]uintptr{a, a + 4096, a + 8192}); err != nil {
		t.Fatal(err)
	}
	if n := len(e.Descriptor().Buffers); n != 0 {
		t.Fatalf("%d buffers left", n)
	}
	s, err := e.AllocateShared(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if b := e.Descriptor().Buffers; len(b) != 1 || b[0].Shm == nil || b[0].Shm.Size != 1<<20 {
		t.Fatalf("shared descriptor %+v", b)
	}
	if err := e.UnregisterLocalMemory(s); err == nil {
		t.Fatal("unregistering a shared buffer must point to FreeShared")
	}
	if err := e.FreeShared(s); err != nil {
		t.Fatal(err)
	}
	if err := e.FreeShared(s); Code(err) != -3 {
		t.Fatalf("double free: %v", err)
	}
	if _, err := e.AllocateShared(0); Code(err) != -1 {
		t.Fatalf("zero shared: %v", err)
	}
}

func TestUnsupportedProtocols(t *testing.T) {
	for _, p := range []string{"rdma", "nvlink", "cxl", "efa", "bogus"} {
		_, err := New(context.Background(), Config{Protocol: p, LocalServerName: "127.0.0.1"})
		if !errors.Is(err, ErrNotSupported) || !strings.Contains(err.Error(), "not supported on this host") {
			t.Fatalf("%s: %v", p, err)
		}
	}
}

func TestBatchesLocal(t *testing.T) {
	e := newEngine(t, Config{})
	m := anon(t, 1<<20)
	a := addr(m)
	if err := e.RegisterLocalMemory(a, 1<<20, "cpu:0"); err != nil {
		t.Fatal(err)
	}
	fill(m[:4096], 3)
	b, err := e.AllocateBatchID(4)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.AllocateBatchID(0); Code(err) != -1 {
		t.Fatalf("capacity 0: %v", err)
	}
	reqs := []TransferRequest{
		{OpWrite, a, LocalSegment, uint64(a) + 8192, 4096},
		{OpWrite, a, LocalSegment, uint64(a) + 100, 0}, // zero length
		{OpRead, a + 65536, LocalSegment, uint64(a), 4096},
	}
	if err := e.SubmitTransfer(b, reqs); err != nil {
		t.Fatal(err)
	}
	if st, err := e.WaitBatch(context.Background(), b); err != nil || st != StatusCompleted {
		t.Fatalf("wait: %v %v", st, err)
	}
	for i := 0; i < 3; i++ {
		ts, err := e.GetTransferStatus(b, i)
		if err != nil || ts.Status != StatusCompleted || ts.TransferredBytes != reqs[i].Length {
			t.Fatalf("task %d: %+v %v", i, ts, err)
		}
	}
	if _, err := e.GetTransferStatus(b, 3); err == nil {
		t.Fatal("task 3 does not exist")
	}
	if !bytes.Equal(m[8192:8192+4096], m[:4096]) || !bytes.Equal(m[65536:65536+4096], m[:4096]) {
		t.Fatal("local copy wrong")
	}
	// Capacity: 3 used of 4.
	if err := e.SubmitTransfer(b, reqs[:2]); Code(err) != CodeTooManyRequests {
		t.Fatalf("over capacity: %v", err)
	}
	// Validation: all-or-nothing.
	bad := [][]TransferRequest{
		{{OpWrite, a + (1 << 20) - 10, LocalSegment, uint64(a), 20}},     // source past the end
		{{OpWrite, a, LocalSegment, uint64(a) + (1 << 20) - 10, 20}},     // target past the end
		{{OpWrite, a, 77, uint64(a), 20}},                                // unknown segment
		{{Opcode(9), a, LocalSegment, uint64(a), 20}},                    // bad opcode
		{{OpWrite, a, LocalSegment, uint64(a), 1}, {OpRead, 1, 0, 1, 1}}, // second bad
	}
	for i, r := range bad {
		if err := e.SubmitTransfer(b, r); err == nil {
			t.Fatalf("bad request %d accepted", i)
		}
	}
	if err := e.SubmitTransfer(b, []TransferRequest{{OpWrite, a, 77, 0, 0}}); !errors.Is(err, ErrUnknownSegment) {
		t.Fatalf("unknown segment: %v", err)
	}
	if ts, _ := e.GetTransferStatus(b, 2); ts.Status != StatusCompleted {
		t.Fatal("status changed")
	}
	if err := e.FreeBatchID(b); err != nil {
		t.Fatal(err)
	}
	for _, f := range []func() error{
		func() error { return e.FreeBatchID(b) },
		func() error { return e.SubmitTransfer(b, reqs) },
		func() error { _, err := e.GetBatchStatus(b); return err },
		func() error { _, err := e.WaitBatch(context.Background(), b); return err },
		func() error { _, err := e.GetTransferStatus(b, 0); return err },
		func() error { return e.FreeBatchID(12345) },
	} {
		if err := f(); !errors.Is(err, ErrUnknownBatch) {
			t.Fatalf("freed batch: %v", err)
		}
	}
	// Empty batch is completed; TransferSync works locally.
	b2, _ := e.AllocateBatchID(1)
	if st, _ := e.GetBatchStatus(b2); st != StatusCompleted {
		t.Fatalf("empty batch %v", st)
	}
	if err := e.TransferSync(context.Background(), []TransferRequest{{OpWrite, a, LocalSegment, uint64(a) + 500000, 4096}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m[500000:500000+4096], m[:4096]) {
		t.Fatal("sync copy wrong")
	}
}

// pair returns an initiator and a target engine in this process; the target has a shared
// buffer and a plain registered buffer.
func pair(t *testing.T, forceTCP bool) (ini, tgt *Engine, seg SegmentID, sh, plain []byte, src []byte) {
	tgt = newEngine(t, Config{ForceTCP: forceTCP}) // MC_FORCE_TCP
	ini = newEngine(t, Config{ForceTCP: forceTCP})
	sh = shared(t, tgt, 8<<20)
	plain = anon(t, 1<<20)
	if err := tgt.RegisterLocalMemory(addr(plain), uint64(len(plain)), "cpu:0"); err != nil {
		t.Fatal(err)
	}
	src = shared(t, ini, 8<<20)
	var err error
	seg, err = ini.OpenSegment(tgt.SegmentName())
	if err != nil {
		t.Fatal(err)
	}
	if seg2, _ := ini.OpenSegment(tgt.SegmentName()); seg2 != seg || seg == LocalSegment {
		t.Fatalf("segment ids %d %d", seg, seg2)
	}
	return
}

func TestTwoEnginesInProcess(t *testing.T) {
	for _, mode := range []string{"shm", "tcp"} {
		t.Run(mode, func(t *testing.T) {
			ini, tgt, seg, sh, plain, src := pair(t, mode == "tcp")
			fillFast(src, 9)
			// Write to shared and plain memory, read back.
			for _, dst := range [][]byte{sh, plain} {
				n := min(len(dst), 3<<20) - 1000
				if err := ini.TransferSync(context.Background(), []TransferRequest{{OpWrite, addr(src), seg, uint64(addr(dst)) + 1000, uint64(n)}}); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(dst[1000:1000+n], src[:n]) {
					t.Fatal("write mismatch")
				}
				back := src[4<<20:]
				if err := ini.TransferSync(context.Background(), []TransferRequest{{OpRead, addr(back), seg, uint64(addr(dst)) + 1000, uint64(n)}}); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(back[:n], src[:n]) {
					t.Fatal("read mismatch")
				}
			}
			st := ini.TransportBytes()
			if mode == "shm" && (st["shm"] == 0 || st["tcp"] == 0) {
				t.Fatalf("shm mode must use shm for shared and tcp for plain memory: %v", st)
			}
			if mode == "tcp" && st["shm"] != 0 {
				t.Fatalf("MC_FORCE_TCP ignored: %v", st)
			}
			// MapRemote.
			v, ok, err := ini.MapRemote(seg, uint64(addr(sh)), 64)
			if err != nil || ok != (mode == "shm") {
				t.Fatalf("MapRemote: %v %v", ok, err)
			}
			if ok && !bytes.Equal(v, sh[:64]) {
				t.Fatal("MapRemote view differs")
			}
			if _, ok, err := ini.MapRemote(seg, uint64(addr(plain)), 64); ok || err != nil {
				t.Fatalf("plain memory is not mappable: %v %v", ok, err)
			}
			// Batch of 1024 small requests in one batch, then read back.
			const nreq, sz = 1024, 1000
			b, _ := ini.AllocateBatchID(2 * nreq)
			reqs := make([]TransferRequest, nreq)
			for i := range reqs {
				reqs[i] = TransferRequest{OpWrite, addr(src) + uintptr(i*sz), seg, uint64(addr(sh)) + uint64(i*sz+7), sz}
			}
			if err := ini.SubmitTransfer(b, reqs); err != nil {
				t.Fatal(err)
			}
			if st, err := ini.WaitBatch(context.Background(), b); st != StatusCompleted {
				t.Fatal(st, err)
			}
			if !bytes.Equal(sh[7:7+nreq*sz], src[:nreq*sz]) {
				t.Fatal("batch write mismatch")
			}
			ini.FreeBatchID(b)
			_ = tgt
		})
	}
}

// TestSignalOrdering checks that [data, signal] wakes a futex waiter only after the data.
func TestSignalOrdering(t *testing.T) {
	for _, mode := range []string{"shm", "tcp"} {
		t.Run(mode, func(t *testing.T) {
			ini, _, seg, sh, _, src := pair(t, mode == "tcp")
			word := memview.Uint32(addr(sh))
			data := sh[4096 : 4096+(1<<20)]
			for round := uint32(1); round <= 20; round++ {
				for i := range 1 << 20 {
					src[i] = byte(round)
				}
				*(*uint32)(memview.Pointer(addr(src) + 2<<20)) = round
				woke := make(chan bool)
				go func() {
					deadline := time.Now().Add(5 * time.Second)
					for atomic.LoadUint32(word) != round {
						if time.Now().After(deadline) {
							woke <- false
							return
						}
						futex.Wait(word, round-1, 100*time.Millisecond)
					}
					woke <- data[0] == byte(round) && data[len(data)-1] == byte(round)
				}()
				b, _ := ini.AllocateBatchID(2)
				if err := ini.SubmitTransfer(b, []TransferRequest{
					{OpWrite, addr(src), seg, uint64(addr(data)), 1 << 20},
					{OpWrite, addr(src) + 2<<20, seg, uint64(addr(sh)), 4},
				}); err != nil {
					t.Fatal(err)
				}
				if !<-woke {
					t.Fatalf("round %d: signal before data or no wake", round)
				}
				ini.WaitBatch(context.Background(), b)
				ini.FreeBatchID(b)
			}
		})
	}
}

func TestNotifyAndProbe(t *testing.T) {
	ini, tgt, seg, sh, _, src := pair(t, true)
	b, _ := ini.AllocateBatchID(1)
	if err := ini.SubmitTransferWithNotify(b, []TransferRequest{{OpWrite, addr(src), seg, uint64(addr(sh)), 100}}, Notify{"n1", "done"}); err != nil {
		t.Fatal(err)
	}
	ini.WaitBatch(context.Background(), b)
	if err := ini.SendNotify(seg, Notify{"n2", "second"}); err != nil {
		t.Fatal(err)
	}
	var got []Notify
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < 2 && time.Now().Before(deadline) {
		got = append(got, tgt.GetNotifies()...)
		time.Sleep(time.Millisecond)
	}
	if len(got) != 2 || got[0] != (Notify{"n1", "done"}) || got[1] != (Notify{"n2", "second"}) {
		t.Fatalf("notifies %+v", got)
	}
	if n := tgt.GetNotifies(); len(n) != 0 {
		t.Fatalf("not drained: %v", n)
	}
	if err := ini.ProbePeer(tgt.SegmentName()); err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	if err := ini.ProbePeer(dead); err == nil {
		t.Fatal("probe of a closed port succeeded")
	}
	if _, err := ini.OpenSegment(dead); err == nil {
		t.Fatal("open of a closed port succeeded")
	}
	if _, err := ini.OpenSegment("no-port"); !errors.Is(err, ErrUnknownSegment) {
		t.Fatalf("bad name: %v", err)
	}
}

// TestServerChecksRanges sends raw frames: out-of-range WRITE/READ get an error answer (no
// stray write), the connection keeps working, garbage closes only that connection.
func TestServerChecksRanges(t *testing.T) {
	tgt := newEngine(t, Config{})
	sh := shared(t, tgt, 1<<16)
	for i := range sh {
		sh[i] = 0x5A
	}
	c := tcp.NewClient()
	defer c.Close()
	addrS := net.JoinHostPort("127.0.0.1", itoa(tgt.RPCPort()))
	src := anon(t, 4096)
	fill(src, 1)
	dt := &transport.Target{Addr: addrS}
	run := func(reqs ...transport.Request) []error {
		r := &collect{errs: make([]error, len(reqs))}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.Execute(ctx, dt, reqs, r)
		return r.errs
	}
	base := uint64(addr(sh))
	errs := run(
		transport.Request{Write: true, Local: addr(src), Remote: base + (1 << 16) - 8, Length: 16}, // crosses the end
		transport.Request{Write: true, Local: addr(src), Remote: base - 8, Length: 8},              // before the start
		transport.Request{Write: false, Local: addr(src), Remote: base + (1 << 16), Length: 8},     // read past the end
		transport.Request{Write: true, Local: addr(src), Remote: base + 100, Length: 50},           // fine
	)
	var re *tcp.RemoteError
	for i := 0; i < 3; i++ {
		if !errors.As(errs[i], &re) || re.Code != CodeAddressNotRegistered {
			t.Fatalf("request %d: %v", i, errs[i])
		}
	}
	if errs[3] != nil {
		t.Fatal(errs[3])
	}
	for i := range sh {
		want := byte(0x5A)
		if i >= 100 && i < 150 {
			want = src[i-100]
		}
		if sh[i] != want {
			t.Fatalf("byte %d = %#x, want %#x (stray write)", i, sh[i], want)
		}
	}
	// Garbage on a raw connection: the server drops it and keeps serving.
	for _, junk := range [][]byte{[]byte("GET / HTTP/1.0\r\n\r\n"), bytes.Repeat([]byte{0xff}, 100), make([]byte, 32)} {
		nc, err := net.Dial("tcp", addrS)
		if err != nil {
			t.Fatal(err)
		}
		nc.Write(junk)
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := nc.Read(make([]byte, 1)); err == nil {
			t.Fatal("server answered garbage")
		}
		nc.Close()
	}
	// Oversized frame header.
	var hb [32]byte
	tcp.EncodeHeader(hb[:], &tcp.Header{Op: tcp.OpWrite, Addr: base, Length: 1 << 40})
	nc, _ := net.Dial("tcp", addrS)
	nc.Write(hb[:])
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := nc.Read(make([]byte, 1)); err == nil {
		t.Fatal("server accepted an oversized frame")
	}
	nc.Close()
	if errs := run(transport.Request{Write: true, Local: addr(src), Remote: base, Length: 10}); errs[0] != nil {
		t.Fatalf("server stopped serving: %v", errs[0])
	}
	if sh[0] != src[0] {
		t.Fatal("write after garbage did not land")
	}
}

type collect struct{ errs []error }

func (c *collect) Progress(int, uint64)  {}
func (c *collect) Done(i int, err error) { c.errs[i] = err }
func itoa(n int) string                  { return jsonInt(n) }
func jsonInt(n int) string               { b, _ := json.Marshal(n); return string(b) }

// slowHandler answers the handshake but never completes data requests until released.
type slowHandler struct {
	desc    []byte
	release chan struct{}
	mem     []byte
}

type nopPin struct{}

func (nopPin) Release() {}

func (h *slowHandler) Acquire(a, n uint64, _ []*auth.Token) ([]byte, tcp.Pin, error) {
	<-h.release
	return nil, nil, &tcp.RemoteError{Code: -3, Msg: "gone"}
}
func (h *slowHandler) Control(op tcp.Op, _ []byte, _ []*auth.Token) ([]byte, error) {
	return h.desc, nil
}

func TestTimeoutAndBusy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	name := ln.Addr().String()
	d := transport.SegmentDescriptor{Name: name, Protocol: "tcp", Buffers: []transport.BufferDesc{{Name: "cpu:0", Addr: 1 << 30, Length: 1 << 20}}}
	h := &slowHandler{desc: d.Encode(), release: make(chan struct{})}
	srv := tcp.NewServer(ln, h)
	go srv.Serve()
	defer srv.Close()
	defer close(h.release)

	ini := newEngine(t, Config{TransferTimeout: 300 * time.Millisecond, ForceTCP: true})
	src := shared(t, ini, 4096)
	seg, err := ini.OpenSegment(name)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := ini.AllocateBatchID(1)
	if err := ini.SubmitTransfer(b, []TransferRequest{{OpWrite, addr(src), seg, 1 << 30, 4096}}); err != nil {
		t.Fatal(err)
	}
	if err := ini.FreeBatchID(b); !errors.Is(err, ErrBatchBusy) {
		t.Fatalf("free of a running batch: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	if st, err := ini.WaitBatch(ctx, b); st != StatusPending || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait with short ctx: %v %v", st, err)
	}
	cancel()
	start := time.Now()
	st, err := ini.WaitBatch(context.Background(), b)
	if st != StatusFailed || err == nil || time.Since(start) > 3*time.Second {
		t.Fatalf("timeout: %v %v after %v", st, err, time.Since(start))
	}
	if ts, _ := ini.GetTransferStatus(b, 0); ts.Status != StatusTimeout {
		t.Fatalf("task status %v", ts.Status)
	}
	if err := ini.FreeBatchID(b); err != nil {
		t.Fatal(err)
	}
}

func TestMetadataStore(t *testing.T) {
	fs := newFakeStore()
	old := openMetadata
	openMetadata = func(conn string, _ metadata.Options) (metadata.Store, error) {
		if conn != "fake://x" {
			t.Errorf("conn %q", conn)
		}
		return fs, nil
	}
	defer func() { openMetadata = old }()
	// MC_METADATA_CLUSTER_ID=c1, MC_FORCE_TCP=1
	tgt := newEngine(t, Config{MetadataServer: "fake://x", LocalServerName: "target-seg", ClusterID: "c1", ForceTCP: true})
	ini := newEngine(t, Config{MetadataServer: "fake://x", LocalServerName: "ini-seg", ClusterID: "c1", ForceTCP: true})
	if tgt.SegmentName() != "target-seg" {
		t.Fatal(tgt.SegmentName())
	}
	if !fs.has("mooncake/c1/ram/target-seg") || !fs.has("mooncake/c1/rpc_meta/target-seg") {
		t.Fatalf("keys: %v", fs.m)
	}
	raw, _ := fs.Get(context.Background(), RPCMetaKey("c1", "target-seg"))
	var rm RPCMeta
	if json.Unmarshal(raw, &rm); rm.RPCPort != tgt.RPCPort() {
		t.Fatalf("rpc meta %s", raw)
	}
	sh := shared(t, tgt, 1<<20)
	raw, _ = fs.Get(context.Background(), SegmentKey("c1", "target-seg"))
	d, err := transport.DecodeDescriptor(raw)
	if err != nil || len(d.Buffers) != 1 {
		t.Fatalf("republished descriptor: %s %v", raw, err)
	}
	seg, err := ini.OpenSegment("target-seg")
	if err != nil {
		t.Fatal(err)
	}
	src := shared(t, ini, 4096)
	fill(src, 4)
	if err := ini.TransferSync(context.Background(), []TransferRequest{{OpWrite, addr(src), seg, uint64(addr(sh)), 4096}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sh[:4096], src) {
		t.Fatal("mismatch")
	}
	// A buffer registered after OpenSegment is found by refetching the descriptor.
	sh2 := shared(t, tgt, 4096)
	if err := ini.TransferSync(context.Background(), []TransferRequest{{OpWrite, addr(src), seg, uint64(addr(sh2)), 4096}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ini.OpenSegment("nobody"); !errors.Is(err, ErrUnknownSegment) {
		t.Fatalf("unknown: %v", err)
	}
	if err := ini.ProbePeer("target-seg"); err != nil {
		t.Fatal(err)
	}
	tgt.Close()
	if fs.has("mooncake/c1/ram/target-seg") {
		t.Fatal("Close left the descriptor behind")
	}
}

func TestTopology(t *testing.T) {
	e := newEngine(t, Config{})
	var m map[string][][]string
	if err := json.Unmarshal([]byte(e.GetLocalTopology()), &m); err != nil {
		t.Fatal(err)
	}
	if v, ok := m["cpu:0"]; !ok || len(v) != 2 {
		t.Fatalf("topology %v", m)
	}
}

func TestCloseIsClean(t *testing.T) {
	e, err := New(context.Background(), Config{LocalServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	port := e.RPCPort()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", itoa(port)), time.Second); err == nil {
		c.Close()
		t.Fatal("listener still open")
	}
	if _, err := e.AllocateBatchID(1); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	e.Close()
}
