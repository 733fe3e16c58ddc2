package reduce

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// Run with: go test -run '^$' -bench . -benchtime 20x ./collective/reduce/
// SetBytes is the size of one buffer, for Reduce and copy alike, so MB/s compares directly
// with memcpy of the same bytes (the reduction reads two buffers and writes one).

var benchSizes = []int{1 << 20, 4 << 20, 16 << 20, 64 << 20}

func sizeName(n int) string { return fmt.Sprintf("%dMiB", n>>20) }

// benchInput: n bytes of normal values (no NaN, inf or subnormals, which some CPUs slow down).
func benchInput(dt DType, n int) []byte {
	es, _ := ElemSize(dt)
	r := rand.New(rand.NewPCG(uint64(n), 9))
	b := make([]byte, n)
	for i := 0; i < n/es; i++ {
		v := r.NormFloat64() + 3
		refStore(dt, b, i, refElem{i: int64(v), f: float32(v), d: v})
	}
	return b
}

// BenchmarkCopy is the memcpy baseline: copy() of the same number of bytes.
func BenchmarkCopy(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(sizeName(n), func(b *testing.B) {
			// src must be written: untouched pages all map the shared zero page, which would
			// make the source cache-resident whatever n is.
			dst, src := make([]byte, n), benchInput(Float32, n)
			copy(dst, src)
			b.SetBytes(int64(n))
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}

// BenchmarkReduce: dst = dst + src (SUM) at the default level.
func BenchmarkReduce(b *testing.B) {
	for _, dt := range []DType{Float32, BFloat16, Float16} {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("%v/%s", dt, sizeName(n)), func(b *testing.B) {
				dst, src := benchInput(dt, n), benchInput(dt, n)
				b.SetBytes(int64(n))
				for b.Loop() {
					if err := Reduce(dst, src, dt, Sum); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// benchSum times SUM of two n-byte buffers of dt at level l.
func benchSum(b *testing.B, l level, dt DType, n int) {
	useLevel(b, l)
	dst, src := benchInput(dt, n), benchInput(dt, n)
	b.SetBytes(int64(n))
	for b.Loop() {
		_ = Reduce(dst, src, dt, Sum)
	}
}

// BenchmarkReduceLevels: every available level at 1 MiB and 16 MiB.
func BenchmarkReduceLevels(b *testing.B) {
	for _, l := range availableLevels() {
		for _, dt := range []DType{Float32, BFloat16, Float16} {
			for _, n := range []int{1 << 20, 16 << 20} {
				b.Run(fmt.Sprintf("%v/%v/%s", l, dt, sizeName(n)), func(b *testing.B) { benchSum(b, l, dt, n) })
			}
		}
	}
}

// BenchmarkReduceMany: k inputs into a separate dst in one pass; bytes = one buffer.
func BenchmarkReduceMany(b *testing.B) {
	for _, dt := range []DType{Float32, BFloat16} {
		for _, k := range []int{2, 4, 8} {
			n := 16 << 20
			b.Run(fmt.Sprintf("%v/k=%d/%s", dt, k, sizeName(n)), func(b *testing.B) {
				srcs := make([][]byte, k)
				for j := range srcs {
					srcs[j] = benchInput(dt, n)
				}
				dst := make([]byte, n)
				b.SetBytes(int64(n))
				for b.Loop() {
					_ = ReduceMany(dst, srcs, dt, Sum)
				}
			})
		}
	}
}

// BenchmarkSmall compares the pure Go and the C kernels on small inputs (sets smallBytes).
func BenchmarkSmall(b *testing.B) {
	levels := []level{levelGo, bestLevel()}
	for _, dt := range []DType{Float32, BFloat16} {
		for _, n := range []int{16, 64, 128, 256, 512, 1024, 4096} {
			for _, l := range levels {
				b.Run(fmt.Sprintf("%v/%dB/%v", dt, n, l), func(b *testing.B) { benchSum(b, l, dt, n) })
			}
		}
	}
}

func BenchmarkDivide(b *testing.B) {
	for _, dt := range []DType{Float32, BFloat16, Float16} {
		n := 16 << 20
		b.Run(fmt.Sprintf("%v/%s", dt, sizeName(n)), func(b *testing.B) {
			dst := benchInput(dt, n)
			b.SetBytes(int64(n))
			for b.Loop() {
				_ = Divide(dst, dt, 3)
			}
		})
	}
}

// BenchmarkReduceVsCopy alternates copy() and Reduce (SUM) of the same size on separate
// buffers within each iteration, so both see the same machine conditions (this matters on a
// shared host), and reports each one's GB/s of buffer size and their ratio.
func BenchmarkReduceVsCopy(b *testing.B) {
	for _, dt := range []DType{Float32, BFloat16, Float16} {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("%v/%s", dt, sizeName(n)), func(b *testing.B) {
				dst, src := benchInput(dt, n), benchInput(dt, n)
				cdst, csrc := make([]byte, n), benchInput(dt, n)
				copy(cdst, csrc)
				var tc, tr time.Duration
				for b.Loop() {
					t0 := time.Now()
					copy(cdst, csrc)
					t1 := time.Now()
					if err := Reduce(dst, src, dt, Sum); err != nil {
						b.Fatal(err)
					}
					tr += time.Since(t1)
					tc += t1.Sub(t0)
				}
				gbs := func(d time.Duration) float64 { return float64(n) * float64(b.N) / d.Seconds() / 1e9 }
				b.ReportMetric(gbs(tc), "copy-GB/s")
				b.ReportMetric(gbs(tr), "reduce-GB/s")
				b.ReportMetric(gbs(tr)/gbs(tc), "ratio")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
