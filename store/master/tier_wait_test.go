package master

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/store/api"
)

// tierServer is a master with the G3 tier over one 4 KiB segment of client c1, filled with
// four 1 KiB objects.
func tierServer(t *testing.T) *Server {
	t.Helper()
	cfg := DefaultConfig()
	cfg.RootFSDir = t.TempDir()
	cfg.EvictionRatio = 0.5
	cfg.EvictionHighWatermarkRatio = 0.9
	s := NewServer(cfg)
	ctx := context.Background()
	if st, err := s.MountSegment(ctx, &api.MountSegmentRequest{ClientID: "c1", Segment: api.Segment{ID: "s1", Name: "h1:1", Base: 1 << 20, Size: 4096}}); err != nil || st.Code != api.OK {
		t.Fatalf("mount: %v %+v", err, st)
	}
	for _, k := range []string{"a", "b", "c", "d"} {
		ps, err := s.PutStart(ctx, &api.PutStartRequest{ClientID: "c1", Key: k, Size: 1024})
		if err != nil || ps.Code != api.OK {
			t.Fatalf("put %s: %v %+v", k, err, ps)
		}
		if st, err := s.PutEnd(ctx, &api.KeyRequest{ClientID: "c1", Key: k}); err != nil || st.Code != api.OK {
			t.Fatalf("put end %s: %v %+v", k, err, st)
		}
	}
	return s
}

