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
