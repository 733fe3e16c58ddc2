package client

import "github.com/mooncake-go/mooncake/store/api"

// Small values and the master's value cache (store/master/valuecache.go): a put of a value of
// at most Config.SmallValueBytes sends the bytes it has just written to every replica with its
// PutEnd, and a get whose GetReplicaList answer carries them (Value, exactly the object's
// size) copies them and reads no replica: one round trip.
//
// Batch puts send no bytes (their BatchPutEnd could: api.BatchKeysRequest.Values). Measured
// (2026-12-06, loaded 2-core host): the bytes travel as base64 in the JSON messages, about 8 µs
// per 4 KiB at each end here, which a single get more than repays (it saves a transfer: 153 ->
// 100 µs) but a batch does not (its values move in one pipelined engine run): 64 values of
// 4 KiB carried made put_batch 1.7x and get_batch 1.7x slower. An answer without them (the cache
// full, an older master, a value too large) is read from a replica as before.

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
