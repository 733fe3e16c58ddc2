package client

import (
	"context"
	"fmt"
	"testing"
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
