package client

import (
	"context"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/internal/memview"
	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/dfs"
)

// The client's part of the storage tiers (the master decides, see store/master/tier.go):
//
//   - offloadLoop long-polls the master for moves to G3 assigned to this client (objects whose
//     memory copy lies in this client's segment), writes each object's bytes straight from the
//     segment to its file under the G3 directory (dfs.Write: temporary name, checksum, rename)
//     and reports the checksum with OffloadDone;
//   - a get whose only copy is a G3 file reads it with dfs.Read, which verifies the header and
//     the checksum, so a damaged or missing file is an error for that key, never wrong bytes;
//   - when the master hands the reader a promotion replica, the reader writes the bytes it just
//     read into it and reports PromoteDone;
//   - a put that finds memory full while moves to G3 are in progress retries until its RPC
//     timeout.

// offloadWorkers is how many objects one client writes to G3 at once.
const offloadWorkers = 4

type tierCounters struct {
	diskReads, offloaded, offloadFailed, promoted atomic.Uint64
	offloadRPCReads                               atomic.Uint64 // reads of another client's local disk (offload.go)
}

// TierStats are the client's tier counters.
type TierStats struct {
	DiskReads     uint64 // gets served from a G3 file
	Offloaded     uint64 // objects this client wrote to G3
	OffloadFailed uint64
	Promoted      uint64 // objects this client copied back into memory
	// OffloadRPCReads: gets served by another client's SSD offload read server.
	OffloadRPCReads uint64
}

// TierStats returns the client's tier counters.
func (c *Client) TierStats() TierStats {
	return TierStats{DiskReads: c.tiers.diskReads.Load(), Offloaded: c.tiers.offloaded.Load(),
		OffloadFailed: c.tiers.offloadFailed.Load(), Promoted: c.tiers.promoted.Load(), OffloadRPCReads: c.tiers.offloadRPCReads.Load()}
}

// ReplicaDesc describes where key's copies live (memory, G3 disk), without taking a lease.
func (c *Client) ReplicaDesc(ctx context.Context, key string) ([]api.Replica, error) {
	key, err := c.tkey(key)
	if err != nil {
		return nil, err
	}
	rctx, cancel := c.rpcCtx(ctx)
	g, err := c.master.GetReplicaDesc(rctx, &api.KeyRequest{ClientID: c.id, Key: key})
	cancel()
	if err != nil {
		return nil, c.rpcErr("replica description of "+quote(key), err)
	}
	if err := g.Err(); err != nil {
		return nil, fmt.Errorf("replica description of %s: %w", quote(key), err)
	}
	return g.Replicas, nil
}

// RootFSDir is the master's G3 directory ("" without the tier).
func (c *Client) RootFSDir() string { return c.rootFS }

// putStart asks for room. While the master answers that memory is full with moves to a disk
// tier in progress (Retry), the master holds the request until a move frees room (WaitMs); a
// master that answers at once is asked again after a short sleep.
func (c *Client) putStart(ctx context.Context, key string, size uint64, cfg api.ReplicateConfig, upsert bool) (*api.PutStartResponse, error) {
	cfg = c.placement(cfg)
	deadline := time.Now().Add(c.cfg.RPCTimeout)
	var wait roomWait
	for {
		rctx, cancel := c.rpcCtx(ctx)
		ps, err := c.master.PutStart(rctx, &api.PutStartRequest{ClientID: c.id, Key: key, Size: size, Config: cfg, Upsert: upsert,
			WaitMs: wait.ms(c, deadline)})
		cancel()
		if err != nil {
			return nil, c.rpcErr("put "+quote(key), err)
		}
		if !ps.Retry || !wait.again(ctx, deadline) {
			return ps, nil
		}
	}
}

// roomWait paces a put's requests for room (PutStartRequest.WaitMs).
type roomWait struct {
	sent    time.Time
	waitMs  int64
	backoff time.Duration
}

// ms is the WaitMs of a request sent now that must be answered by deadline: the time left,
// less a margin for the answer to come back within the RPC timeout.
func (w *roomWait) ms(c *Client, deadline time.Time) int64 {
	w.sent = time.Now()
	w.waitMs = max(0, (time.Until(deadline) - c.cfg.RPCTimeout/4).Milliseconds())
	return w.waitMs
}

