package client

import (
	"context"
	"fmt"
	"testing"

	"github.com/mooncake-go/mooncake/engine"
)

// BenchmarkPutGet measures put+get+remove through an in-process master (one host: shm path).
func BenchmarkPutGet(b *testing.B) {
	for _, size := range []int{4 << 10, 1 << 20} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			_, addr := startMasterB(b)
			a := newClientB(b, addr, 0)
			newClientB(b, addr, 512<<20) // the segment the values land on
			val := pattern(size, 1)
			ctx := context.Background()
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				key := fmt.Sprint("k", i)
				if err := a.PutValue(ctx, key, val, PutOptions{}); err != nil {
					b.Fatal(err)
				}
				if _, err := a.GetValue(ctx, key); err != nil {
					b.Fatal(err)
				}
				a.Remove(ctx, []string{key}, true)
			}
		})
	}
}

// BenchmarkRPC measures one master round trip (Exists on a missing key).
func BenchmarkRPC(b *testing.B) {
	_, addr := startMasterB(b)
	a := newClientB(b, addr, 0)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, errs := a.Exists(ctx, []string{"nope"}); errs[0] != nil {
			b.Fatal(errs[0])
		}
	}
}

// BenchmarkConcurrentGets: 16 goroutines of one client getting 4 KiB values over tcp, with
// ForeignThreadCalls single calls in flight before batching (the C ABI's setting), two, and one (the default)
// (every call made while another is in flight goes into the next batch).
func BenchmarkConcurrentGets(b *testing.B) {
	for _, parallel := range []int{1, 2, ForeignThreadCalls} {
		b.Run(fmt.Sprint("parallel=", parallel), func(b *testing.B) {
			_, addr := startMasterB(b)
			tcp := Config{Engine: engine.Config{ForceTCP: true}}
			a := newClientWith(b, addr, 0, tcp)
			newClientWith(b, addr, 64<<20, tcp)
			a.lookups.parallel = parallel
			ctx := context.Background()
			for i := 0; i < 64; i++ {
				if err := a.PutValue(ctx, fmt.Sprint("k", i), pattern(4<<10, byte(i)), PutOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if _, err := a.GetValue(ctx, fmt.Sprint("k", i%64)); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		})
	}
}
