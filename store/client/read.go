package client

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/mooncake-go/mooncake/store/api"
)

// How a get reads one value once the master has listed its replicas: the best replica first
// (this client's segment, then same-host ones, then tcp, then disks), trying the next on failure.

// orderReplicas puts the local segment first, then replicas whose memory this host can map.
func (c *Client) orderReplicas(reps []api.Replica) []api.Replica {
	out := append([]api.Replica(nil), reps...)
	me := c.eng.SegmentName()
	rank := func(r api.Replica) int {
		switch {
		case r.IsLocalDisk() && c.local != nil && r.Endpoint == c.local.endpoint:
			return 4 // memory copies first, then this host's own disk
		case r.IsDisk():
			return 5
		case r.IsLocalDisk():
			return 6 // another client's disk: a round trip to it
		}
		if r.SegmentName == me {
			return 0
		}
		id, err := c.openSegment(r.SegmentName)
		if err != nil {
			return 3
		}
		if _, ok, err := c.eng.MapRemote(id, r.Addr, 1); err == nil && ok {
			return 1
		}
		return 2
	}
	ranks := make(map[int]int, len(out))
	for i, r := range out {
		ranks[i] = rank(r)
	}
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return ranks[idx[a]] < ranks[idx[b]] })
	sorted := make([]api.Replica, len(out))
	for i, j := range idx {
		sorted[i] = out[j]
	}
	return sorted
}

func (c *Client) readInto(ctx context.Context, key string, g *api.GetReplicaListResponse, start time.Time, dst buf) error {
	if len(g.Replicas) == 0 {
		return api.Errorf(api.REPLICA_NOT_FOUND, "get %s: no replica", quote(key))
	}
	var errs []error
	for _, r := range c.orderReplicas(g.Replicas) {
		if r.IsFile() {
			if err := c.readDisk(ctx, key, g, r, dst); err != nil {
				errs = append(errs, err)
				continue
			}
			return nil
		}
		if err := c.transfer(ctx, false, dst, r); err != nil {
			errs = append(errs, err)
			continue
		}
		if ttl := time.Duration(g.LeaseTTLMs) * time.Millisecond; ttl > 0 && time.Since(start) > ttl {
			return api.Errorf(api.LEASE_EXPIRED, "get %s: the read took longer than the %v lease; the data may have been replaced", quote(key), ttl)
		}
		return nil
	}
	if len(errs) == 1 {
		return fmt.Errorf("get %s: %w", quote(key), errs[0])
	}
	return fmt.Errorf("get %s: every replica failed: %w", quote(key), errors.Join(errs...))
}

// replicas asks the master for key's replicas (and a read lease counted from start): one
// GetReplicaList, or a part of a BatchGetReplicaList shared with other goroutines' single gets
// (coalesce.go).
func (c *Client) replicas(ctx context.Context, key string) (*api.GetReplicaListResponse, time.Time, error) {
	start := time.Now()
	g, err := c.lookups.do(ctx, key, struct{}{}, c.replicaList, c.replicaLists)
	return g, start, err
}

func (c *Client) replicaList(ctx context.Context, key string, _ struct{}) (*api.GetReplicaListResponse, error) {
	rctx, cancel := c.rpcCtx(ctx)
	g, err := c.master.GetReplicaList(rctx, &api.KeyRequest{ClientID: c.id, Key: key})
	cancel()
	if err != nil {
		return nil, c.rpcErr("get "+quote(key), err)
	}
	if err := g.Err(); err != nil {
		return nil, fmt.Errorf("get %s: %w", quote(key), err)
	}
	return g, nil
}

// replicaLists is replicaList for several keys with one BatchGetReplicaList.
func (c *Client) replicaLists(ctx context.Context, keys []string, _ []struct{}) ([]*api.GetReplicaListResponse, []error) {
	out := make([]*api.GetReplicaListResponse, len(keys))
	rctx, cancel := c.rpcCtx(ctx)
	resp, err := c.master.BatchGetReplicaList(rctx, &api.BatchKeysRequest{ClientID: c.id, Keys: keys})
	cancel()
	if err != nil {
		errs := make([]error, len(keys))
		for i, k := range keys {
			errs[i] = c.rpcErr("get "+quote(k), err)
		}
		return out, errs
	}
	if err := answered(resp.Status, len(resp.Results), len(keys)); err != nil {
		errs := make([]error, len(keys))
		for i, k := range keys {
			errs[i] = fmt.Errorf("get %s: %w", quote(k), err)
		}
		return out, errs
	}
	errs := make([]error, len(keys))
	for i := range resp.Results {
		if err := resp.Results[i].Err(); err != nil {
			errs[i] = fmt.Errorf("get %s: %w", quote(keys[i]), err)
			continue
		}
		out[i] = &resp.Results[i]
	}
	return out, errs
}

// readParts reads key's value into several buffers that hold exactly its bytes, in order:
// each buffer from the first memory replica that serves it; an object with no memory copy is
// read whole through readInto and then scattered.
func (c *Client) readParts(ctx context.Context, key string, g *api.GetReplicaListResponse, start time.Time, parts []buf) error {
	var mem []api.Replica
	for _, r := range c.orderReplicas(g.Replicas) {
		if !r.IsFile() {
			mem = append(mem, r)
		}
	}
	if len(mem) == 0 {
		whole := make([]byte, g.Size)
		if err := c.readInto(ctx, key, g, start, buf{b: whole}); err != nil {
			return err
		}
		off := 0
		for _, p := range parts {
			off += copy(p.b, whole[off:])
		}
		return nil
	}
	var off uint64
	for _, p := range parts {
		var last error
		for _, r := range mem {
			rr := r
			rr.Addr += off
			rr.Size = uint64(len(p.b))
			if last = c.transfer(ctx, false, p, rr); last == nil {
				break
			}
		}
		if last != nil {
			return fmt.Errorf("get %s: %w", quote(key), last)
		}
		off += uint64(len(p.b))
	}
	if ttl := leaseTTL(g); ttl > 0 && sinceOver(start, ttl) {
		return api.Errorf(api.LEASE_EXPIRED, "get %s: the read took longer than the %v lease; the data may have been replaced", quote(key), ttl)
	}
	return nil
}
