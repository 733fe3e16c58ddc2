package master

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/store/api"
)

// TestBatchCallsReuseTheirSlices: batch calls from several connections at once, each on keys
// of its own with sizes of its own, get exactly their own answers while the entries and
// results slices go from call to call (run with -race: a slice used by two calls at once is a
// data race), and a call takes the slices the one before it gave back.
func TestBatchCallsReuseTheirSlices(t *testing.T) {
	srv, addr := serveMaster(t, DefaultConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const callers, rounds, keys = 4, 30, 16
	size := func(g, k int) uint64 { return uint64(100 + g*keys + k) }
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for g := range callers {
		f, err := api.DialFramed(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		c := api.NewMasterClient(f)
		id := fmt.Sprintf("c%d", g)
		if st, err := c.MountSegment(ctx, &api.MountSegmentRequest{ClientID: id, Segment: api.Segment{ID: id + "/s", Name: id + ":1", Base: 4096, Size: 1 << 30}}); err != nil || st.Code != api.OK {
			t.Fatalf("mount: %v %+v", err, st)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- func() error {
				for r := range rounds {
					ks := make([]string, keys)
					sizes := make([]uint64, keys)
					for k := range ks {
						ks[k], sizes[k] = fmt.Sprintf("%s/r%d/k%d", id, r, k), size(g, k)
					}
					ps, err := c.BatchPutStart(ctx, &api.BatchPutStartRequest{ClientID: id, Keys: ks, Sizes: sizes, Config: api.ReplicateConfig{ReplicaNum: 1}})
					if err != nil || ps.Code != api.OK || len(ps.Results) != keys {
						return fmt.Errorf("%s batch put start: %v %+v", id, err, ps)
					}
					for k, res := range ps.Results {
						if res.Code != api.OK || len(res.Replicas) != 1 || res.Replicas[0].Size != sizes[k] {
							return fmt.Errorf("%s key %d: start answered %+v", id, k, res)
						}
					}
					end, err := c.BatchPutEnd(ctx, &api.BatchKeysRequest{ClientID: id, Keys: ks})
					if err != nil || end.Code != api.OK || len(end.Results) != keys {
						return fmt.Errorf("%s batch put end: %v %+v", id, err, end)
					}
					// One key unknown: its answer must be the one in its place.
					ks[keys/2] = id + "/missing"
					got, err := c.BatchGetReplicaList(ctx, &api.BatchKeysRequest{ClientID: id, Keys: ks})
					if err != nil || got.Code != api.OK || len(got.Results) != keys {
						return fmt.Errorf("%s batch get: %v %+v", id, err, got)
					}
					for k, res := range got.Results {
						switch {
						case k == keys/2 && res.Code != api.OBJECT_NOT_FOUND:
							return fmt.Errorf("%s: the missing key answered %+v", id, res)
						case k != keys/2 && (res.Code != api.OK || res.Size != sizes[k] || len(res.Replicas) != 1):
							return fmt.Errorf("%s key %d: get answered %+v, want size %d", id, k, res, sizes[k])
						}
					}
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// What is kept holds nothing (it would keep keys and replicas from being collected).
	srv.batchBufs.mu.Lock()
	for _, p := range srv.batchBufs.free {
		for _, e := range p.entries[:cap(p.entries)] {
			if e.Op != "" || e.Key != "" || e.ClientID != "" || e.Config != nil {
				t.Errorf("a kept entry is not cleared: %+v", e)
			}
		}
		for _, r := range p.results[:cap(p.results)] {
			if r.Code != api.OK || r.Replicas != nil || r.Size != 0 || r.Message != "" {
				t.Errorf("a kept result is not cleared: %+v", r)
			}
		}
	}
	srv.batchBufs.mu.Unlock()
	// One call at a time now: each takes the slices the last one gave back.
	c := api.NewMasterClient(mustFramed(t, addr))
	first := func() *Entry {
		srv.batchBufs.mu.Lock()
		defer srv.batchBufs.mu.Unlock()
		if len(srv.batchBufs.free) == 0 {
			t.Fatal("no slices were kept")
		}
		return &srv.batchBufs.free[len(srv.batchBufs.free)-1].entries[:1][0]
	}
	for range 2 {
		before := first()
		if got, err := c.BatchGetReplicaList(ctx, &api.BatchKeysRequest{ClientID: "c0", Keys: []string{"c0/r0/k1"}}); err != nil || got.Results[0].Size != size(0, 1) {
			t.Fatalf("batch get: %v %+v", err, got)
		}
		if after := first(); after != before {
			t.Fatal("a batch call did not reuse the slices the last one gave back")
		}
	}
}

// mustFramed dials addr over the framed RPC until the test ends.
func mustFramed(t *testing.T, addr string) *api.FramedConn {
	t.Helper()
	f, err := api.DialFramed(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