// again reports whether to ask again after a Retry answer, sleeping first unless the master
// held the request for a good part of its wait (a master that does not hold requests answers
// at once, and so does any master to a request with no wait left: those are polled).
func (w *roomWait) again(ctx context.Context, deadline time.Time) bool {
	if time.Now().After(deadline) || ctx.Err() != nil {
		return false
	}
	if w.waitMs > 0 && time.Since(w.sent) >= time.Duration(w.waitMs)*time.Millisecond/2 {
		return true
	}
	w.backoff = min(max(2*w.backoff, time.Millisecond), 5*time.Millisecond) // moves free room every few ms
	if time.Now().Add(w.backoff).After(deadline) {
		return false
	}
	return sleepCtx(ctx, w.backoff)
}

func (c *Client) readDisk(ctx context.Context, key string, g *api.GetReplicaListResponse, r api.Replica, dst buf) error {
	var err error
	switch {
	case r.IsLocalDisk():
		err = c.readLocal(ctx, key, r, dst.b)
	case c.rootFS == "":
		err = api.Errorf(api.FILE_NOT_FOUND, "the object lives in the G3 tier but the master named no root_fs_dir")
	default:
		err = dfs.ReadAt(c.rootFS, r.Path, r.Offset, key, r.Checksum, dst.b, dfs.Options{})
	}
	if err != nil {
		if g.Promote != nil {
			// Nothing to copy: give the promotion's replica back now rather than at its timeout.
			rctx, cancel := c.rpcCtx(ctx)
			c.master.PromoteDone(rctx, &api.OffloadDoneRequest{ClientID: c.id, Key: key, Error: err.Error()})
			cancel()
		}
		return err
	}
	c.tiers.diskReads.Add(1)
	if p := g.Promote; p != nil {
		msg := ""
		if err := c.transfer(ctx, true, dst, *p); err != nil {
			msg = err.Error()
		}
		rctx, cancel := c.rpcCtx(ctx)
		st, err := c.master.PromoteDone(rctx, &api.OffloadDoneRequest{ClientID: c.id, Key: key, Error: msg})
		cancel()
		if err == nil && st.Code == api.OK && msg == "" {
			c.tiers.promoted.Add(1)
		}
	}
	return nil
}

