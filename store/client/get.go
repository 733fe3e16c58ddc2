package client

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/internal/memview"
	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/dfs"
)

// GetOptions are the settings of a get request.
type GetOptions struct {
	// Alloc gives the memory of item i once the master has answered its value's size: called
	// on the calling goroutine, in item order, before any value is read; the items' Parts are
	// not used then. Memory it gave for an item whose read then failed is still the caller's.
	// Without Alloc each item's value is read into its Parts, in order; they must hold it.
	Alloc func(i int, size uint64) ([]byte, error)
}

// Get reads each item's value; sizes[i] is its size (0 when item i failed) and errs[i] its
// error. One item takes the single-key path (GetReplicaList, then the read); several are
// asked for with one BatchGetReplicaList and read several at once.
func (c *Client) Get(ctx context.Context, items []Item, opts GetOptions) ([]uint64, []error) {
	if len(items) == 1 {
		n, err := c.getOne(ctx, items[0], opts)
		return []uint64{n}, []error{err}
	}
	return c.batchGet(ctx, items, opts)
}

// GetValue returns key's value in new Go memory: Get of one item with a Go allocator.
func (c *Client) GetValue(ctx context.Context, key string) ([]byte, error) {
	var out []byte
	_, err := c.getOne(ctx, Item{Key: key}, GetOptions{Alloc: func(_ int, n uint64) ([]byte, error) {
		out = make([]byte, n)
		return out, nil
	}})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *Client) getOne(ctx context.Context, it Item, opts GetOptions) (uint64, error) {
	key, err := c.tkey(it.Key)
	if err != nil {
		return 0, err
	}
	g, start, err := c.replicas(ctx, key)
	if err != nil {
		return 0, err
	}
	dst, err := c.dest(key, it, 0, g.Size, opts)
	if err != nil {
		return 0, err
	}
	if err := c.read(ctx, key, g, start, dst); err != nil {
		return 0, err
	}
	return g.Size, nil
}

// dest is the memory item i's value of size bytes is read into: from opts.Alloc, or the
// item's parts cut to the value's size (registered where they lie in a registered buffer).
func (c *Client) dest(key string, it Item, i int, size uint64, opts GetOptions) ([]buf, error) {
	if opts.Alloc != nil {
		b, err := opts.Alloc(i, size)
		if err != nil {
			return nil, err
		}
		if uint64(len(b)) < size {
			return nil, api.Errorf(api.BUFFER_OVERFLOW, "get %s: the allocator gave %d bytes for a %d-byte value", quote(key), len(b), size)
		}
		return []buf{{b: b[:size]}}, nil
	}
	var room uint64
	for _, p := range it.Parts {
		room += uint64(len(p))
	}
	switch {
	case room == 0:
		return nil, api.Errorf(api.INVALID_PARAMS, "get %s: no buffer to read the value into", quote(key))
	case room < size:
		return nil, api.Errorf(api.BUFFER_OVERFLOW, "get %s: the value is %d bytes, the buffers only %d", quote(key), size, room)
	}
	out := make([]buf, 0, len(it.Parts))
	for _, p := range it.Parts {
		n := min(uint64(len(p)), size)
		if n == 0 {
			continue
		}
		out = append(out, buf{b: p[:n], registered: c.registered(memview.Addr(p), n)})
		if size -= n; size == 0 {
			break
		}
	}
	return out, nil
}

// read reads key's value into dst: one buffer, or several in order.
func (c *Client) read(ctx context.Context, key string, g *api.GetReplicaListResponse, start time.Time, dst []buf) error {
	if c.readCached(g, dst) {
		return nil // the master answered with the bytes (smallvalue.go)
	}
	if len(dst) == 1 {
		return c.readInto(ctx, key, g, start, dst[0])
	}
	return c.readParts(ctx, key, g, start, dst)
}

