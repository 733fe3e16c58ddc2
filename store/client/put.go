package client

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/mooncake-go/mooncake/internal/memview"
	"github.com/mooncake-go/mooncake/store/api"
)

// Item is one object of a request: a key and its value's memory, in parts. A put stores the
// concatenation of the parts; a get reads the value into them in order (unless
// GetOptions.Alloc gives the memory). A part lying in a buffer registered with RegisterBuffer
// moves to or from the replicas directly, without the staging buffer (zero copy).
type Item struct {
	Key   string
	Parts [][]byte
}

// PutOptions are the settings of a put request.
type PutOptions struct {
	Config api.ReplicateConfig // replicas, pins, preferred segments
	// Upsert replaces a value the key has. Without it a put is write-once: a key that exists is
	// left as it is, and its item succeeds. With it the master keeps the old value readable
	// while the new one is written and swaps them when the write is complete: a reader sees the
	// whole old value or the whole new one, and a failed upsert leaves the old value in place.
	Upsert bool
}

// Put stores each item's value under its key; errs[i] is item i's error (nil: stored). One
// item takes the single-key path (PutStart, the writes, PutEnd); several go to the master as
// one batch (BatchPutStart, the writes, BatchPutEnd).
func (c *Client) Put(ctx context.Context, items []Item, opts PutOptions) []error {
	if len(items) == 1 {
		return []error{c.putOne(ctx, items[0], opts)}
	}
	return c.batchPut(ctx, items, opts)
}

// PutValue stores value under key: Put of one single-part item.
func (c *Client) PutValue(ctx context.Context, key string, value []byte, opts PutOptions) error {
	return c.putOne(ctx, Item{Key: key, Parts: [][]byte{value}}, opts)
}

func (c *Client) putOne(ctx context.Context, it Item, opts PutOptions) error {
	key, err := c.tkey(it.Key)
	if err != nil {
		return err
	}
	parts, _ := c.partBufs(it.Parts)
	return c.putKey(ctx, key, parts, opts.Config, opts.Upsert)
}

// partBufs are the transfer buffers of a value's parts (registered where a part lies in a
// registered buffer) and the value's size.
func (c *Client) partBufs(parts [][]byte) ([]buf, uint64) {
	bs := make([]buf, len(parts))
	var size uint64
	for i, p := range parts {
		n := uint64(len(p))
		bs[i] = buf{b: p, registered: n > 0 && c.registered(memview.Addr(p), n)}
		size += n
	}
	return bs, size
}

func itemKeys(items []Item) []string {
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = it.Key
	}
	return keys
}

// putKey is put of an internal key.
func (c *Client) putKey(ctx context.Context, key string, parts []buf, cfg api.ReplicateConfig, upsert bool) error {
	var size uint64
	for _, p := range parts {
		size += uint64(len(p.b))
	}
	if k, ok := c.reserveKeyOf(size, cfg, upsert); ok {
		if done, err := c.putReserved(ctx, key, parts, k, cfg); done {
			return err
		}
	}
	ps, err := c.putStart(ctx, key, size, cfg, upsert)
	if err != nil {
		return err
	}
	if ps.Code == api.OBJECT_ALREADY_EXISTS {
		return nil // write-once: the key is already stored
	}
	if err := ps.Err(); err != nil {
		return fmt.Errorf("put %s: %w", quote(key), err)
	}
	if err := c.writeReplicas(ctx, parts, ps.Replicas); err != nil {
		c.revoke(key)
		return fmt.Errorf("put %s: %w", quote(key), err)
	}
	value := c.smallValue(parts) // for the master's value cache (smallvalue.go)
	_, err = c.ends.do(ctx, key, value, c.putEnd, c.putEnds)
	return err
}

