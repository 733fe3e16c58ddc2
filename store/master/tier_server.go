package master

import (
	"context"
	"log"
	"strconv"
	"time"

	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/dfs"
)

// maxTaskWait bounds how long FetchOffloadTasks holds a request open.
const maxTaskWait = 5 * time.Second

// FetchOffloadTasks returns the moves to a disk tier assigned to the client (those that started
// after AfterGen, see api.OffloadTasksRequest), waiting up to WaitMs for one when there are none
// (a long poll: a client learns of a move within one round trip).
func (s *Server) FetchOffloadTasks(ctx context.Context, r *api.OffloadTasksRequest) (*api.OffloadTasksResponse, error) {
	if r.ClientID == "" {
		return &api.OffloadTasksResponse{Status: api.Status{Code: api.INVALID_PARAMS, Message: "fetch offload tasks without a client id"}}, nil
	}
	wait := min(time.Duration(r.WaitMs)*time.Millisecond, maxTaskWait)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		if st := s.notServing(); st != nil {
			return &api.OffloadTasksResponse{Status: *st}, nil
		}
		s.touch(r.ClientID)
		s.mu.Lock()
		tasks, gen := s.state.OffloadTasksAfter(r.ClientID, r.AfterGen)
		if r.AfterGen > gen {
			// The client numbers moves from a state that is not this one (this master
			// started over without it): everything in progress.
			tasks, gen = s.state.OffloadTasksAfter(r.ClientID, 0)
		}
		wake := s.wake
		remove := s.takeLocalGarbage(r.ClientID)
		s.mu.Unlock()
		if len(tasks) > 0 || len(remove) > 0 || wait <= 0 {
			return &api.OffloadTasksResponse{RootFSDir: s.cfg.RootFSDir, Gen: gen, Tasks: tasks, Remove: remove}, nil
		}
		select {
		case <-wake:
		case <-timer.C:
			wait = 0
		case <-ctx.Done():
			return &api.OffloadTasksResponse{RootFSDir: s.cfg.RootFSDir}, nil
		}
	}
}

// OffloadDone records the end of a move to G3.
func (s *Server) OffloadDone(ctx context.Context, r *api.OffloadDoneRequest) (*api.Status, error) {
	return statusOf(s.do(ctx, Entry{Op: OpOffloadDone, ClientID: r.ClientID, Key: r.Key, Path: r.Path, File: r.File,
		Offset: r.Offset, Checksum: r.Checksum, Error: r.Error})), nil
}

// BatchOffloadDone records the ends of several moves in one batch entry.
func (s *Server) BatchOffloadDone(ctx context.Context, r *api.BatchOffloadDoneRequest) (*api.BatchStatusResponse, error) {
	out := &api.BatchStatusResponse{}
	out.Status = s.batch(ctx, r.ClientID, len(r.Items), func(i int) Entry {
		it := r.Items[i]
		return Entry{Op: OpOffloadDone, Key: it.Key, Path: it.Path, File: it.File, Offset: it.Offset, Checksum: it.Checksum, Error: it.Error}
	}, func(results []Result) { out.Results = statuses(results) })
	return out, nil
}

// PromoteDone records the end of a copy back into memory.
func (s *Server) PromoteDone(ctx context.Context, r *api.OffloadDoneRequest) (*api.Status, error) {
	return statusOf(s.do(ctx, Entry{Op: OpPromoteDone, ClientID: r.ClientID, Key: r.Key, Error: r.Error})), nil
}

// GetReplicaDesc describes key's replicas (memory and G3) without a lease or a hit: a read of
// the state, not an entry.
func (s *Server) GetReplicaDesc(ctx context.Context, r *api.KeyRequest) (*api.GetReplicaListResponse, error) {
	if st := s.notServing(); st != nil {
		return &api.GetReplicaListResponse{Status: *st}, nil
	}
	if err := ValidateKey(r.Key); err != nil {
		return &api.GetReplicaListResponse{Status: api.StatusOf(err)}, nil
	}
	var resp api.GetReplicaListResponse
	s.View(func(st *State) {
		info, ok := st.Query(r.Key)
		if !ok || !info.Complete {
			resp.Status = api.Status{Code: api.OBJECT_NOT_FOUND, Message: "key " + strconv.Quote(r.Key) + " not found"}
			return
		}
		resp.Size, resp.Replicas = info.Size, info.Replicas
	})
	return &resp, nil
}

// removeFiles deletes G3 files no object references any more (the serving master, once the
// entry that dropped them is durable).
func (s *Server) removeFiles(paths []string) {
	if s.cfg.RootFSDir == "" {
		return
	}
	for _, p := range paths {
		if err := dfs.Remove(s.cfg.RootFSDir, p); err != nil {
			log.Printf("mooncake_master: remove G3 file %s: %v", p, err)
		}
	}
}

// dfsCapacity is --global_file_segment_size, or the size of the filesystem under
// --root_fs_dir when unlimited (0 without the tier).
func (s *Server) dfsCapacity() uint64 {
	switch {
	case s.cfg.RootFSDir == "":
		return 0
	case s.cfg.GlobalFileSegmentSize > 0:
		return s.cfg.GlobalFileSegmentSize
	}
	return dfs.FSCapacity(s.cfg.RootFSDir)
}

// tempSweepPeriod is how often the serving master looks for temporary files writers killed
// mid-write left in the G3 directory (and once at start).
const tempSweepPeriod = 10 * time.Minute

// sweepTempsLoop removes stale temporary files under --root_fs_dir: at start and every
// tempSweepPeriod, those not modified for twice the move timeout (at least a minute). A
// temporary file is never referenced by the state (a file is recorded only after its rename),
// so removing one loses nothing.
func (s *Server) sweepTempsLoop(ctx context.Context) {
	age := max(2*s.cfg.PutStartDiscardTimeout, time.Minute)
	for {
		if s.notServing() == nil {
			if n, err := dfs.SweepTemps(s.cfg.RootFSDir, age); err != nil {
				log.Printf("mooncake_master: sweep of temporary G3 files: %v", err)
			} else if n > 0 {
				log.Printf("mooncake_master: removed %d temporary G3 file(s) left by interrupted writers", n)
			}
		}
		t := time.NewTimer(tempSweepPeriod)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
