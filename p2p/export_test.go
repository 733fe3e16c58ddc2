package p2p

// Test access to unexported parts of the endpoint, for the package's own tests.

import "sync/atomic"

// tapRecv makes chunk (nil: nothing) run on the receive path before each received chunk is
// handled, and counts the bytes copied into unexpected messages from then on: stashed reads
// that count, untap removes the tap.
func (e *Endpoint) tapRecv(chunk func(hd chunkHdr)) (stashed func() int64, untap func()) {
	var n atomic.Int64
	t := &recvTap{chunk: chunk, stash: func(b int) { n.Add(int64(b)) }}
	e.tap.Store(t)
	return n.Load, func() { e.tap.CompareAndSwap(t, nil) }
}
