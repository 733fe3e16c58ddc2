package collective

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/collective/reduce"
	"github.com/mooncake-go/mooncake/wire"
)

var allDTypes = []reduce.DType{reduce.Uint8, reduce.Int8, reduce.Int16, reduce.Int32, reduce.Int64,
	reduce.Float16, reduce.Float32, reduce.Float64, reduce.Bool, reduce.BFloat16}

var allOps = []reduce.Op{reduce.Sum, reduce.Avg, reduce.Product, reduce.Min, reduce.Max,
	reduce.BAnd, reduce.BOr, reduce.BXor}

// tiny options push even small buffers through the ring/chain algorithms and many chunks.
var tinyOpts = Options{SmallBytes: 16, ChunkBytes: 24, FusedBytes: -1, PairBytes: 16} // no fused all_reduce: the other paths

// runGroups runs fn on n ranks of a MemNetwork concurrently and returns their errors.
func runGroups(t testing.TB, n int, opts Options, timeout time.Duration, fn func(ctx context.Context, g *Group) error) []error {
	t.Helper()
	net := NewMemNetwork(n)
	return runOn(t, net, n, opts, timeout, fn)
}

func runOn(t testing.TB, net *MemNetwork, n int, opts Options, timeout time.Duration, fn func(ctx context.Context, g *Group) error) []error {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	groups := make([]*Group, n)
	sm := newMemShared()
	for r := 0; r < n; r++ {
		g, err := NewGroup(net.Conn(r), r, n, 0, opts)
		if err != nil {
			t.Fatal(err)
		}
		groups[r] = g
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			if shmTest != nil {
				if err := enableShm(ctx, g, sm, opts); err != nil {
					errs[r] = err
					return
				}
			}
			errs[r] = fn(ctx, g)
		}()
	}
	wg.Wait()
	for _, g := range groups {
		g.Close()
	}
	sm.close()
	return errs
}

func noErrs(t testing.TB, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// value is the small integer rank contributes at element i: sums, products and averages of
// such values are exact in every dtype, whatever the order of reduction.
func value(rank, i int, dt reduce.DType, op reduce.Op) int {
	v := (rank*7+i*3+1)%5 - 2 // -2..2
	switch {
	case dt == reduce.Bool:
		return (rank + i) % 3 & 1
	case dt == reduce.Uint8:
		return v + 2
	case op == reduce.Product && i%4 == 0:
		return 1
	}
	return v
}

func putValue(b []byte, dt reduce.DType, v int) {
	switch dt {
	case reduce.Uint8, reduce.Int8, reduce.Bool:
		b[0] = byte(v)
	case reduce.Int16:
		binary.LittleEndian.PutUint16(b, uint16(v))
	case reduce.Int32:
		binary.LittleEndian.PutUint32(b, uint32(v))
	case reduce.Int64:
		binary.LittleEndian.PutUint64(b, uint64(v))
	case reduce.Float32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v)))
	case reduce.Float64:
		binary.LittleEndian.PutUint64(b, math.Float64bits(float64(v)))
	case reduce.BFloat16:
		binary.LittleEndian.PutUint16(b, uint16(math.Float32bits(float32(v))>>16))
	case reduce.Float16:
		binary.LittleEndian.PutUint16(b, f16(float32(v)))
	}
}

// f16 converts small integers (exactly representable) to IEEE half.
func f16(f float32) uint16 {
	bits := math.Float32bits(f)
	sign := uint16(bits>>16) & 0x8000
	if f == 0 {
		return sign
	}
	exp := int(bits>>23&0xff) - 127 + 15
	return sign | uint16(exp)<<10 | uint16(bits>>13&0x3ff)
}

func fill(dt reduce.DType, op reduce.Op, rank, count, salt int) []byte {
	es, _ := reduce.ElemSize(dt)
	b := make([]byte, count*es)
	for i := 0; i < count; i++ {
		putValue(b[i*es:], dt, value(rank+salt, i, dt, op))
	}
	return b
}

