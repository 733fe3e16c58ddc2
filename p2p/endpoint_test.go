package p2p

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/wire"
)

func mkEndpoints(t testing.TB, n int, opts Options) ([]*Endpoint, *memHub) {
	return mkEndpointsOn(t, n, opts, func(h *memHub, name string) Fabric { return h.fabric(name) })
}

func mkEndpointsOn(t testing.TB, n int, opts Options, fabric func(h *memHub, name string) Fabric) ([]*Endpoint, *memHub) {
	t.Helper()
	hub := newHub()
	eps := make([]*Endpoint, n)
	for r := range eps {
		ep, err := New(fabric(hub, fmt.Sprintf("rank%d", r)), r, n, opts)
		if err != nil {
			t.Fatal(err)
		}
		eps[r] = ep
	}
	for _, a := range eps {
		for _, b := range eps {
			if err := a.Connect(b.Info()); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() {
		for _, ep := range eps {
			ep.Close()
		}
	})
	return eps, hub
}

func data(n, salt int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*13 + salt)
	}
	return b
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

var small = Options{Credits: 2, CellBytes: 64}

func TestSendRecvSizes(t *testing.T) {
	eps, _ := mkEndpoints(t, 2, small)
	ctx := ctxT(t, 10*time.Second)
	sizes := []int{0, 1, 63, 64, 65, 640, 1000, 5000}
	done := make(chan error, 1)
	go func() {
		for i, n := range sizes {
			if err := eps[0].Send(ctx, 1, wire.UserTag(7), data(n, i)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for i, n := range sizes {
		buf := make([]byte, n+10)
		k, err := eps[1].Recv(ctx, 0, wire.UserTag(7), buf)
		if err != nil {
			t.Fatal(err)
		}
		if k != n || !bytes.Equal(buf[:k], data(n, i)) {
			t.Fatalf("message %d: got %d bytes", i, k)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestTagMatchingAndStash(t *testing.T) {
	eps, _ := mkEndpoints(t, 2, small)
	ctx := ctxT(t, 10*time.Second)
	// Large messages for tags 1, 2, 3 arrive before anyone receives (stash, flow control must
	// not block the sender), then are received in reverse tag order.
	for tag := 1; tag <= 3; tag++ {
		if err := eps[0].Send(ctx, 1, wire.UserTag(int32(tag)), data(300*tag, tag)); err != nil {
			t.Fatal(err)
		}
	}
	for tag := 3; tag >= 1; tag-- {
		buf := make([]byte, 300*tag)
		n, err := eps[1].Recv(ctx, 0, wire.UserTag(int32(tag)), buf)
		if err != nil || n != len(buf) || !bytes.Equal(buf, data(300*tag, tag)) {
			t.Fatalf("tag %d: n=%d err=%v", tag, n, err)
		}
	}
}

func TestPostedBeforeArrival(t *testing.T) {
	eps, _ := mkEndpoints(t, 2, small)
	ctx := ctxT(t, 10*time.Second)
	bufA, bufB := make([]byte, 777), make([]byte, 777)
	ra := eps[1].PostRecv(0, wire.UserTag(1), bufA)
	rb := eps[1].PostRecv(0, wire.UserTag(1), bufB)
	eps[0].Send(ctx, 1, wire.UserTag(1), data(777, 1))
	eps[0].Send(ctx, 1, wire.UserTag(1), data(500, 2))
	if n, src, err := ra.Wait(ctx); err != nil || n != 777 || src != 0 || !bytes.Equal(bufA, data(777, 1)) {
		t.Fatalf("first: %d %d %v", n, src, err)
	}
	if n, _, err := rb.Wait(ctx); err != nil || n != 500 || !bytes.Equal(bufB[:500], data(500, 2)) {
		t.Fatalf("second: %d %v", n, err)
	}
}

func TestAnySourceAndSelf(t *testing.T) {
	eps, _ := mkEndpoints(t, 3, small)
	ctx := ctxT(t, 10*time.Second)
	eps[2].Send(ctx, 0, wire.UserTag(5), data(100, 2))
	eps[0].Send(ctx, 0, wire.UserTag(6), data(10, 0))
	eps[1].Send(ctx, 0, wire.UserTag(5), data(100, 1))
	seen := map[int]bool{}
	for i := 0; i < 2; i++ {
		buf := make([]byte, 100)
		n, src, err := eps[0].PostRecv(wire.AnySource, wire.UserTag(5), buf).Wait(ctx)
		if err != nil || n != 100 || !bytes.Equal(buf, data(100, src)) {
			t.Fatalf("any-source: n=%d src=%d err=%v", n, src, err)
		}
		seen[src] = true
	}
	if !seen[1] || !seen[2] {
		t.Fatalf("sources %v", seen)
	}
	buf := make([]byte, 10)
	if n, src, err := eps[0].PostRecv(0, wire.UserTag(6), buf).Wait(ctx); err != nil || n != 10 || src != 0 {
		t.Fatalf("self: %d %d %v", n, src, err)
	}
}

func TestTooLongAndTimeout(t *testing.T) {
	eps, _ := mkEndpoints(t, 2, small)
	ctx := ctxT(t, 10*time.Second)
	eps[0].Send(ctx, 1, wire.UserTag(1), data(200, 0))
	_, err := eps[1].Recv(ctx, 0, wire.UserTag(1), make([]byte, 100))
	if err == nil || !strings.Contains(err.Error(), "has 200 bytes, the receive buffer holds 100") {
		t.Fatalf("got %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := eps[1].Recv(short, 0, wire.UserTag(2), make([]byte, 8)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
	// The endpoint still works, and the withdrawn receive took nothing.
	eps[0].Send(ctx, 1, wire.UserTag(2), data(8, 3))
	buf := make([]byte, 8)
	if n, err := eps[1].Recv(ctx, 0, wire.UserTag(2), buf); err != nil || n != 8 || !bytes.Equal(buf, data(8, 3)) {
		t.Fatalf("after timeout: %d %v", n, err)
	}
}

func TestDeadPeer(t *testing.T) {
	eps, hub := mkEndpoints(t, 2, small)
	ctx := ctxT(t, 10*time.Second)
	hub.kill("rank1")
	err := eps[0].Send(ctx, 1, wire.UserTag(1), data(10, 0))
	if err == nil || !strings.Contains(err.Error(), "transfer to rank 1 failed") {
		t.Fatalf("got %v", err)
	}
	// Flow control toward a peer that stopped reading: the send times out.
	eps2, hub2 := mkEndpoints(t, 2, small)
	hub2.mu.Lock()
	hub2.mute["rank1"] = true
	hub2.mu.Unlock()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err = eps2[0].Send(short, 1, wire.UserTag(1), data(1000, 0))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waiting for rank 1") {
		t.Fatalf("got %v", err)
	}
}

// TestMarkDeadDeliversWhatArrived: a peer sends a message and dies before this side drained
// it; declaring the peer dead must deliver the message to its receive first, not fail it
// (a rank that finished an op and exited was counted as failed in it).
func TestMarkDeadDeliversWhatArrived(t *testing.T) {
	eps, _ := mkEndpoints(t, 2, small)
	ctx := ctxT(t, 10*time.Second)
	buf := make([]byte, 40)
	req := eps[0].PostRecv(1, wire.UserTag(7), buf)
	eps[0].drainMu.Lock() // the progress goroutine has not got to the message yet
	if err := eps[1].Send(ctx, 0, wire.UserTag(7), data(40, 3)); err != nil {
		eps[0].drainMu.Unlock()
		t.Fatal(err)
	}
	marked := make(chan struct{})
	go func() {
		eps[0].MarkDead(1, nil)
		close(marked)
	}()
	time.Sleep(50 * time.Millisecond)
	eps[0].drainMu.Unlock()
	<-marked
	n, src, err := req.Wait(ctx)
	if err != nil || n != 40 || src != 1 || !bytes.Equal(buf, data(40, 3)) {
		t.Fatalf("receive after the sender died: n=%d src=%d err=%v", n, src, err)
	}
	if eps[0].Dead(1) == nil {
		t.Fatal("rank 1 not marked dead")
	}
}

func TestConcurrentPairs(t *testing.T) {
	const n = 4
	eps, _ := mkEndpoints(t, n, small)
	ctx := ctxT(t, 20*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 2*n*n)
	for a := 0; a < n; a++ {
		for b := 0; b < n; b++ {
			if a == b {
				continue
			}
			wg.Add(2)
			go func() {
				defer wg.Done()
				for i := 0; i < 20; i++ {
					if err := eps[a].Send(ctx, b, wire.UserTag(int32(i%3)), data(100*i+a, a*b+i)); err != nil {
						errs <- err
						return
					}
				}
			}()
			go func() {
				defer wg.Done()
				// per tag, messages arrive in order
				for i := 0; i < 20; i++ {
					buf := make([]byte, 100*i+a)
					k, err := eps[b].Recv(ctx, a, wire.UserTag(int32(i%3)), buf)
					if err != nil || k != len(buf) || !bytes.Equal(buf, data(100*i+a, a*b+i)) {
						errs <- fmt.Errorf("%d->%d #%d: %d %v", a, b, i, k, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// PostReduce reduces a message into its buffer chunk by chunk as it arrives, whether the
// receive was posted first or the message (part of it) came first.
func TestPostReduce(t *testing.T) {
	eps, _ := mkEndpoints(t, 2, small) // 64-byte cells: a 4000-byte message is 63 chunks
	ctx := ctxT(t, 10*time.Second)
	const count = 1000
	in := make([]byte, 4*count)
	want := make([]byte, 4*count)
	base := make([]byte, 4*count)
	for i := 0; i < count; i++ {
		putF32(in[4*i:], float32(i%7))
		putF32(base[4*i:], float32(i%5))
		putF32(want[4*i:], float32(i%7+i%5))
	}
	for _, postFirst := range []bool{true, false} {
		buf := append([]byte(nil), base...)
		tag := wire.UserTag(9)
		var r wire.PostedRecv
		if postFirst {
			r = eps[1].PostReduce(0, tag, buf, sumF32)
		}
		if err := eps[0].Send(ctx, 1, tag, in); err != nil {
			t.Fatal(err)
		}
		if !postFirst {
			r = eps[1].PostReduce(0, tag, buf, sumF32)
		}
		if n, src, err := r.Wait(ctx); err != nil || n != len(in) || src != 0 {
			t.Fatalf("postFirst=%v: %d %d %v", postFirst, n, src, err)
		}
		if !bytes.Equal(buf, want) {
			t.Fatalf("postFirst=%v: the message was not summed into the buffer", postFirst)
		}
	}
}

func putF32(b []byte, v float32) {
	u := math.Float32bits(v)
	b[0], b[1], b[2], b[3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
}

// sumF32 is the combine function of the reducing receives here: dst += src as float32s (the
// collective algorithms pass their reduction kernel).
func sumF32(dst, src []byte) {
	for i := 0; i+4 <= len(src); i += 4 {
		d := math.Float32frombits(binary.LittleEndian.Uint32(dst[i:]))
		s := math.Float32frombits(binary.LittleEndian.Uint32(src[i:]))
		binary.LittleEndian.PutUint32(dst[i:], math.Float32bits(d+s))
	}
}

// TestClaimMidMessage: a receive posted while its message is arriving (after 10 of 63 chunks
// went to the stash) takes the rest straight from the mailbox: the stash holds only those 10
// chunks, and the data is exact; also for a reducing receive, and a receive too small for the
// message fails without disturbing the next one.
func TestClaimMidMessage(t *testing.T) {
	eps, _ := mkEndpoints(t, 2, small) // 64-byte cells: a 4000-byte message is 63 chunks
	ctx := ctxT(t, 10*time.Second)
	msg := make([]byte, 4000)
	base := make([]byte, 4000)
	for i := 0; i < 1000; i++ {
		putF32(msg[4*i:], float32(i%7))
		putF32(base[4*i:], float32(i%5))
	}
	for _, c := range []struct {
		name string
		size int
		post func(buf []byte) wire.PostedRecv
		want func() []byte
		err  string
	}{
		{"copy", 4000, func(buf []byte) wire.PostedRecv { return eps[1].PostRecv(0, wire.UserTag(3), buf) },
			func() []byte { return msg }, ""},
		{"reduce", 4000, func(buf []byte) wire.PostedRecv {
			copy(buf, base)
			return eps[1].PostReduce(0, wire.UserTag(3), buf, sumF32)
		}, func() []byte {
			w := make([]byte, 4000)
			for i := 0; i < 1000; i++ {
				putF32(w[4*i:], float32(i%7+i%5))
			}
			return w
		}, ""},
		{"too-small", 1000, func(buf []byte) wire.PostedRecv { return eps[1].PostRecv(0, wire.UserTag(3), buf) },
			nil, "has 4000 bytes, the receive buffer holds 1000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			buf := make([]byte, c.size)
			chunks := 0
			posted := make(chan wire.PostedRecv, 1)
			hook := func(hd chunkHdr) {
				if hd.tag != wire.UserTag(3) {
					return
				}
				if chunks++; chunks == 11 { // 10 chunks are in the stash
					posted <- c.post(buf)
				}
			}
			stashed, untap := eps[1].tapRecv(hook)
			defer untap()
			before := stashed()
			if err := eps[0].Send(ctx, 1, wire.UserTag(3), msg); err != nil {
				t.Fatal(err)
			}
			r := <-posted
			n, src, err := r.Wait(ctx)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
			} else if err != nil || n != 4000 || src != 0 || !bytes.Equal(buf, c.want()) {
				t.Fatalf("n=%d src=%d err=%v, data equal: %v", n, src, err, bytes.Equal(buf, c.want()))
			}
			if got := stashed() - before; got != 640 {
				t.Fatalf("%d bytes went through the stash, want 640 (the 10 chunks before the receive)", got)
			}
			// The endpoint is in order for the next message.
			untap()
			if err := eps[0].Send(ctx, 1, wire.UserTag(4), data(300, 1)); err != nil {
				t.Fatal(err)
			}
			next := make([]byte, 300)
			if n, err := eps[1].Recv(ctx, 0, wire.UserTag(4), next); err != nil || n != 300 || !bytes.Equal(next, data(300, 1)) {
				t.Fatalf("next message: n=%d err=%v", n, err)
			}
		})
	}
}

// TestDrainOnSignal: when every peer is reached over the network, the goroutine that stores a
// bell write drains the mailboxes itself (drainHook), so chunks land without waking the progress
// goroutine; messages of every size, posted receives, unexpected ones and reductions arrive
// exact, in both directions at once.
func TestDrainOnSignal(t *testing.T) {
	eps, hub := mkEndpointsOn(t, 2, small, func(h *memHub, name string) Fabric { return h.netFabric(name) })
	for _, ep := range eps {
		if !ep.netPeers.Load() {
			t.Fatal("peers over a networked stream: the progress goroutine should park on the bell channel")
		}
	}
	ctx := ctxT(t, 10*time.Second)
	sizes := []int{0, 1, 64, 65, 1000, 5000}
	errs := make(chan error, 2)
	for r := range eps {
		go func() {
			from, ep := 1-r, eps[r]
			for i, n := range sizes {
				want := data(n, i+r)
				if err := ep.Send(ctx, from, wire.UserTag(5), want); err != nil {
					errs <- err
					return
				}
				buf := make([]byte, n)
				var err error
				if i%2 == 0 { // posted before its message can arrive in full
					_, _, err = ep.PostRecv(from, wire.UserTag(5), buf).Wait(ctx)
				} else {
					_, err = ep.Recv(ctx, from, wire.UserTag(5), buf)
				}
				if err == nil && !bytes.Equal(buf, data(n, i+from)) {
					err = fmt.Errorf("rank %d: message %d (%d bytes) differs", r, i, n)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			// a reduction on arrival: 1000 float32 ones plus the peer's twos
			acc := make([]byte, 4000)
			two := make([]byte, 4000)
			for i := 0; i < 1000; i++ {
				binary.LittleEndian.PutUint32(acc[4*i:], math.Float32bits(1))
				binary.LittleEndian.PutUint32(two[4*i:], math.Float32bits(2))
			}
			rq := ep.PostReduce(from, wire.UserTag(6), acc, sumF32)
			if err := ep.Send(ctx, from, wire.UserTag(6), two); err != nil {
				errs <- err
				return
			}
			if _, _, err := rq.Wait(ctx); err != nil {
				errs <- err
				return
			}
			for i := 0; i < 1000; i++ {
				if v := math.Float32frombits(binary.LittleEndian.Uint32(acc[4*i:])); v != 3 {
					errs <- fmt.Errorf("rank %d: element %d reduced to %v, want 3", r, i, v)
					return
				}
			}
			errs <- nil
		}()
	}
	for range eps {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for r, ep := range eps {
		if hub.taken(ep.base+uintptr(ep.lay.bell())) == 0 {
			t.Fatalf("rank %d: no chunk was drained by the writer's signal", r)
		}
	}
}

// slowProber is a memFabric whose probes of a peer answer only when their context ends.
type slowProber struct{ *memFabric }

func (f slowProber) Probe(ctx context.Context, segment, engine string) error {
	<-ctx.Done()
	return fmt.Errorf("peer %q did not answer: %w", segment, ctx.Err())
}

// TestProbeCallerDeadline: a probe cut short by the caller's own deadline says nothing about the
// peer (PeerAlive returns the caller's error, the peer is not marked dead); a probe that runs
// out of its own time marks the peer dead.
func TestProbeCallerDeadline(t *testing.T) {
	eps, _ := mkEndpointsOn(t, 2, small, func(h *memHub, name string) Fabric { return slowProber{h.fabric(name)} })
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := eps[0].PeerAlive(short, 1); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, wire.ErrPeerDead) {
		t.Fatalf("PeerAlive with the caller's deadline passing: %v", err)
	}
	if err := eps[0].Dead(1); err != nil {
		t.Fatalf("rank 1 marked dead for the caller's deadline: %v", err)
	}
	start := time.Now()
	err := eps[0].PeerAlive(context.Background(), 1)
	if !errors.Is(err, wire.ErrPeerDead) || !strings.Contains(err.Error(), "rank 1 is gone") || eps[0].Dead(1) == nil {
		t.Fatalf("PeerAlive past the probe timeout: %v (dead: %v)", err, eps[0].Dead(1))
	}
	if d := time.Since(start); d < DefaultProbeTimeout {
		t.Fatalf("the probe gave up after %v, before its timeout %v", d, DefaultProbeTimeout)
	}
}

// TestLandStraightInReceive: over the network, the chunks of a message that a posted receive
// has taken are read straight into its buffer (PayloadLander), not copied out of the mailbox;
// chunks too short to travel apart from their header, unexpected messages and reductions go
// through the mailbox. Every byte arrives exact either way.
func TestLandStraightInReceive(t *testing.T) {
	eps, hub := mkEndpointsOn(t, 2, Options{Credits: 2, CellBytes: 8192},
		func(h *memHub, name string) Fabric { return h.netFabric(name) })
	ctx := ctxT(t, 10*time.Second)
	send := func(tag uint64, b []byte) {
		if err := eps[0].Send(ctx, 1, tag, b); err != nil {
			t.Error(err)
		}
	}
	check := func(what string, got, want []byte) {
		t.Helper()
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: the bytes differ", what)
		}
	}
	var posted int64
	for i, n := range []int{4096, 8192, 3*8192 + 4100, 100000} {
		buf := make([]byte, n)
		rq := eps[1].PostRecv(0, wire.UserTag(int32(i)), buf)
		go send(wire.UserTag(int32(i)), data(n, i))
		if _, _, err := rq.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("posted, %d bytes", n), buf, data(n, i))
		posted += int64(n)
	}
	landed := hub.land.Load()
	t.Logf("%d of %d posted bytes landed straight in their receives", landed, posted)
	if landed == 0 || landed > posted {
		t.Fatalf("%d of %d posted bytes landed straight in their receives", landed, posted)
	}

	// Unexpected: stashed from the mailbox, then copied out when the receive comes.
	send(wire.UserTag(10), data(3*8192, 10))
	buf := make([]byte, 3*8192)
	if _, err := eps[1].Recv(ctx, 0, wire.UserTag(10), buf); err != nil {
		t.Fatal(err)
	}
	check("unexpected", buf, data(3*8192, 10))

	// A reduction combines each chunk from its cell.
	acc := make([]byte, 4*8192)
	two := make([]byte, 4*8192)
	for i := 0; i < len(acc)/4; i++ {
		binary.LittleEndian.PutUint32(acc[4*i:], math.Float32bits(1))
		binary.LittleEndian.PutUint32(two[4*i:], math.Float32bits(2))
	}
	before := hub.land.Load()
	rq := eps[1].PostReduce(0, wire.UserTag(11), acc, sumF32)
	go send(wire.UserTag(11), two)
	if _, _, err := rq.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(acc)/4; i++ {
		if v := math.Float32frombits(binary.LittleEndian.Uint32(acc[4*i:])); v != 3 {
			t.Fatalf("element %d reduced to %v, want 3", i, v)
		}
	}
	if d := hub.land.Load() - before; d != 0 {
		t.Fatalf("%d bytes of a reduction landed straight in its buffer", d)
	}
}

// TestWithdrawWaitsForLanding: a receive that fails while a chunk is being read into its buffer
// returns only once the read ended; a read that does not end within landingGrace is
// interrupted. A read that begins after the withdrawal is refused.
func TestWithdrawWaitsForLanding(t *testing.T) {
	r := &Request{done: make(chan struct{})}
	var ended atomic.Bool
	l := r.beginLanding(func() { t.Error("interrupted a read that ended in time") })
	go func() {
		time.Sleep(50 * time.Millisecond)
		ended.Store(true)
		r.endLanding(l)
	}()
	r.finish(0, -1, errors.New("failed"))
	if !ended.Load() {
		t.Fatal("the failed receive returned while a read into its buffer was under way")
	}
	if r.beginLanding(func() {}) != nil {
		t.Fatal("a read into a withdrawn receive's buffer began")
	}

	r2 := &Request{done: make(chan struct{})}
	var interrupted atomic.Bool
	var l2 *landing
	l2 = r2.beginLanding(func() { interrupted.Store(true); go r2.endLanding(l2) })
	t0 := time.Now()
	r2.finish(0, -1, errors.New("failed"))
	if !interrupted.Load() || time.Since(t0) < landingGrace {
		t.Fatalf("a stuck read: interrupted %v after %v", interrupted.Load(), time.Since(t0))
	}
}
