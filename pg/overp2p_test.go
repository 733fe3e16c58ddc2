package pg_test

// The collective algorithms over p2p endpoints, every rank in this process with its own
// transfer engine (the composition package pg makes; p2p does not know the algorithms).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/collective"
	"github.com/mooncake-go/mooncake/collective/reduce"
	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/p2p"
	"github.com/mooncake-go/mooncake/wire"
)

// mkEndpoints connects n p2p endpoints with opts, each over its own engine.
func mkEndpoints(t testing.TB, n int, opts p2p.Options) []*p2p.Endpoint {
	t.Helper()
	eps := make([]*p2p.Endpoint, n)
	for r := range eps {
		eng, err := engine.New(context.Background(), engine.Config{LocalServerName: "127.0.0.1", MetadataServer: "P2PHANDSHAKE"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { eng.Close() })
		ep, err := p2p.New(p2p.EngineFabric(eng), r, n, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		eps[r] = ep
	}
	for _, a := range eps {
		for _, b := range eps {
			if err := a.Connect(b.Info()); err != nil {
				t.Fatal(err)
			}
		}
	}
	return eps
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// The collective algorithms over real p2p endpoints (in-process engines).
func TestCollectivesOverP2P(t *testing.T) {
	for n := 1; n <= 5; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			eps := mkEndpoints(t, n, p2p.Options{Credits: 3, CellBytes: 128})
			var wg sync.WaitGroup
			errs := make([]error, n)
			const count = 1001
			for r := 0; r < n; r++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					g, err := collective.NewGroup(eps[r], r, n, 0, collective.Options{SmallBytes: 64, ChunkBytes: 200})
					if err != nil {
						errs[r] = err
						return
					}
					ctx := ctxT(t, 20*time.Second)
					for it := 0; it < 3; it++ {
						buf := make([]byte, 4*count)
						for i := 0; i < count; i++ {
							buf[4*i] = byte(r + i)
						}
						if err := g.AllReduce(ctx, buf, reduce.Int32, reduce.Sum); err != nil {
							errs[r] = err
							return
						}
						for i := 0; i < count; i++ {
							want := 0
							for q := 0; q < n; q++ {
								want += int(byte(q + i))
							}
							if got := int(buf[4*i]) | int(buf[4*i+1])<<8; got != want {
								errs[r] = fmt.Errorf("element %d: %d want %d", i, got, want)
								return
							}
						}
						outs := make([][]byte, n)
						for q := range outs {
							outs[q] = make([]byte, 333)
						}
						if err := g.AllGather(ctx, pat(333, r), outs); err != nil {
							errs[r] = err
							return
						}
						for q := range outs {
							if !bytes.Equal(outs[q], pat(333, q)) {
								errs[r] = fmt.Errorf("all_gather block %d", q)
								return
							}
						}
						if err := g.Barrier(ctx); err != nil {
							errs[r] = err
							return
						}
					}
				}()
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
		})
	}
}

func TestCollectiveMismatchAndAbortOverP2P(t *testing.T) {
	const n = 3
	eps := mkEndpoints(t, n, p2p.Options{Credits: 2, CellBytes: 64})
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, _ := collective.NewGroup(eps[r], r, n, 0, collective.Options{})
			ctx := ctxT(t, 10*time.Second)
			cnt := 10
			if r == 1 {
				cnt = 20
			}
			errs[r] = g.AllReduce(ctx, make([]byte, 4*cnt), reduce.Float32, reduce.Sum)
			if errs[r] == nil {
				return
			}
			// rank 2 skips the next op: rank 0 times out, its abort ends rank 1's wait.
			switch r {
			case 2:
				return
			case 0:
				c, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
				ctx = c
			}
			errs[r] = g.AllReduce(ctx, make([]byte, 40), reduce.Float32, reduce.Sum)
		}()
	}
	wg.Wait()
	if errs[2] == nil || !strings.Contains(errs[2].Error(), "all_reduce: rank 1 has 20 float32 elements, rank 0 has 10") {
		t.Fatalf("rank 2: %v", errs[2])
	}
	var ae *wire.AbortError
	if !errors.As(errs[1], &ae) || ae.Peer != 0 || len(ae.Failed) != 1 || ae.Failed[0] != 2 {
		t.Fatalf("rank 1: %v", errs[1])
	}
	if !strings.Contains(errs[0].Error(), "peer rank 2 did not answer within") {
		t.Fatalf("rank 0: %v", errs[0])
	}
}