// expect reduces the inputs in rank order with the kernels (exact for these values).
func expect(t testing.TB, inputs [][]byte, dt reduce.DType, op reduce.Op) []byte {
	out := append([]byte(nil), inputs[0]...)
	for _, in := range inputs[1:] {
		if err := reduce.Reduce(out, in, dt, op); err != nil {
			t.Fatal(err)
		}
	}
	if op == reduce.Avg {
		if err := reduce.Divide(out, dt, len(inputs)); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func forEachCase(t *testing.T, fn func(t *testing.T, n int, dt reduce.DType, op reduce.Op, count int, opts Options)) {
	sizes := []int{1, 2, 3, 4, 5, 6, 7, 8}
	counts := []int{0, 1, 7, 100}
	if testing.Short() {
		sizes = []int{1, 2, 3, 5, 8}
		counts = []int{1, 37}
	}
	for _, n := range sizes {
		for _, dt := range allDTypes {
			for _, op := range allOps {
				if reduce.Check(dt, op) != nil {
					continue
				}
				for _, count := range counts {
					for oi, opts := range []Options{{}, tinyOpts} {
						name := fmt.Sprintf("n%d/%s/%s/c%d/o%d", n, dt, op, count, oi)
						t.Run(name, func(t *testing.T) { fn(t, n, dt, op, count, opts) })
					}
				}
			}
		}
	}
}

func TestAllReduce(t *testing.T) {
	forEachCase(t, func(t *testing.T, n int, dt reduce.DType, op reduce.Op, count int, opts Options) {
		ins := make([][]byte, n)
		bufs := make([][]byte, n)
		for r := range ins {
			ins[r] = fill(dt, op, r, count, 0)
			bufs[r] = append([]byte(nil), ins[r]...)
		}
		want := expect(t, ins, dt, op)
		noErrs(t, runGroups(t, n, opts, 10*time.Second, func(ctx context.Context, g *Group) error {
			return g.AllReduce(ctx, bufs[g.Rank()], dt, op)
		}))
		for r := range bufs {
			if !bytes.Equal(bufs[r], want) {
				t.Fatalf("rank %d: got %v want %v", r, bufs[r], want)
			}
		}
	})
}

func TestReduce(t *testing.T) {
	forEachCase(t, func(t *testing.T, n int, dt reduce.DType, op reduce.Op, count int, opts Options) {
		root := (count + n) % n
		ins := make([][]byte, n)
		bufs := make([][]byte, n)
		for r := range ins {
			ins[r] = fill(dt, op, r, count, 1)
			bufs[r] = append([]byte(nil), ins[r]...)
		}
		want := expect(t, ins, dt, op)
		noErrs(t, runGroups(t, n, opts, 10*time.Second, func(ctx context.Context, g *Group) error {
			return g.Reduce(ctx, bufs[g.Rank()], dt, op, root)
		}))
		for r := range bufs {
			w := ins[r]
			if r == root {
				w = want
			}
			if !bytes.Equal(bufs[r], w) {
				t.Fatalf("rank %d (root %d): got %v want %v", r, root, bufs[r], w)
			}
		}
	})
}

func TestReduceScatter(t *testing.T) {
	forEachCase(t, func(t *testing.T, n int, dt reduce.DType, op reduce.Op, count int, opts Options) {
		ins := make([][][]byte, n) // ins[rank][block]
		outs := make([][]byte, n)
		for r := range ins {
			ins[r] = make([][]byte, n)
			for b := range ins[r] {
				ins[r][b] = fill(dt, op, r, count, 3*b)
			}
			es, _ := reduce.ElemSize(dt)
			outs[r] = make([]byte, count*es)
		}
		noErrs(t, runGroups(t, n, opts, 10*time.Second, func(ctx context.Context, g *Group) error {
			return g.ReduceScatter(ctx, ins[g.Rank()], outs[g.Rank()], dt, op)
		}))
		for r := range outs {
			var contrib [][]byte
			for q := 0; q < n; q++ {
				contrib = append(contrib, ins[q][r])
			}
			if want := expect(t, contrib, dt, op); !bytes.Equal(outs[r], want) {
				t.Fatalf("rank %d: got %v want %v", r, outs[r], want)
			}
		}
	})
}

func pattern(rank, n, salt int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rank*31 + i*7 + salt)
	}
	return b
}

var byteSizes = []int{0, 1, 15, 16, 17, 1001, 5000}

