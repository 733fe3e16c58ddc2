package collective

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/collective/reduce"
)

// BenchmarkShmAllReduce: float32 SUM all_reduce on the fast path, ranks as goroutines of this
// process (go test -bench ShmAllReduce -benchtime 200x ./collective; SHM_BENCH_CHUNK sets the
// chunk). The MB/s column is algbw; compare with BenchmarkMemcpy.
func BenchmarkShmAllReduce(b *testing.B) {
	chunk, _ := strconv.Atoi(os.Getenv("SHM_BENCH_CHUNK"))
	for _, n := range []int{2, 4} {
		for _, size := range []int{8, 4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20} {
			b.Run(fmt.Sprintf("n%d/%dB", n, size), func(b *testing.B) {
				gs, _ := shmGroups(b, n, chunk)
				bufs := make([][]byte, n)
				for r := range bufs {
					bufs[r] = make([]byte, size)
					for i := range bufs[r] {
						bufs[r][i] = [4]byte{0, 0, 0x80, 0x3f}[i%4] // float32 1.0
					}
				}
				ctx := context.Background()
				var wg sync.WaitGroup
				for r := 1; r < n; r++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; i < b.N+1; i++ {
							gs[r].AllReduce(ctx, bufs[r], reduce.Float32, reduce.Sum)
						}
					}()
				}
				gs[0].AllReduce(ctx, bufs[0], reduce.Float32, reduce.Sum)
				b.SetBytes(int64(size))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					gs[0].AllReduce(ctx, bufs[0], reduce.Float32, reduce.Sum)
				}
				b.StopTimer()
				wg.Wait()
			})
		}
	}
}

func BenchmarkMemcpy(b *testing.B) {
	for _, size := range []int{1 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			x, y := make([]byte, size), make([]byte, size)
			for i := range y {
				y[i] = byte(i) // touch every page: no zero-page reads
			}
			copy(x, y)
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				copy(x, y)
			}
		})
	}
}

var _ = time.Second
