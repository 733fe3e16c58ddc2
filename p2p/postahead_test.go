package p2p

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/collective"
	"github.com/mooncake-go/mooncake/wire"
)

// TestReceivesPostedAhead: collective ops over endpoints that reach each other "over the
// network" post their receives before they wait for any, so each chunk lands in its output and
// none is set aside in the stash (an allocation and a second copy), however late the op's loop
// gets to it: the ring all_gather and the chain broadcast post every chunk's receive up front.
// The receiving rank holds the first data chunk it is sent until all of the op's receives are
// posted (an op that posts them one at a time, as it waits for each, never gets there); then the
// op must complete exactly with no data chunk stashed.
func TestReceivesPostedAhead(t *testing.T) {
	const cell = 1024
	opts := Options{Credits: 4, CellBytes: cell}
	const dataStep = 1 // collective's step of data messages (its headers are step 0)
	chunked := collective.Options{SmallBytes: 64, ChunkBytes: cell, FusedBytes: -1}
	for _, c := range []struct {
		name   string
		n, rx  int // ranks, and the one whose receives are watched (one peer sends it data)
		copts  collective.Options
		posted int // receives rx posts
		run    func(ctx context.Context, g *collective.Group, r int) error
	}{
		{"all_gather", 2, 1, chunked, 16, func(ctx context.Context, g *collective.Group, r int) error {
			return allGatherExact(ctx, g, r, 16*cell)
		}},
		{"broadcast", 2, 1, chunked, 16, func(ctx context.Context, g *collective.Group, r int) error {
			buf := make([]byte, 16*cell)
			if r == 0 {
				copy(buf, pattern(len(buf), 0))
			}
			if err := g.Broadcast(ctx, buf, 0); err != nil {
				return err
			}
			if !bytes.Equal(buf, pattern(len(buf), 0)) {
				return fmt.Errorf("broadcast: the buffer differs from the root's")
			}
			return nil
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			eps, _ := mkEndpointsOn(t, c.n, opts, func(h *memHub, name string) Fabric { return h.netFabric(name) })
			rx := eps[c.rx]
			// The first data chunk is held until all of the op's receives are posted. (A held
			// chunk holds up every delivery to rx, so one peer sends the data.) None of the
			// receives can complete meanwhile, so they are all still posted, or matched to
			// their message and in flight (a first chunk that started early, land.go).
			var once sync.Once
			var holds, missed atomic.Int32
			hook := func(hd chunkHdr) {
				if !wire.IsCollective(hd.tag) || hd.tag&0xFFFF != dataStep {
					return
				}
				once.Do(func() {
					holds.Add(1)
					deadline := time.Now().Add(5 * time.Second)
					for time.Now().Before(deadline) {
						rx.mu.Lock()
						n := len(rx.posted) + len(rx.inflight)
						rx.mu.Unlock()
						if n >= c.posted {
							return
						}
						time.Sleep(time.Millisecond)
					}
					missed.Add(1)
				})
			}
			// Data chunks are whole cells; the op's header messages (a few dozen bytes) go
			// through the stash when they arrive before their receive, which is fine.
			var stashed atomic.Int64
			tap := &recvTap{chunk: hook, stash: func(n int) {
				if n >= cell {
					stashed.Add(int64(n))
				}
			}}
			rx.tap.Store(tap)
			defer rx.tap.CompareAndSwap(tap, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			errs := make([]error, c.n)
			for r := range eps {
				wg.Add(1)
				go func() {
					defer wg.Done()
					g, err := collective.NewGroup(eps[r], r, c.n, 0, c.copts)
					if err == nil {
						err = c.run(ctx, g, r)
					}
					errs[r] = err
				}()
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			if holds.Load() == 0 {
				t.Fatalf("no data chunk reached rank %d's receive path", c.rx)
			}
			if missed.Load() > 0 {
				t.Fatalf("rank %d never had its %d receives posted while its first data chunk waited", c.rx, c.posted)
			}
			if n := stashed.Load(); n != 0 {
				t.Fatalf("%d bytes of data chunks went through the stash, want 0", n)
			}
		})
	}
}

// pattern is n bytes that differ by rank r.
func pattern(n, r int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + r*31 + 1)
	}
	return b
}

// allGatherExact runs an all_gather on g with rank r's input of size bytes and checks every
// block exactly.
func allGatherExact(ctx context.Context, g *collective.Group, r, size int) error {
	in := make([]byte, size)
	for i := 0; i < size/4; i++ {
		binary.LittleEndian.PutUint32(in[4*i:], uint32(i*3+r))
	}
	outs := [][]byte{make([]byte, size), make([]byte, size)}
	if err := g.AllGather(ctx, in, outs); err != nil {
		return err
	}
	for q, out := range outs {
		for i := 0; i < size/4; i++ {
			if got, want := binary.LittleEndian.Uint32(out[4*i:]), uint32(i*3+q); got != want {
				return fmt.Errorf("block %d, element %d: %d, want %d", q, i, got, want)
			}
		}
	}
	return nil
}