func TestBroadcast(t *testing.T) {
	for n := 1; n <= 8; n++ {
		for _, size := range byteSizes {
			for oi, opts := range []Options{{}, tinyOpts} {
				for _, root := range []int{0, n - 1, n / 2} {
					t.Run(fmt.Sprintf("n%d/b%d/o%d/root%d", n, size, oi, root), func(t *testing.T) {
						bufs := make([][]byte, n)
						for r := range bufs {
							bufs[r] = pattern(r, size, 0)
						}
						want := pattern(root, size, 0)
						noErrs(t, runGroups(t, n, opts, 10*time.Second, func(ctx context.Context, g *Group) error {
							return g.Broadcast(ctx, bufs[g.Rank()], root)
						}))
						for r := range bufs {
							if !bytes.Equal(bufs[r], want) {
								t.Fatalf("rank %d differs", r)
							}
						}
					})
				}
			}
		}
	}
}

func TestAllGatherGatherScatter(t *testing.T) {
	for n := 1; n <= 8; n++ {
		for _, size := range byteSizes {
			for oi, opts := range []Options{{}, tinyOpts} {
				root := size % n
				t.Run(fmt.Sprintf("n%d/b%d/o%d", n, size, oi), func(t *testing.T) {
					outs := make([][][]byte, n)
					gouts := make([][][]byte, n)
					souts := make([][]byte, n)
					sins := make([][]byte, n)
					for r := range outs {
						outs[r] = make([][]byte, n)
						gouts[r] = make([][]byte, n)
						for q := range outs[r] {
							outs[r][q] = make([]byte, size)
							gouts[r][q] = make([]byte, size)
						}
						souts[r] = make([]byte, size)
						sins[r] = pattern(r, size, 9)
					}
					noErrs(t, runGroups(t, n, opts, 10*time.Second, func(ctx context.Context, g *Group) error {
						r := g.Rank()
						if err := g.AllGather(ctx, pattern(r, size, 1), outs[r]); err != nil {
							return err
						}
						var go_ [][]byte
						if r == root {
							go_ = gouts[r]
						}
						if err := g.Gather(ctx, pattern(r, size, 2), go_, root); err != nil {
							return err
						}
						var si [][]byte
						if r == root {
							si = sins
						}
						return g.Scatter(ctx, si, souts[r], root)
					}))
					for r := range outs {
						for q := range outs[r] {
							if !bytes.Equal(outs[r][q], pattern(q, size, 1)) {
								t.Fatalf("all_gather: rank %d block %d differs", r, q)
							}
							if r == root && !bytes.Equal(gouts[r][q], pattern(q, size, 2)) {
								t.Fatalf("gather: block %d differs", q)
							}
						}
						if !bytes.Equal(souts[r], sins[r]) {
							t.Fatalf("scatter: rank %d differs", r)
						}
					}
				})
			}
		}
	}
}

func TestAllToAll(t *testing.T) {
	for n := 1; n <= 8; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			checkAllToAll(t, n, tinyOpts, func(from, to int) int { return (from*5+to*3)%7*131 + from })
		})
	}
}

// TestAllToAllCarried: pairs of at most FusedBytes ride in the op's header messages, the
// others go as data messages after them, in one op (pieces of 0 to 793 bytes; 300 and less,
// empty ones included, are carried).
func TestAllToAllCarried(t *testing.T) {
	opts := tinyOpts
	opts.FusedBytes = 300
	for _, n := range []int{2, 3, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			checkAllToAll(t, n, opts, func(from, to int) int { return (from*5+to*3)%7*131 + from })
		})
	}
}

// checkAllToAll runs an all_to_all among n ranks whose piece from rank a to rank b has
// sz(a, b) bytes, and checks every piece.
func checkAllToAll(t *testing.T, n int, opts Options, sz func(from, to int) int) {
	t.Helper()
	outs := make([][][]byte, n)
	for r := range outs {
		outs[r] = make([][]byte, n)
		for q := range outs[r] {
			outs[r][q] = make([]byte, sz(q, r))
		}
	}
	noErrs(t, runGroups(t, n, opts, 10*time.Second, func(ctx context.Context, g *Group) error {
		r := g.Rank()
		ins := make([][]byte, n)
		for q := range ins {
			ins[q] = pattern(r*8+q, sz(r, q), 4)
		}
		return g.AllToAll(ctx, ins, outs[r])
	}))
	for r := range outs {
		for q := range outs[r] {
			if !bytes.Equal(outs[r][q], pattern(q*8+r, sz(q, r), 4)) {
				t.Fatalf("rank %d from %d differs", r, q)
			}
		}
	}
}