// TestMismatchWithDataAhead: every op but broadcast and reduce sends its first data before the
// members' headers are checked (all_reduce, in place, writes into its buffer only after the
// check). When the members disagree on the sizes (each path of each, roots 0 and 1, rank 1 the
// odd one), every rank still fails with the same MismatchError, a failed all_reduce leaves its
// input as it was, the next op is exact, and nothing is left of the failed op's data: a receive
// of it afterwards fails (its tag space was dropped) instead of finding it queued.
func TestMismatchWithDataAhead(t *testing.T) {
	const n = 3
	allGather := func(ctx context.Context, g *collective.Group, r, size int) (bool, error) {
		outs := make([][]byte, n)
		for q := range outs {
			outs[q] = make([]byte, size)
		}
		if err := g.AllGather(ctx, pat(size, r), outs); err != nil {
			return false, err
		}
		for q := range outs {
			if !bytes.Equal(outs[q], pat(size, q)) {
				return false, nil
			}
		}
		return true, nil
	}
	allToAll := func(ctx context.Context, g *collective.Group, r, size int) (bool, error) {
		ins, outs := make([][]byte, n), make([][]byte, n)
		for q := range ins {
			ins[q] = pat(size, 10*r+q)
			outs[q] = make([]byte, size)
		}
		if r == 1 && size != 3000 { // rank 1 sends larger pieces to the others in the failing op
			ins[0], ins[2] = pat(size+2000, 10), pat(size+2000, 12)
		}
		if err := g.AllToAll(ctx, ins, outs); err != nil {
			return false, err
		}
		for q := range outs {
			if !bytes.Equal(outs[q], pat(size, 10*q+r)) {
				return false, nil
			}
		}
		return true, nil
	}
	allReduce := func(ctx context.Context, g *collective.Group, r, size int) (bool, error) {
		buf := pat(size, r)
		if err := g.AllReduce(ctx, buf, reduce.Uint8, reduce.Max); err != nil {
			if !bytes.Equal(buf, pat(size, r)) { // in place: a failed check leaves the input
				return false, fmt.Errorf("the failed all_reduce changed its input (%v)", err)
			}
			return false, err
		}
		want := make([]byte, size)
		for q := 0; q < n; q++ {
			for i, b := range pat(size, q) {
				want[i] = max(want[i], b)
			}
		}
		return bytes.Equal(buf, want), nil
	}
	reduceScatter := func(ctx context.Context, g *collective.Group, r, size int) (bool, error) {
		ins := make([][]byte, n)
		for q := range ins {
			ins[q] = pat(size, 10*r+q)
		}
		out := make([]byte, size)
		if err := g.ReduceScatter(ctx, ins, out, reduce.Uint8, reduce.Max); err != nil {
			return false, err
		}
		want := make([]byte, size)
		for q := 0; q < n; q++ {
			for i, b := range pat(size, 10*q+r) {
				want[i] = max(want[i], b)
			}
		}
		return bytes.Equal(out, want), nil
	}
	gather := func(root int) func(ctx context.Context, g *collective.Group, r, size int) (bool, error) {
		return func(ctx context.Context, g *collective.Group, r, size int) (bool, error) {
			var outs [][]byte
			if r == root {
				outs = make([][]byte, n)
				for q := range outs {
					outs[q] = make([]byte, size)
				}
			}
			if err := g.Gather(ctx, pat(size, r), outs, root); err != nil {
				return false, err
			}
			for q := range outs {
				if !bytes.Equal(outs[q], pat(size, q)) {
					return false, nil
				}
			}
			return true, nil
		}
	}
	scatter := func(root int) func(ctx context.Context, g *collective.Group, r, size int) (bool, error) {
		return func(ctx context.Context, g *collective.Group, r, size int) (bool, error) {
			var ins [][]byte
			if r == root {
				ins = make([][]byte, n)
				for q := range ins {
					ins[q] = pat(size, q)
				}
			}
			out := make([]byte, size)
			if err := g.Scatter(ctx, ins, out, root); err != nil {
				return false, err
			}
			return bytes.Equal(out, pat(size, r)), nil
		}
	}
	for _, c := range []struct {
		name string
		opts collective.Options
		op   func(ctx context.Context, g *collective.Group, r, size int) (bool, error)
	}{
		{"all_gather ring", collective.Options{SmallBytes: 64, ChunkBytes: 512}, allGather},
		{"all_gather direct", collective.Options{}, allGather},
		{"all_to_all", collective.Options{FusedBytes: -1}, allToAll},
		{"all_reduce ring", collective.Options{SmallBytes: 64, ChunkBytes: 512, FusedBytes: -1}, allReduce},
		{"all_reduce recursive", collective.Options{FusedBytes: -1}, allReduce},
		{"reduce_scatter ring", collective.Options{SmallBytes: 64, ChunkBytes: 512}, reduceScatter},
		{"reduce_scatter direct", collective.Options{}, reduceScatter},
		{"gather to 0", collective.Options{}, gather(0)},
		{"gather to 1", collective.Options{}, gather(1)},
		{"scatter from 0", collective.Options{}, scatter(0)},
		{"scatter from 1", collective.Options{}, scatter(1)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if raceDetector && c.name == "all_reduce ring" {
				// The next op's all-gather lands chunks that this rank's sender read earlier,
				// ordered through the peers and invisible to the detector (race_on_test.go).
				t.Skip("cross-engine ordering is invisible to the race detector; `make test` runs this case without -race")
			}
			eps := mkEndpoints(t, n, p2p.Options{Credits: 2, CellBytes: 256})
			var wg sync.WaitGroup
			errs, again := make([]error, n), make([]error, n)
			for r := 0; r < n; r++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					g, err := collective.NewGroup(eps[r], r, n, 0, c.opts)
					if err != nil {
						errs[r] = err
						return
					}
					ctx := ctxT(t, 20*time.Second)
					size := 4000
					if r == 1 && c.name != "all_to_all" {
						size = 6000
					}
					seq := g.Seq()
					_, errs[r] = c.op(ctx, g, r, size)
					if ok, err := c.op(ctx, g, r, 3000); err != nil || !ok {
						again[r] = fmt.Errorf("the next op: %v, exact: %v", err, ok)
						return
					}
					// Every peer's data of the failed op arrived before its next op's.
					cx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
					defer cancel()
					if got, err := eps[r].Recv(cx, wire.AnySource, wire.Tag(seq, 1), make([]byte, 8192)); err == nil {
						again[r] = fmt.Errorf("%d bytes of the failed op's data were still queued", got)
					}
				}()
			}
			wg.Wait()
			for r := 0; r < n; r++ {
				var me *collective.MismatchError
				if !errors.As(errs[r], &me) || errs[r].Error() != errs[0].Error() {
					t.Errorf("rank %d: %v (rank 0: %v)", r, errs[r], errs[0])
				}
				if again[r] != nil {
					t.Errorf("rank %d: %v", r, again[r])
				}
			}
		})
	}
}