// finishTasks reports every move handed to c1 as written.
func finishTasks(t *testing.T, s *Server) int {
	t.Helper()
	n, err := reportTasks(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// reportTasks is finishTasks for any goroutine: it returns the error instead of failing.
func reportTasks(s *Server) (int, error) {
	resp, err := s.FetchOffloadTasks(context.Background(), &api.OffloadTasksRequest{ClientID: "c1"})
	if err != nil || resp.Code != api.OK {
		return 0, fmt.Errorf("fetch tasks: %v %+v", err, resp)
	}
	for _, task := range resp.Tasks {
		if st, err := s.OffloadDone(context.Background(), &api.OffloadDoneRequest{ClientID: "c1", Key: task.Key, Path: task.Path, Checksum: 7}); err != nil || st.Code != api.OK {
			return 0, fmt.Errorf("offload done %s: %v %+v", task.Key, err, st)
		}
	}
	return len(resp.Tasks), nil
}

// TestPutWaitsForRoom: a put into a full memory with WaitMs is held until a move to G3 frees
// room, then answered with its replica; without WaitMs it is answered Retry at once.
func TestPutWaitsForRoom(t *testing.T) {
	s := tierServer(t)
	ctx := context.Background()
	ps, err := s.PutStart(ctx, &api.PutStartRequest{ClientID: "c1", Key: "e", Size: 1024})
	if err != nil || ps.Code != api.NO_AVAILABLE_HANDLE || !ps.Retry {
		t.Fatalf("put into a full memory without a wait: %v %+v, want Retry at once", err, ps)
	}
	done := make(chan *api.PutStartResponse, 1)
	go func() {
		ps, err := s.PutStart(ctx, &api.PutStartRequest{ClientID: "c1", Key: "e", Size: 1024, WaitMs: 60_000})
		if err != nil {
			ps = &api.PutStartResponse{Status: api.Status{Code: api.INTERNAL_ERROR, Message: err.Error()}}
		}
		done <- ps
	}()
	select {
	case ps := <-done:
		t.Fatalf("the put was answered before any move ended: %+v", ps)
	case <-time.After(100 * time.Millisecond):
	}
	if n := finishTasks(t, s); n == 0 {
		t.Fatal("no move to G3 was handed out")
	}
	ps = <-done
	if ps.Code != api.OK || ps.Retry || len(ps.Replicas) != 1 || ps.Replicas[0].SegmentID != "s1" {
		t.Fatalf("the held put after the move: %+v", ps)
	}
}

// TestBatchPutWaitsForRoom: a batch none of whose keys finds room is held until moves free
// room; a batch some of whose keys find room is answered at once (those keys written while the
// others wait), the others marked Retry.
func TestBatchPutWaitsForRoom(t *testing.T) {
	s := tierServer(t)
	ctx := context.Background()
	done := make(chan *api.BatchPutStartResponse, 1)
	go func() {
		resp, err := s.BatchPutStart(ctx, &api.BatchPutStartRequest{ClientID: "c1", Keys: []string{"e", "f"}, Sizes: []uint64{1024, 1024}, WaitMs: 60_000})
		if err != nil {
			resp = &api.BatchPutStartResponse{Status: api.Status{Code: api.INTERNAL_ERROR, Message: err.Error()}}
		}
		done <- resp
	}()
	select {
	case resp := <-done:
		t.Fatalf("the batch was answered before any move ended: %+v", resp)
	case <-time.After(100 * time.Millisecond):
	}
	// The clients finish every move handed out, until the test ends.
	stop, finisher := make(chan struct{}), make(chan struct{})
	var once sync.Once
	halt := func() { once.Do(func() { close(stop); <-finisher }) }
	defer halt()
	go func() {
		defer close(finisher)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				if _, err := reportTasks(s); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	resp := <-done
	placed := map[int]api.PutStartResponse{}
	for i, r := range resp.Results {
		if r.Code == api.OK {
			placed[i] = r
		} else if !r.Retry {
			t.Fatalf("key %d: %+v, want placed or told Retry", i, r)
		}
	}
	if resp.Code != api.OK || len(resp.Results) != 2 || len(placed) == 0 {
		t.Fatalf("the held batch was answered with no key placed: %+v", resp)
	}
	if len(placed) == 1 { // the other key: asked again, held until the next move ends
		i := 1 - slices.Collect(maps.Keys(placed))[0]
		again, err := s.BatchPutStart(ctx, &api.BatchPutStartRequest{ClientID: "c1", Keys: []string{[]string{"e", "f"}[i]}, Sizes: []uint64{1024}, WaitMs: 60_000})
		if err != nil || again.Code != api.OK || again.Results[0].Code != api.OK {
			t.Fatalf("key %d asked again: %v %+v", i, err, again)
		}
		placed[i] = again.Results[0]
	}
	addrs := map[uint64]bool{}
	for i, r := range placed {
		if len(r.Replicas) != 1 {
			t.Fatalf("key %d: %+v", i, r)
		}
		addrs[r.Replicas[0].Addr] = true
	}
	if len(addrs) != 2 {
		t.Fatalf("two keys were given the same memory: %+v", placed)
	}
	// Ending both puts works: each was started exactly once.
	end, err := s.BatchPutEnd(ctx, &api.BatchKeysRequest{ClientID: "c1", Keys: []string{"e", "f"}})
	if err != nil || end.Code != api.OK || end.Results[0].Code != api.OK || end.Results[1].Code != api.OK {
		t.Fatalf("batch put end: %v %+v", err, end)
	}
	// Room for one key of two: answered at once, the second key told Retry.
	halt()
	finishTasks(t, s)
	for _, k := range []string{"a", "b", "c", "d"} {
		s.Remove(ctx, &api.RemoveRequest{ClientID: "c1", Key: k, Force: true}) // gone from memory (files, if any, too)
	}
	for _, k := range []string{"x", "y"} { // memory: e, f, x, y; revoking y leaves room for one key
		ps, err := s.PutStart(ctx, &api.PutStartRequest{ClientID: "c1", Key: k, Size: 1024})
		if err != nil || ps.Code != api.OK {
			t.Fatalf("put %s: %v %+v", k, err, ps)
		}
	}
	if st, err := s.PutRevoke(ctx, &api.KeyRequest{ClientID: "c1", Key: "y"}); err != nil || st.Code != api.OK {
		t.Fatalf("revoke y: %v %+v", err, st)
	}
	resp, err = s.BatchPutStart(ctx, &api.BatchPutStartRequest{ClientID: "c1", Keys: []string{"g", "h"}, Sizes: []uint64{1024, 1024}, WaitMs: 60_000})
	if err != nil || resp.Code != api.OK || len(resp.Results) != 2 {
		t.Fatalf("batch with room for one: %v %+v", err, resp)
	}
	if g, h := resp.Results[0], resp.Results[1]; g.Code != api.OK || len(g.Replicas) != 1 || h.Code != api.NO_AVAILABLE_HANDLE || !h.Retry {
		t.Fatalf("batch with room for one key: g %+v, h %+v; want g placed and h told Retry", g, h)
	}
}

// TestHeldPutAnsweredWhenNotServing: a put held for room is answered (Retry) once this master
// stops serving, not at the end of its wait, so that its client turns to the new leader.
func TestHeldPutAnsweredWhenNotServing(t *testing.T) {
	s := tierServer(t)
	done := make(chan *api.PutStartResponse, 1)
	go func() {
		ps, _ := s.PutStart(context.Background(), &api.PutStartRequest{ClientID: "c1", Key: "e", Size: 1024, WaitMs: 60_000})
		done <- ps
	}()
	select {
	case ps := <-done:
		t.Fatalf("the put was answered while memory was full and the master served: %+v", ps)
	case <-time.After(100 * time.Millisecond):
	}
	s.mu.Lock()
	s.ha = &haState{} // as after a step-down: not serving
	s.mu.Unlock()
	select {
	case ps := <-done:
		if ps == nil || !ps.Retry {
			t.Fatalf("held put after the step-down: %+v, want Retry", ps)
		}
	case <-time.After(maxPutWait - 2*time.Second):
		t.Fatalf("a held put was not answered %v after its master stopped serving (it checks every %v; its wait ends after %v)",
			maxPutWait-2*time.Second, servingCheck, maxPutWait)
	}
}

// TestFetchOffloadTasksAfterGen: a poll with AfterGen gets only the moves started since the
// answer that gave it, waits for a new one instead of returning the moves already handed out,
// and gets every move again when its AfterGen is from a state this master does not have.
func TestFetchOffloadTasksAfterGen(t *testing.T) {
	s := tierServer(t)
	ctx := context.Background()
	fetch := func(after uint64, waitMs int64) *api.OffloadTasksResponse {
		t.Helper()
		resp, err := s.FetchOffloadTasks(ctx, &api.OffloadTasksRequest{ClientID: "c1", AfterGen: after, WaitMs: waitMs})
		if err != nil || resp.Code != api.OK {
			t.Fatalf("fetch after %d: %v %+v", after, err, resp)
		}
		return resp
	}
	keys := func(r *api.OffloadTasksResponse) (out []string) {
		for _, task := range r.Tasks {
			out = append(out, task.Key)
		}
		return out
	}
	// A put into the full memory starts the moves of the two least recently used objects.
	s.PutStart(ctx, &api.PutStartRequest{ClientID: "c1", Key: "e", Size: 1024})
	all := fetch(0, 0)
	if got := keys(all); !slices.Equal(got, []string{"a", "b"}) || all.Gen == 0 {
		t.Fatalf("every move: %v (gen %d), want [a b] and a generation", got, all.Gen)
	}
	if r := fetch(all.Gen, 0); len(r.Tasks) != 0 || r.Gen != all.Gen {
		t.Fatalf("moves after generation %d: %v (gen %d), want none", all.Gen, keys(r), r.Gen)
	}
	if r := fetch(all.Gen+1000, 0); !slices.Equal(keys(r), []string{"a", "b"}) || r.Gen != all.Gen {
		t.Fatalf("a cursor from another state: %v (gen %d), want every move again", keys(r), r.Gen)
	}
	// A long poll with the cursor waits while only a and b are moving ...
	got := make(chan *api.OffloadTasksResponse, 1)
	go func() {
		resp, _ := s.FetchOffloadTasks(ctx, &api.OffloadTasksRequest{ClientID: "c1", AfterGen: all.Gen, WaitMs: 60_000})
		got <- resp
	}()
	select {
	case r := <-got:
		t.Fatalf("a poll after generation %d returned %v with no new move", all.Gen, keys(r))
	case <-time.After(200 * time.Millisecond):
	}
	for _, task := range all.Tasks {
		if st, err := s.OffloadDone(ctx, &api.OffloadDoneRequest{ClientID: "c1", Key: task.Key, Path: task.Path, Checksum: 7}); err != nil || st.Code != api.OK {
			t.Fatalf("offload done %s: %v %+v", task.Key, err, st)
		}
	}
	// ... and returns the next moves only, once puts fill memory again.
	for _, k := range []string{"e", "f"} {
		ps, err := s.PutStart(ctx, &api.PutStartRequest{ClientID: "c1", Key: k, Size: 1024})
		if err != nil || ps.Code != api.OK {
			t.Fatalf("put %s: %v %+v", k, err, ps)
		}
		s.PutEnd(ctx, &api.KeyRequest{ClientID: "c1", Key: k})
	}
	s.PutStart(ctx, &api.PutStartRequest{ClientID: "c1", Key: "g", Size: 1024})
	select {
	case r := <-got:
		if ks := keys(r); len(ks) == 0 || slices.Contains(ks, "a") || slices.Contains(ks, "b") || r.Gen <= all.Gen {
			t.Fatalf("the poll after generation %d returned %v (gen %d), want only new moves", all.Gen, ks, r.Gen)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the poll did not return when new moves started")
	}
}