// putEnd makes key's value readable (PutEnd, carrying a small value's bytes); putEnds does it
// for several keys with one BatchPutEnd (other goroutines' single puts, coalesce.go), each
// with its small value's bytes.
func (c *Client) putEnd(ctx context.Context, key string, value []byte) (struct{}, error) {
	rctx, cancel := c.rpcCtx(ctx)
	st, err := c.master.PutEnd(rctx, &api.KeyRequest{ClientID: c.id, Key: key, Value: value})
	cancel()
	if err != nil {
		return struct{}{}, c.rpcErr("put "+quote(key), err)
	}
	if err := st.Err(); err != nil {
		return struct{}{}, fmt.Errorf("put %s: %w", quote(key), err)
	}
	return struct{}{}, nil
}

func (c *Client) putEnds(ctx context.Context, keys []string, values [][]byte) ([]struct{}, []error) {
	out := make([]struct{}, len(keys))
	if !slices.ContainsFunc(values, func(v []byte) bool { return len(v) > 0 }) {
		values = nil
	}
	rctx, cancel := c.rpcCtx(ctx)
	resp, err := c.master.BatchPutEnd(rctx, &api.BatchKeysRequest{ClientID: c.id, Keys: keys, Values: values})
	cancel()
	errs := make([]error, len(keys))
	if err != nil {
		for i, k := range keys {
			errs[i] = c.rpcErr("put "+quote(k), err)
		}
		return out, errs
	}
	if err := answered(resp.Status, len(resp.Results), len(keys)); err != nil {
		errs := make([]error, len(keys))
		for i, k := range keys {
			errs[i] = fmt.Errorf("put %s: %w", quote(k), err)
		}
		return out, errs
	}
	for i, r := range resp.Results {
		if r.Code != api.OK {
			errs[i] = fmt.Errorf("put %s: %w", quote(keys[i]), r.Err())
		}
	}
	return out, errs
}

func (c *Client) writeReplicas(ctx context.Context, parts []buf, reps []api.Replica) error {
	xs, _ := replicaWrites(nil, nil, 0, parts, reps)
	for _, x := range xs {
		if err := c.transfer(ctx, true, x.local, x.r); err != nil {
			return err
		}
	}
	return nil
}

// replicaWrites appends to xs the writes of one value (its parts, in order) to every replica,
// and to owner the value's index i once per write.
func replicaWrites(xs []xfer, owner []int, i int, parts []buf, reps []api.Replica) ([]xfer, []int) {
	for _, r := range reps {
		var off uint64
		for _, p := range parts {
			if len(p.b) == 0 {
				continue
			}
			rr := r
			rr.Addr += off
			rr.Size -= off
			xs = append(xs, xfer{local: p, r: rr})
			owner = append(owner, i)
			off += uint64(len(p.b))
		}
	}
	return xs, owner
}

// placement applies the client-side placement options: PreferAllocInSameNode names this
// client's own segment as the preferred one when the caller named none.
func (c *Client) placement(cfg api.ReplicateConfig) api.ReplicateConfig {
	if cfg.PreferAllocInSameNode && len(cfg.PreferredSegments) == 0 && c.segment != nil {
		cfg.PreferredSegments = []string{c.segment.Name}
	}
	return cfg
}

func (c *Client) revoke(key string) {
	ctx, cancel := c.rpcCtx(context.Background())
	defer cancel()
	c.master.PutRevoke(ctx, &api.KeyRequest{ClientID: c.id, Key: key})
}