// batchGet reads several items with one BatchGetReplicaList round trip to the master.
func (c *Client) batchGet(ctx context.Context, items []Item, opts GetOptions) ([]uint64, []error) {
	sizes := make([]uint64, len(items))
	errs := make([]error, len(items))
	if len(items) == 0 {
		return sizes, errs
	}
	keys, err := c.tkeys(itemKeys(items))
	if err != nil {
		return sizes, fill(len(errs), err)
	}
	start := time.Now()
	rctx, cancel := c.rpcCtx(ctx)
	resp, err := c.master.BatchGetReplicaList(rctx, &api.BatchKeysRequest{ClientID: c.id, Keys: keys})
	cancel()
	if err == nil {
		err = resp.Err()
	}
	if err == nil && len(resp.Results) != len(keys) {
		err = api.Errorf(api.INTERNAL_ERROR, "the master answered %d of %d keys", len(resp.Results), len(keys))
	}
	if err != nil {
		return sizes, fill(len(keys), c.rpcErr("batch get", err))
	}
	// Buffers first, in order (opts.Alloc may call back into the caller), then the reads,
	// several at once: G3 files are read with one pread chain each, and a disk keeps several busy.
	bufs := make([][]buf, len(resp.Results))
	var single, todo []int
	for i := range resp.Results {
		g := &resp.Results[i]
		if err := g.Err(); err != nil {
			errs[i] = fmt.Errorf("get %s: %w", quote(keys[i]), err)
			continue
		}
		if bufs[i], errs[i] = c.dest(keys[i], items[i], i, g.Size, opts); errs[i] != nil {
			continue
		}
		if c.readCached(g, bufs[i]) {
			continue // the master answered with the bytes (smallvalue.go)
		}
		if len(bufs[i]) == 1 {
			single = append(single, i)
		} else {
			todo = append(todo, i)
		}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, batchReadParallel)
	run := func(f func()) {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f()
		}()
	}
	files, rest := c.sharedFiles(resp.Results, single)
	rest = c.readMemoryValues(ctx, keys, resp.Results, start, bufs, rest, errs)
	todo = append(todo, rest...)
	for path, idx := range files {
		run(func() {
			wants := make([]dfs.Want, len(idx))
			for j, i := range idx {
				r := resp.Results[i].Replicas[0]
				wants[j] = dfs.Want{Offset: r.Offset, Key: keys[i], Sum: r.Checksum, Dst: bufs[i][0].b}
			}
			for j, err := range dfs.ReadMany(c.rootFS, path, wants, dfs.Options{}) {
				i := idx[j]
				if err == nil {
					c.tiers.diskReads.Add(1)
				} else { // on its own, for its other replicas and its own error
					errs[i] = c.readInto(ctx, keys[i], &resp.Results[i], start, bufs[i][0])
				}
			}
		})
	}
	for _, i := range todo {
		run(func() { errs[i] = c.read(ctx, keys[i], &resp.Results[i], start, bufs[i]) })
	}
	wg.Wait()
	for i, e := range errs {
		if e == nil {
			sizes[i] = resp.Results[i].Size
		}
	}
	return sizes, errs
}

// readMemoryValues reads, of the single-buffer items idx of a batch get, those whose best
// replica is in memory, all together (transferMany: one engine batch per segment); an item whose
// transfer failed is read again on its own by readInto, which tries its other replicas and
// gives its own error. It returns the items it left to the caller (best replica on a disk).
func (c *Client) readMemoryValues(ctx context.Context, keys []string, results []api.GetReplicaListResponse, start time.Time, bufs [][]buf, idx []int, errs []error) []int {
	var xs []xfer
	var mine, rest []int
	for _, i := range idx {
		reps := c.orderReplicas(results[i].Replicas)
		if len(reps) == 0 || reps[0].IsFile() {
			rest = append(rest, i)
			continue
		}
		xs = append(xs, xfer{local: bufs[i][0], r: reps[0]})
		mine = append(mine, i)
	}
	if len(xs) == 0 {
		return rest
	}
	for k, err := range c.transferMany(ctx, false, xs) {
		i := mine[k]
		if err != nil {
			errs[i] = c.readInto(ctx, keys[i], &results[i], start, bufs[i][0])
			continue
		}
		if ttl := leaseTTL(&results[i]); ttl > 0 && sinceOver(start, ttl) {
			errs[i] = api.Errorf(api.LEASE_EXPIRED, "get %s: the read took longer than the %v lease; the data may have been replaced", quote(keys[i]), ttl)
		}
	}
	return rest
}

// sharedFiles takes out of todo the G3-only objects of a batch get that share a file with
// another (objects that moved to G3 in one bucket), by file, to be read with one dfs.ReadMany
// each; it returns them and what is left of todo. Objects with a memory copy, on a client's
// local disk, or being promoted by this read are left to readInto.
func (c *Client) sharedFiles(results []api.GetReplicaListResponse, todo []int) (map[string][]int, []int) {
	if c.rootFS == "" {
		return nil, todo
	}
	byFile := map[string][]int{}
	var rest []int
	for _, i := range todo {
		g := &results[i]
		if g.Promote == nil && len(g.Replicas) > 0 && !slices.ContainsFunc(g.Replicas, func(r api.Replica) bool { return !r.IsDisk() || r.IsLocalDisk() }) {
			byFile[g.Replicas[0].Path] = append(byFile[g.Replicas[0].Path], i)
			continue
		}
		rest = append(rest, i)
	}
	for path, idx := range byFile {
		if len(idx) == 1 {
			rest = append(rest, idx[0])
			delete(byFile, path)
		}
	}
	return byFile, rest
}

// batchReadParallel is how many values of one batch get are read at once.
const batchReadParallel = 8
