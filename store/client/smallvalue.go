package client

import "github.com/mooncake-go/mooncake/store/api"

// Small values and the master's value cache (store/master/valuecache.go): a put of a value of
// at most Config.SmallValueBytes sends the bytes it has just written to every replica with its
// PutEnd, and a get whose GetReplicaList answer carries them (Value, exactly the object's
// size) copies them and reads no replica: one round trip.
//
// Batch puts send no bytes (their BatchPutEnd could: api.BatchKeysRequest.Values). Measured
// (2026-12-06, 2-core host, alternated in one run): even as binary attachments (store/api's
// attach.go), 64 values of 4 KiB carried made put_batch and batch_put_from 0.55-0.75x as fast
// for little gain on the batch gets, whose values already move in one pipelined engine run.
// A single get of a cached value saves a transfer and about half its time. An answer without
// them (the cache full, an older master, a value too large) is read from a replica as before.

// DefaultSmallValueBytes is Config.SmallValueBytes when it is 0.
const DefaultSmallValueBytes = 4096

// maxSmallValue is the largest value sent with a PutEnd (the master keeps no larger one).
const maxSmallValue = 64 << 10

// smallValueLimit is the largest value this client sends with its PutEnd (0: none).
func (c *Client) smallValueLimit() uint64 {
	n := c.cfg.SmallValueBytes
	if n == 0 {
		n = DefaultSmallValueBytes
	}
	if n < 0 {
		return 0
	}
	return uint64(min(n, maxSmallValue))
}

// smallValue is what a PutEnd of the value in parts carries: nil when it is too large.
func (c *Client) smallValue(parts []buf) []byte {
	var size uint64
	for _, p := range parts {
		size += uint64(len(p.b))
	}
	if size == 0 || size > c.smallValueLimit() {
		return nil
	}
	if len(parts) == 1 {
		return parts[0].b // encoded into the request before the put returns
	}
	v := make([]byte, 0, size)
	for _, p := range parts {
		v = append(v, p.b...)
	}
	return v
}

// readCached fills dst from the bytes the master answered with; false: read a replica.
func (c *Client) readCached(g *api.GetReplicaListResponse, dst []buf) bool {
	if len(g.Value) == 0 || uint64(len(g.Value)) != g.Size {
		return false
	}
	var n uint64
	for _, d := range dst {
		n += uint64(len(d.b))
	}
	if n != g.Size {
		return false
	}
	off := 0
	for _, d := range dst {
		off += copy(d.b, g.Value[off:])
	}
	c.cachedReads.Add(1)
	return true
}

// CachedReads is how many gets were served from the master's value cache (no replica read).
func (c *Client) CachedReads() uint64 { return c.cachedReads.Load() }
