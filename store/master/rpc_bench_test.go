package master

import (
	"context"
	"fmt"
	"testing"

	"github.com/mooncake-go/mooncake/store/api"
)

// benchMounted serves a master, dials it over the framed RPC and mounts client c1's segment of
// size bytes there (the master never touches the memory).
func benchMounted(b *testing.B, size uint64) (*api.MasterClient, context.Context) {
	_, addr := startSecure(b, api.ServerSecurity{})
	f, err := api.DialFramedSecure(addr, api.ClientSecurity{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	c := api.NewMasterClient(f)
	ctx := context.Background()
	if st, err := c.MountSegment(ctx, &api.MountSegmentRequest{ClientID: "c1", Segment: api.Segment{ID: "c1/0", Name: "c1:1", Base: 4096, Size: size}}); err != nil || st.Code != api.OK {
		b.Fatal(err, st)
	}
	return c, ctx
}

// BenchmarkBatchPutRPC: a batch put of 64 keys of 4 KiB (BatchPutStart, BatchPutEnd) over the
// framed RPC, client and master in this process, with a master holding no objects and one
// holding 200,000: the time and the allocations of a call (their collection grows with the
// objects held).
func BenchmarkBatchPutRPC(b *testing.B) {
	for _, held := range []int{0, 200000} {
		b.Run(fmt.Sprintf("held=%d", held), func(b *testing.B) {
			c, ctx := benchMounted(b, 1<<40)
			next := 0
			batch := func() {
				keys := make([]string, 64)
				sizes := make([]uint64, 64)
				for i := range keys {
					keys[i] = fmt.Sprintf("r1-1765100000000000/%d", next)
					sizes[i] = 4096
					next++
				}
				r, err := c.BatchPutStart(ctx, &api.BatchPutStartRequest{ClientID: "c1", Keys: keys, Sizes: sizes, Config: api.ReplicateConfig{ReplicaNum: 1}})
				if err != nil || r.Code != api.OK {
					b.Fatal(err, r)
				}
				e, err := c.BatchPutEnd(ctx, &api.BatchKeysRequest{ClientID: "c1", Keys: keys})
				if err != nil || e.Code != api.OK {
					b.Fatal(err, e)
				}
			}
			for next < held {
				batch()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				batch()
			}
		})
	}
}

// BenchmarkGetReplicaListRPC: a get's master call (a lease grant) of a 4 KiB value the master
// holds the bytes of, over the framed RPC.
func BenchmarkGetReplicaListRPC(b *testing.B) {
	c, ctx := benchMounted(b, 1<<30)
	if r, err := c.PutStart(ctx, &api.PutStartRequest{ClientID: "c1", Key: "k", Size: 4096, Config: api.ReplicateConfig{ReplicaNum: 1}}); err != nil || r.Code != api.OK {
		b.Fatal(err, r)
	}
	if r, err := c.PutEnd(ctx, &api.KeyRequest{ClientID: "c1", Key: "k", Value: make([]byte, 4096)}); err != nil || r.Code != api.OK {
		b.Fatal(err, r)
	}
	b.ReportAllocs()
	for b.Loop() {
		if r, err := c.GetReplicaList(ctx, &api.KeyRequest{ClientID: "c1", Key: "k"}); err != nil || len(r.Value) != 4096 {
			b.Fatal(err, r)
		}
	}
}