func (c *Client) offloadLoop(ctx context.Context) {
	var (
		mu       sync.Mutex
		inflight = map[string]bool{}
		// recent: moves finished since the previous poll was sent, which that poll's answer
		// may still list (the master applied their reports after building it).
		recent, older = map[string]bool{}, map[string]bool{}
		wg            sync.WaitGroup
	)
	finished := make(chan struct{}, offloadWorkers)
	sem := make(chan struct{}, offloadWorkers)
	defer wg.Wait()
	// after is the master's move generation of the last answer: the next poll asks only for
	// moves started since (each move crosses the wire once, and the poll waits for a new one
	// instead of returning the moves this loop is writing). An answer with no new move resets
	// it, so the poll after an idle one lists every move in progress, a safety net for any
	// move an answer missed.
	var after uint64
	for ctx.Err() == nil {
		mu.Lock()
		// Anything finished before this poll is sent is absent from its answer; keep one
		// generation for answers already in flight.
		older, recent = recent, map[string]bool{}
		mu.Unlock()
		wait := 2 * time.Second
		if c.local != nil {
			wait = min(wait, c.local.beat)
		}
		rctx, cancel := context.WithTimeout(ctx, c.cfg.RPCTimeout+2*time.Second)
		resp, err := c.master.FetchOffloadTasks(rctx, &api.OffloadTasksRequest{ClientID: c.id, WaitMs: wait.Milliseconds(), AfterGen: after})
		cancel()
		if err == nil {
			err = resp.Err()
		}
		if err != nil {
			after = 0
			if !sleepCtx(ctx, 200*time.Millisecond) {
				return
			}
			continue
		}
		after = resp.Gen
		if len(resp.Tasks) == 0 {
			after = 0
		}
		c.removeLocal(resp.Remove)
		// New tasks, as jobs: a large object alone, small ones packed into bucket files (one
		// bucket per tier: G3, local disk).
		var jobs [][]api.OffloadTask
		buckets := map[bool][]api.OffloadTask{}
		bucketBytes := map[bool]uint64{}
		maxKeys, maxBytes := map[bool]int{false: 1 << 30, true: 1 << 30}, map[bool]uint64{false: dfs.BucketBytes, true: dfs.BucketBytes}
		if c.local != nil {
			maxKeys[true], maxBytes[true] = c.local.keys, c.local.bytes
		}
		for _, t := range resp.Tasks {
			id := t.Key + "\x00" + t.Path
			mu.Lock()
			busy := inflight[id] || recent[id] || older[id]
			if !busy {
				// Only moves this loop starts: one already written (recent, older) would stay
				// in the set for good, as no job of its ends to take it out.
				inflight[id] = true
			}
			mu.Unlock()
			if busy {
				continue
			}
			if t.Size > dfs.BucketMax {
				jobs = append(jobs, []api.OffloadTask{t})
				continue
			}
			b := buckets[t.Local]
			if len(b) > 0 && (bucketBytes[t.Local]+t.Size > maxBytes[t.Local] || len(b) >= maxKeys[t.Local]) {
				jobs = append(jobs, b)
				b, bucketBytes[t.Local] = nil, 0
			}
			buckets[t.Local] = append(b, t)
			bucketBytes[t.Local] += t.Size
		}
		for _, local := range []bool{false, true} {
			if len(buckets[local]) > 0 {
				jobs = append(jobs, buckets[local])
			}
		}
		started := 0
		for _, job := range jobs {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			started++
			wg.Add(1)
			go func() {
				defer wg.Done()
				if len(job) == 1 && job[0].Size > dfs.BucketMax {
					c.offloadOne(ctx, job[0])
				} else {
					c.offloadBucket(ctx, job)
				}
				mu.Lock()
				for _, t := range job {
					id := t.Key + "\x00" + t.Path
					delete(inflight, id)
					recent[id] = true
				}
				mu.Unlock()
				<-sem
				select {
				case finished <- struct{}{}:
				default:
				}
			}()
		}
		if started == 0 && len(resp.Tasks) > 0 {
			// Everything listed is already being written: wait for one to end rather than
			// asking again at once.
			select {
			case <-finished:
			case <-ctx.Done():
				return
			}
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// tierRoot is the directory a task writes under: G3, or this client's SSD offload directory.
func (c *Client) tierRoot(t api.OffloadTask) (string, error) {
	if !t.Local {
		if c.rootFS == "" {
			return "", api.Errorf(api.INVALID_PARAMS, "move of %s to G3, but the master named no root_fs_dir", quote(t.Key))
		}
		return c.rootFS, nil
	}
	if c.local == nil {
		return "", api.Errorf(api.INVALID_PARAMS, "move of %s to local disk, but this client has no SSD offload", quote(t.Key))
	}
	return c.local.dir, nil
}

// offloadOne writes one object from this client's segment to its G3 file and reports it.
func (c *Client) offloadOne(ctx context.Context, t api.OffloadTask) {
	seg := c.segment
	root, rerr := c.tierRoot(t)
	var sum uint32
	var werr error
	switch {
	case rerr != nil:
		werr = rerr
	case seg == nil || t.SegmentID != seg.ID || t.Addr < seg.Base || t.Addr+t.Size > seg.Base+seg.Size:
		werr = api.Errorf(api.INVALID_PARAMS, "offload of %s names memory outside this client's segment", quote(t.Key))
	default:
		data := memview.Bytes(uintptr(t.Addr), int(t.Size))
		// No fdatasync per file: G3 is a cache, and a file a crash tears is caught by its
		// checksum on read (a clean error for that key), never returned as data.
		sum, werr = dfs.Write(root, t.Path, t.Key, data, dfs.Options{Direct: true, NoSync: true})
		if werr == dfs.ErrExists {
			return // a repeat of a move already written and reported
		}
	}
	if werr != nil {
		c.tiers.offloadFailed.Add(1)
		log.Printf("mooncake store client: move of %s to %s failed: %v", quote(t.Key), tierName(t), werr)
	}
	if !c.reportOffload(ctx, &api.OffloadDoneRequest{ClientID: c.id, Key: t.Key, Path: t.Path, Checksum: sum}, werr) && werr == nil {
		// The move was cancelled (object removed, client expired): the file is no one's.
		dfs.Remove(root, t.Path)
	}
}

// offloadBucket writes small objects into one bucket file and reports each.
func (c *Client) offloadBucket(ctx context.Context, tasks []api.OffloadTask) {
	seg := c.segment
	root, rerr := c.tierRoot(tasks[0])
	entries := make([]dfs.Entry, 0, len(tasks))
	var ok []api.OffloadTask
	for _, t := range tasks {
		if rerr != nil {
			c.reportOffload(ctx, &api.OffloadDoneRequest{ClientID: c.id, Key: t.Key, Path: t.Path}, rerr)
			continue
		}
		if seg == nil || t.SegmentID != seg.ID || t.Addr < seg.Base || t.Addr+t.Size > seg.Base+seg.Size {
			c.reportOffload(ctx, &api.OffloadDoneRequest{ClientID: c.id, Key: t.Key, Path: t.Path}, api.Errorf(api.INVALID_PARAMS,
				"offload of %s names memory outside this client's segment", quote(t.Key)))
			continue
		}
		entries = append(entries, dfs.Entry{Key: t.Key, Data: memview.Bytes(uintptr(t.Addr), int(t.Size))})
		ok = append(ok, t)
	}
	if len(ok) == 0 {
		return
	}
	file := dfs.BucketPathFor(ok[0].Path)
	placed, werr := dfs.WriteBucket(root, file, entries, dfs.Options{Direct: true, NoSync: true})
	if werr == dfs.ErrExists {
		return // a repeat of moves already written and reported
	}
	if werr != nil {
		c.tiers.offloadFailed.Add(uint64(len(ok)))
		log.Printf("mooncake store client: move of %d objects to %s bucket %s failed: %v", len(ok), tierName(ok[0]), file, werr)
	}
	req := &api.BatchOffloadDoneRequest{ClientID: c.id}
	for i, t := range ok {
		it := api.OffloadDoneRequest{ClientID: c.id, Key: t.Key, Path: t.Path, File: file}
		if werr == nil {
			it.Offset, it.Checksum = placed[i].Offset, placed[i].Sum
		} else {
			it.Error = werr.Error()
		}
		req.Items = append(req.Items, it)
	}
	// One report for the bucket, retried through a failover like reportOffload.
	for attempt := 0; attempt < 5; attempt++ {
		rctx, cancel := c.rpcCtx(context.WithoutCancel(ctx))
		resp, err := c.master.BatchOffloadDone(rctx, req)
		cancel()
		if err == nil {
			err = resp.Err()
		}
		if err == nil {
			accepted := 0
			for _, st := range resp.Results {
				if st.Code == api.OK && werr == nil {
					accepted++
				}
			}
			c.tiers.offloaded.Add(uint64(accepted))
			if werr == nil && accepted == 0 {
				dfs.Remove(root, file) // every move was cancelled: the bucket is no one's
			}
			return
		}
		if !sleepCtx(ctx, time.Duration(100<<attempt)*time.Millisecond) {
			break
		}
	}
	log.Printf("mooncake store client: could not report bucket %s to the master", file)
}

// reportOffload sends OffloadDone (with werr's text when the write failed), riding out a
// failover by retrying; it reports false when the master refused the file (then no one
// references it) and true when it recorded it or could not be asked.
func (c *Client) reportOffload(ctx context.Context, req *api.OffloadDoneRequest, werr error) bool {
	if werr != nil {
		req.Error = werr.Error()
	}
	for attempt := 0; attempt < 5; attempt++ {
		rctx, cancel := c.rpcCtx(context.WithoutCancel(ctx))
		st, err := c.master.OffloadDone(rctx, req)
		cancel()
		if err == nil {
			if st.Code == api.OK && werr == nil {
				c.tiers.offloaded.Add(1)
				return true
			}
			return false
		}
		if !sleepCtx(ctx, time.Duration(100<<attempt)*time.Millisecond) {
			break
		}
	}
	log.Printf("mooncake store client: could not report the move of %s to G3: master unreachable", quote(req.Key))
	return true // unknown: the master may have recorded it, so the file stays
}

func tierName(t api.OffloadTask) string {
	if t.Local {
		return "local disk"
	}
	return "G3"
}