// batchPut puts several items with one BatchPutStart and one BatchPutEnd round trip (more
// only for keys the master answers Retry).
func (c *Client) batchPut(ctx context.Context, items []Item, opts PutOptions) []error {
	errs := make([]error, len(items))
	if len(items) == 0 {
		return errs
	}
	keys, err := c.tkeys(itemKeys(items))
	if err != nil {
		return fill(len(errs), err)
	}
	bufs := make([][]buf, len(items))
	sizes := make([]uint64, len(items))
	for i, it := range items {
		bufs[i], sizes[i] = c.partBufs(it.Parts)
	}
	// Keys answered Retry (memory full while objects move to a disk tier) are asked for again,
	// as a batch, until the master finds them room or the RPC timeout passes (see putStart).
	pending := make([]int, len(keys))
	for i := range pending {
		pending[i] = i
	}
	deadline := time.Now().Add(c.cfg.RPCTimeout)
	var wait roomWait
	for len(pending) > 0 {
		req := &api.BatchPutStartRequest{ClientID: c.id, Config: c.placement(opts.Config), Upsert: opts.Upsert, WaitMs: wait.ms(c, deadline)}
		for _, i := range pending {
			req.Keys, req.Sizes = append(req.Keys, keys[i]), append(req.Sizes, sizes[i])
		}
		rctx, cancel := c.rpcCtx(ctx)
		resp, err := c.master.BatchPutStart(rctx, req)
		cancel()
		if err == nil {
			err = resp.Err()
		}
		if err == nil && len(resp.Results) != len(pending) {
			err = api.Errorf(api.INTERNAL_ERROR, "the master answered %d of %d keys", len(resp.Results), len(pending))
		}
		if err != nil {
			err = c.rpcErr("batch put", err)
			for _, i := range pending {
				errs[i] = err
			}
			return errs
		}
		var retry []int
		for j, r := range resp.Results {
			if r.Retry {
				retry = append(retry, pending[j])
			}
		}
		c.finishPuts(ctx, keys, bufs, pending, resp.Results, errs)
		if len(retry) > 0 && len(retry) < len(pending) {
			wait.backoff = 0 // some keys found room: ask for the others at once
		} else if len(retry) > 0 && !wait.again(ctx, deadline) {
			for j, r := range resp.Results {
				if r.Retry {
					errs[pending[j]] = fmt.Errorf("put %s: %w", quote(keys[pending[j]]), r.Err())
				}
			}
			return errs
		}
		pending = retry
	}
	return errs
}

// finishPuts writes the values of the keys a BatchPutStart gave room (idx[j] is the key of
// results[j]), revokes those whose writes failed and ends the others in one batch each,
// setting errs; keys answered Retry are left alone.
func (c *Client) finishPuts(ctx context.Context, keys []string, bufs [][]buf, idx []int, results []api.PutStartResponse, errs []error) {
	var ended, revoked []string
	var endIdx []int
	// Every value's writes to every replica go out together (transferMany): one engine batch
	// per target segment, not one synchronous transfer per value.
	var xs []xfer
	var owner []int
	for j, r := range results {
		i := idx[j]
		switch {
		case r.Code == api.OBJECT_ALREADY_EXISTS, r.Retry:
		case r.Code != api.OK:
			errs[i] = fmt.Errorf("put %s: %w", quote(keys[i]), r.Err())
		default:
			xs, owner = replicaWrites(xs, owner, i, bufs[i], r.Replicas)
		}
	}
	failed := map[int]error{}
	for k, err := range c.transferMany(ctx, true, xs) {
		if err != nil && failed[owner[k]] == nil {
			failed[owner[k]] = err
		}
	}
	for j, r := range results {
		i := idx[j]
		if r.Code != api.OK || r.Retry {
			continue
		}
		if err := failed[i]; err != nil {
			errs[i] = fmt.Errorf("put %s: %w", quote(keys[i]), err)
			revoked = append(revoked, keys[i])
			continue
		}
		ended = append(ended, keys[i])
		endIdx = append(endIdx, i)
	}
	if len(revoked) > 0 {
		rctx, cancel := c.rpcCtx(context.Background())
		c.master.BatchPutRevoke(rctx, &api.BatchKeysRequest{ClientID: c.id, Keys: revoked})
		cancel()
	}
	if len(ended) > 0 {
		rctx, cancel := c.rpcCtx(ctx)
		resp, err := c.master.BatchPutEnd(rctx, &api.BatchKeysRequest{ClientID: c.id, Keys: ended})
		cancel()
		if err == nil {
			err = resp.Err()
		}
		for j, i := range endIdx {
			switch {
			case err != nil:
				errs[i] = c.rpcErr("put "+quote(keys[i]), err)
			case j < len(resp.Results) && resp.Results[j].Code != api.OK:
				errs[i] = fmt.Errorf("put %s: %w", quote(keys[i]), resp.Results[j].Err())
			}
		}
	}
}
