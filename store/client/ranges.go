package client

import (
	"context"
	"fmt"
	"time"

	"github.com/mooncake-go/mooncake/internal/memview"
	"github.com/mooncake-go/mooncake/store/api"
)

// Ranged reads (upstream's get_into_ranges). Multi-buffer transfers (upstream's
// batch_get_into_multi_buffers and batch_put_from_multi_buffers) are Get and Put of items with
// several parts.

// Range is one fragment of a ranged read: Size bytes at offset Src of the value, copied to the
// local address Dst.
type Range struct {
	Src  uint64
	Dst  uintptr
	Size uint64
}

// region returns the registered buffer holding addr.
func (c *Client) region(addr uintptr) (base uintptr, n uint64, ok bool) {
	c.regMu.RLock()
	defer c.regMu.RUnlock()
	for a, l := range c.regions {
		if addr >= a && addr < a+uintptr(l) {
			return a, l, true
		}
	}
	return 0, 0, false
}

// GetRanges reads fragments of key's value under one lease: for each fragment the bytes read
// or its error. Destinations must lie inside buffers registered with RegisterBuffer (checked
// against their bounds); sources are checked against the value's size. Fragments need a memory
// replica (as upstream's: ranged reads of file replicas, G3 or SSD offload, are not supported;
// Snapshot.GetRanges with allowStaging reads them).
func (c *Client) GetRanges(ctx context.Context, key string, frags []Range) ([]uint64, []error) {
	got := make([]uint64, len(frags))
	errs := make([]error, len(frags))
	key, err := c.tkey(key)
	if err != nil {
		return got, fill(len(frags), err)
	}
	g, start, err := c.replicas(ctx, key)
	if err != nil {
		return got, fill(len(frags), err)
	}
	if g.Promote != nil {
		// Ranged reads do not fill a memory copy: give the one offered back now, or it would
		// block the object's promotion by the next get until the master's move timeout.
		c.declinePromotion(ctx, key)
	}
	var mem []api.Replica
	for _, r := range c.orderReplicas(g.Replicas) {
		if !r.IsFile() {
			mem = append(mem, r)
		}
	}
	for i, f := range frags {
		errs[i] = c.readRange(ctx, key, g, mem, f)
		if errs[i] == nil {
			got[i] = f.Size
		}
	}
	if ttl := leaseTTL(g); ttl > 0 && sinceOver(start, ttl) {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = api.Errorf(api.LEASE_EXPIRED, "get %s: the ranged read took longer than the %v lease; the data may have been replaced", quote(key), ttl)
				got[i] = 0
			}
		}
	}
	return got, errs
}

func (c *Client) readRange(ctx context.Context, key string, g *api.GetReplicaListResponse, mem []api.Replica, f Range) error {
	size := g.Size
	switch {
	case f.Size == 0:
		return api.Errorf(api.INVALID_PARAMS, "get %s: a fragment of 0 bytes", quote(key))
	case f.Src > size || f.Size > size-f.Src:
		return api.Errorf(api.INVALID_PARAMS, "get %s: bytes [%d, %d) are outside the %d-byte value", quote(key), f.Src, f.Src+f.Size, size)
	}
	base, n, ok := c.region(f.Dst)
	if !ok {
		return api.Errorf(api.INVALID_PARAMS, "get %s: destination %#x is not in a buffer registered with register_buffer", quote(key), f.Dst)
	}
	if uint64(f.Dst-base)+f.Size > n {
		return api.Errorf(api.BUFFER_OVERFLOW, "get %s: %d bytes at %#x overflow the %d-byte registered buffer at %#x", quote(key), f.Size, f.Dst, n, base)
	}
	dst := buf{b: memview.Bytes(f.Dst, int(f.Size)), registered: true}
	if uint64(len(g.Value)) == size {
		copy(dst.b, g.Value[f.Src:]) // the master answered with the bytes (smallvalue.go)
		return nil
	}
	if len(mem) == 0 {
		return api.Errorf(api.REPLICA_NOT_FOUND, "get %s: ranged reads need a memory replica and the object has none", quote(key))
	}
	var last error
	for _, r := range mem {
		rr := r
		rr.Addr += f.Src
		rr.Size = f.Size
		if last = c.transfer(ctx, false, dst, rr); last == nil {
			return nil
		}
	}
	return fmt.Errorf("get %s: %w", quote(key), last)
}

func leaseTTL(g *api.GetReplicaListResponse) time.Duration {
	return time.Duration(g.LeaseTTLMs) * time.Millisecond
}

func sinceOver(start time.Time, d time.Duration) bool { return time.Since(start) > d }

// BatchReplicaClear drops this client's copies of keys on the segment segmentName (every copy,
// the whole object, when empty) and returns the keys cleared; keys that are leased, still being
// written, written by another client or missing are skipped.
func (c *Client) BatchReplicaClear(ctx context.Context, keys []string, segmentName string) ([]string, error) {
	keys, err := c.tkeys(keys)
	if err != nil {
		return nil, err
	}
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	resp, err := c.master.BatchReplicaClear(rctx, &api.BatchReplicaClearRequest{ClientID: c.id, Keys: keys, SegmentName: segmentName})
	if err != nil {
		return nil, c.rpcErr("batch_replica_clear", err)
	}
	if err := resp.Err(); err != nil {
		return nil, fmt.Errorf("batch_replica_clear: %w", err)
	}
	cleared := make([]string, len(resp.ClearedKeys))
	for i, k := range resp.ClearedKeys {
		_, cleared[i] = api.SplitTenant(k)
	}
	return cleared, nil
}