func TestManyOpsInSequence(t *testing.T) {
	const n = 5
	noErrs(t, runGroups(t, n, tinyOpts, 20*time.Second, func(ctx context.Context, g *Group) error {
		for i := 0; i < 50; i++ {
			buf := fill(reduce.Int32, reduce.Sum, g.Rank(), 33+i, 0)
			if err := g.AllReduce(ctx, buf, reduce.Int32, reduce.Sum); err != nil {
				return err
			}
			if err := g.Barrier(ctx); err != nil {
				return err
			}
			b := pattern(g.Rank(), i*13, 0)
			if err := g.Broadcast(ctx, b, i%n); err != nil {
				return err
			}
			if !bytes.Equal(b, pattern(i%n, i*13, 0)) {
				return fmt.Errorf("broadcast %d wrong", i)
			}
		}
		return nil
	}))
}

func sameError(t *testing.T, errs []error, want string) {
	t.Helper()
	for r, err := range errs {
		if err == nil {
			t.Fatalf("rank %d: no error, want %q", r, want)
		}
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("rank %d: error %q, want %q", r, err, want)
		}
		var me *MismatchError
		if !errors.As(err, &me) {
			t.Fatalf("rank %d: %T is not a MismatchError", r, err)
		}
	}
}

func TestMismatchFailsEverywhere(t *testing.T) {
	// 20: both sides carry their data in the header message (fused all_reduce); 100000: rank 1
	// sends a bare header. Both forms are read alike, so every rank reports the mismatch.
	for _, other := range []int{20, 100000} {
		t.Run(fmt.Sprint("count-", other), func(t *testing.T) {
			errs := runGroups(t, 3, Options{}, 5*time.Second, func(ctx context.Context, g *Group) error {
				n := 10
				if g.Rank() == 1 {
					n = other
				}
				return g.AllReduce(ctx, make([]byte, 4*n), reduce.Float32, reduce.Sum)
			})
			sameError(t, errs, fmt.Sprintf("all_reduce: rank 1 has %d float32 elements, rank 0 has 10", other))
		})
	}
	t.Run("dtype", func(t *testing.T) {
		errs := runGroups(t, 2, Options{}, 5*time.Second, func(ctx context.Context, g *Group) error {
			dt := reduce.Float32
			if g.Rank() == 1 {
				dt = reduce.Int32
			}
			return g.AllReduce(ctx, make([]byte, 40), dt, reduce.Sum)
		})
		sameError(t, errs, "all_reduce: rank 1 has dtype int32, rank 0 has float32")
	})
	t.Run("kind", func(t *testing.T) {
		errs := runGroups(t, 4, Options{}, 5*time.Second, func(ctx context.Context, g *Group) error {
			if g.Rank() == 2 {
				return g.Broadcast(ctx, make([]byte, 8), 0)
			}
			return g.AllReduce(ctx, make([]byte, 8), reduce.Int32, reduce.Max)
		})
		sameError(t, errs, "rank 2 called broadcast, rank 0 called all_reduce")
	})
	t.Run("root", func(t *testing.T) {
		errs := runGroups(t, 3, Options{}, 5*time.Second, func(ctx context.Context, g *Group) error {
			return g.Broadcast(ctx, make([]byte, 8), g.Rank()%2)
		})
		sameError(t, errs, "broadcast: rank 1 names root 1, rank 0 names root 0")
	})
	t.Run("alltoall", func(t *testing.T) {
		errs := runGroups(t, 3, Options{}, 5*time.Second, func(ctx context.Context, g *Group) error {
			ins, outs := make([][]byte, 3), make([][]byte, 3)
			for i := range ins {
				ins[i], outs[i] = make([]byte, 4), make([]byte, 4)
			}
			if g.Rank() == 2 {
				outs[0] = make([]byte, 8)
			}
			return g.AllToAll(ctx, ins, outs)
		})
		sameError(t, errs, "all_to_all: rank 0 sends 4 bytes to rank 2, which expects 8 bytes from it")
	})
	t.Run("root-outside", func(t *testing.T) {
		// A root that is not a member fails gather and scatter with the same error on every
		// rank, a group of one included (its outs and ins are nil: it is not the root).
		for _, n := range []int{1, 3} {
			errs := runGroups(t, n, Options{}, 5*time.Second, func(ctx context.Context, g *Group) error {
				return g.Gather(ctx, make([]byte, 8), nil, n)
			})
			sameError(t, errs, "gather: root rank is not an active member of the group")
			errs = runGroups(t, n, Options{}, 5*time.Second, func(ctx context.Context, g *Group) error {
				return g.Scatter(ctx, nil, make([]byte, 8), n)
			})
			sameError(t, errs, "scatter: root rank is not an active member of the group")
		}
	})
	t.Run("then-works", func(t *testing.T) {
		// After a failed op the group goes on with the next one.
		net := NewMemNetwork(3)
		groups := make([]*Group, 3)
		for r := range groups {
			groups[r], _ = NewGroup(net.Conn(r), r, 3, 0, Options{})
		}
		var wg sync.WaitGroup
		errs := make([][2]error, 3)
		for r := range groups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				g := groups[r]
				errs[r][0] = g.AllReduce(ctx, make([]byte, 4*(1+r)), reduce.Int32, reduce.Sum)
				b := fill(reduce.Int32, reduce.Sum, r, 5, 0)
				errs[r][1] = g.AllReduce(ctx, b, reduce.Int32, reduce.Sum)
			}()
		}
		wg.Wait()
		for r := range errs {
			if errs[r][0] == nil || errs[r][1] != nil {
				t.Fatalf("rank %d: %v / %v", r, errs[r][0], errs[r][1])
			}
		}
	})
}

