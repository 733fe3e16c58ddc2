package p2p

import (
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

// TestAllGatherReceivesPostedAhead: the collective ring all_gather over endpoints
// that reach each other "over the network" posts every receive before it sends, so each chunk
// lands in its output and none is set aside in the stash (an allocation and a second copy),
// however late the op's loop gets to it. Rank 1 holds the first data chunk it is sent until all
// of the op's receives are posted (an op that posts them one at a time, as it waits for each,
// never gets there), then the op must complete exactly with no data chunk stashed.
func TestAllGatherReceivesPostedAhead(t *testing.T) {
	const cell = 1024
	opts := Options{Credits: 4, CellBytes: cell}
	const dataStep = 1 // collective's step of data messages (its headers are step 0)
	for _, c := range []struct {
		name   string
		size   int // each rank's input
		copts  collective.Options
		posted int // receives the op posts: chunks from the other rank
	}{
		{"ring", 16 * cell, collective.Options{SmallBytes: 64, ChunkBytes: cell, FusedBytes: -1}, 16},
	} {
		t.Run(c.name, func(t *testing.T) {
			eps, _ := mkEndpointsOn(t, 2, opts, func(h *memHub, name string) Fabric { return h.netFabric(name) })
			rx := eps[1]
			var once sync.Once
			reached := make(chan bool, 1)
			hook := func(hd chunkHdr) {
				if !wire.IsCollective(hd.tag) || hd.tag&0xFFFF != dataStep {
					return
				}
				once.Do(func() {
					deadline := time.Now().Add(5 * time.Second)
					for time.Now().Before(deadline) {
						rx.mu.Lock()
						n := len(rx.posted)
						rx.mu.Unlock()
						if n >= c.posted {
							reached <- true
							return
						}
						time.Sleep(time.Millisecond)
					}
					reached <- false
				})
			}
			// Data chunks are whole cells; the op's header message (a few dozen bytes) goes
			// through the stash when it arrives before its receive, which is fine.
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
			errs := make([]error, 2)
			for r := range eps {
				wg.Add(1)
				go func() {
					defer wg.Done()
					g, err := collective.NewGroup(eps[r], r, 2, 0, c.copts)
					if err == nil {
						err = allGatherExact(ctx, g, r, c.size)
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
			select {
			case ok := <-reached:
				if !ok {
					t.Fatalf("rank 1 never had its %d receives posted while its first data chunk waited", c.posted)
				}
			default:
				t.Fatal("no data chunk reached rank 1's receive path")
			}
			if n := stashed.Load(); n != 0 {
				t.Fatalf("%d bytes of data chunks went through the stash, want 0", n)
			}
		})
	}
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