func TestDeadPeerTimesOut(t *testing.T) {
	net := NewMemNetwork(3)
	net.Kill(2)
	start := time.Now()
	errs := runOn(t, net, 3, Options{}, 300*time.Millisecond, func(ctx context.Context, g *Group) error {
		if g.Rank() == 2 {
			return nil
		}
		return g.AllReduce(ctx, make([]byte, 64), reduce.Float32, reduce.Sum)
	})
	if time.Since(start) > 3*time.Second {
		t.Fatalf("took %v", time.Since(start))
	}
	for r := 0; r < 2; r++ {
		// Each survivor either times out on rank 2 itself or hears the other's abort first;
		// either way the hint names rank 2.
		var pe *PeerError
		if !errors.As(errs[r], &pe) || !strings.Contains(errs[r].Error(), "peer rank 2 did not answer within") {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if fr := pe.FailedRanks(); len(fr) != 1 || fr[0] != 2 {
			t.Fatalf("rank %d: failed-ranks hint %v", r, fr)
		}
		t.Log(errs[r])
	}
}

func TestAbortReachesPeers(t *testing.T) {
	// Rank 2 never joins; rank 0 gives up after 200ms and its abort ends rank 1's op long
	// before rank 1's own 20s timeout.
	net := NewMemNetwork(3)
	start := time.Now()
	errs := runOn(t, net, 3, Options{}, 20*time.Second, func(ctx context.Context, g *Group) error {
		switch g.Rank() {
		case 2:
			return nil
		case 0:
			c, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			ctx = c
		}
		return g.AllReduce(ctx, make([]byte, 64), reduce.Float32, reduce.Sum)
	})
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("rank 1 waited %v", d)
	}
	var ae *wire.AbortError
	if !errors.As(errs[1], &ae) || ae.Peer != 0 {
		t.Fatalf("rank 1: %v", errs[1])
	}
	t.Log(errs[0])
	t.Log(errs[1])
}

// flakyConn fails every Recv after the first ok ones (a link that breaks mid-op).
type flakyConn struct {
	Conn
	mu sync.Mutex
	ok int
}

func (c *flakyConn) Recv(ctx context.Context, peer int, tag uint64, buf []byte) (int, error) {
	c.mu.Lock()
	c.ok--
	broke := c.ok < 0
	c.mu.Unlock()
	if broke {
		return 0, errors.New("the link broke")
	}
	return c.Conn.Recv(ctx, peer, tag, buf)
}

// TestRingAllReduceOrRestore: the ring all_reduce over Conn fails part way (rank 1's link
// breaks at its 11th receive of a ~500-chunk op: it has reduced several chunks into its buffer
// by then; or at its 401st, in the all-gather, when its own segment, saved by the sender after
// each chunk went out, has been partly overwritten); every rank's buffer holds its input again.
// Without a save buffer rank 1's input is overwritten, so the test can tell. It runs over plain
// Conns (chunks saved before they are reduced) and over Conns that post receives and reduce on
// arrival (postConn, as p2p: chunks saved as their first piece lands).
func TestRingAllReduceOrRestore(t *testing.T) {
	if shmTest != nil {
		t.Skip("the Conn path's restore")
	}
	const n, count = 3, 3000
	for _, ok := range []int{10, 400} {
		for _, piece := range []int{0, 8} {
			for _, withSave := range []bool{true, false} {
				t.Run(fmt.Sprintf("breakAt=%d/posted=%v/save=%v", ok+1, piece > 0, withSave), func(t *testing.T) {
					testRingRestore(t, n, count, ok, piece, withSave)
				})
			}
		}
	}
}

func testRingRestore(t *testing.T, n, count, ok, piece int, withSave bool) {
	gs := memGroups(t, n, piece, tinyOpts, func(r int, c Conn) Conn {
		if r == 1 {
			return &flakyConn{Conn: c, ok: ok} // 2 op headers, then ring chunks
		}
		return c
	})
	ins, bufs := restoreInputs(n, count)
	errs := runEach(gs, 10*time.Second, func(ctx context.Context, g *Group) error {
		return allReduceMaybeSave(ctx, g, bufs[g.Rank()], withSave)
	})
	if ok < 100 {
		checkRestored(t, errs, ins, bufs, withSave, 1)
		return
	}
	// Broken in the all-gather, a rank that had all it needed may finish: it must hold the
	// sum; the broken rank and every other one that failed hold their input again.
	sum := append([]byte(nil), ins[0]...)
	for _, in := range ins[1:] {
		if err := reduce.Reduce(sum, in, reduce.Float32, reduce.Sum); err != nil {
			t.Fatal(err)
		}
	}
	if errs[1] == nil {
		t.Fatal("rank 1: the all_reduce succeeded over a broken link")
	}
	for r := range bufs {
		switch {
		case errs[r] == nil && !bytes.Equal(bufs[r], sum):
			t.Fatalf("rank %d: succeeded with a wrong sum", r)
		case errs[r] != nil && withSave && !bytes.Equal(bufs[r], ins[r]):
			t.Fatalf("rank %d: input not restored after %v", r, errs[r])
		case errs[r] != nil && !withSave && r == 1 && bytes.Equal(bufs[r], ins[r]):
			t.Fatalf("rank 1: no result was written before the failure; the test does not test the restore")
		}
	}
}

// restoreInputs are n ranks' float32 inputs of count elements and working copies of them.
func restoreInputs(n, count int) (ins, bufs [][]byte) {
	ins, bufs = make([][]byte, n), make([][]byte, n)
	for r := range bufs {
		ins[r] = fill(reduce.Float32, reduce.Sum, r, count, 0)
		bufs[r] = append([]byte(nil), ins[r]...)
	}
	return ins, bufs
}

// allReduceMaybeSave is AllReduceOrRestore (withSave) or plain AllReduce of b.
func allReduceMaybeSave(ctx context.Context, g *Group, b []byte, withSave bool) error {
	if !withSave {
		return g.AllReduce(ctx, b, reduce.Float32, reduce.Sum)
	}
	return g.AllReduceOrRestore(ctx, b, make([]byte, len(b)+8), reduce.Float32, reduce.Sum)
}

// checkRestored: every rank's op failed; with a save every buffer holds its input again;
// without one, rank written's input was overwritten (else the test would not test the restore).
func checkRestored(t *testing.T, errs []error, ins, bufs [][]byte, withSave bool, written int) {
	t.Helper()
	for r := range bufs {
		if errs[r] == nil {
			t.Fatalf("rank %d: the all_reduce succeeded", r)
		}
		same := bytes.Equal(bufs[r], ins[r])
		if withSave && !same {
			t.Fatalf("rank %d: input not restored after %v", r, errs[r])
		}
		if !withSave && r == written && same {
			t.Fatalf("rank %d: no result was written before the failure; the test does not test the restore", r)
		}
	}
}
