package client

import (
	"context"
	"sync"

	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/internal/memview"
	"github.com/mooncake-go/mooncake/store/api"
)

// How the values of one batch request move: as few engine batches as possible instead of one
// synchronous transfer per value. A batch of small values to one segment is then one pipelined
// run of frames on one connection, not one round trip each.

// xfer is one move of a batch: local memory and the replica range it goes to or comes from.
type xfer struct {
	local buf
	r     api.Replica
}

// transferMany runs every xfer of a batch (write: local -> replica) and returns each one's
// error. Same-host replicas are copied through their mapping; values in registered memory go
// directly; the others are packed into staging chunks, several values a chunk; values larger
// than a chunk take the staged path of their own. The engine transfers to each target segment
// run as one synchronous engine batch per round of staging chunks, the segments at once; a
// failed engine batch fails the values it carried (they are not retried here: a caller that has
// other replicas to try does so).
func (c *Client) transferMany(ctx context.Context, write bool, xs []xfer) []error {
	errs := make([]error, len(xs))
	op := engine.OpRead
	if write {
		op = engine.OpWrite
	}
	bySeg := map[engine.SegmentID][]int{} // engine transfers, by target
	var segs []engine.SegmentID
	ids := make([]engine.SegmentID, len(xs))
	for i, x := range xs {
		n := uint64(len(x.local.b))
		if n == 0 {
			continue
		}
		if n > x.r.Size {
			errs[i] = api.Errorf(api.BUFFER_OVERFLOW, "%d bytes do not fit a %d-byte replica", n, x.r.Size)
			continue
		}
		id, err := c.openSegment(x.r.SegmentName)
		if err != nil {
			errs[i] = err
			continue
		}
		if view, release, ok, err := c.eng.MapRemotePinned(id, x.r.Addr, n); err == nil && ok {
			if write {
				copy(view, x.local.b)
			} else {
				copy(x.local.b, view)
			}
			release()
			continue
		}
		if !x.local.registered && n > c.chunk {
			errs[i] = c.staged(ctx, op, x.local.b, id, x.r)
			continue
		}
		ids[i] = id
		if _, ok := bySeg[id]; !ok {
			segs = append(segs, id)
		}
		bySeg[id] = append(bySeg[id], i)
	}
	if len(segs) == 1 {
		c.transferSegment(ctx, op, xs, bySeg[segs[0]], ids, errs)
		return errs
	}
	var wg sync.WaitGroup
	for _, id := range segs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.transferSegment(ctx, op, xs, bySeg[id], ids, errs) // disjoint indexes of errs
		}()
	}
	wg.Wait()
	return errs
}

// transferSegment runs the xfers idx (all to one segment, each at most a staging chunk or in
// registered memory) as engine batches: the registered ones with the first batch, the others
// packed into as many staging chunks as are free at once (at least one, waited for), one
// batch per round of chunks.
func (c *Client) transferSegment(ctx context.Context, op engine.Opcode, xs []xfer, idx []int, ids []engine.SegmentID, errs []error) {
	var direct, packed []int
	for _, i := range idx {
		if xs[i].local.registered {
			direct = append(direct, i)
		} else {
			packed = append(packed, i)
		}
	}
	stage := memview.Bytes(c.stageAddr, int(c.stageSize))
	type piece struct {
		stage []byte
		i     int
	}
	for first := true; first || len(packed) > 0; first = false {
		var reqs []engine.TransferRequest
		var carried []int
		if first {
			for _, i := range direct {
				x := xs[i]
				reqs = append(reqs, engine.TransferRequest{Opcode: op, Source: memview.Addr(x.local.b), TargetID: ids[i], TargetOffset: x.r.Addr, Length: uint64(len(x.local.b))})
				carried = append(carried, i)
			}
		}
		var offs []uint64
		var pieces []piece
		if len(packed) > 0 {
			select {
			case off := <-c.chunks:
				offs = append(offs, off)
			case <-ctx.Done():
				err := api.Errorf(api.RPC_TIMEOUT, "waiting for local buffer space: %v", ctx.Err())
				for _, i := range packed {
					errs[i] = err
				}
				packed = nil
			}
		}
		var pos uint64
	fill:
		for len(offs) > 0 && len(packed) > 0 {
			i := packed[0]
			n := uint64(len(xs[i].local.b))
			if pos+n > c.chunk {
				select {
				case off := <-c.chunks:
					offs = append(offs, off)
					pos = 0
				default:
					break fill // the rest in the next round
				}
			}
			at := offs[len(offs)-1] + pos
			p := piece{stage: stage[at : at+n], i: i}
			if op == engine.OpWrite {
				copy(p.stage, xs[i].local.b)
			}
			pieces = append(pieces, p)
			reqs = append(reqs, engine.TransferRequest{Opcode: op, Source: c.stageAddr + uintptr(at), TargetID: ids[i], TargetOffset: xs[i].r.Addr, Length: n})
			carried = append(carried, i)
			pos += n
			packed = packed[1:]
		}
		if len(reqs) > 0 {
			err := c.eng.TransferSync(ctx, c.mergeAdjacent(reqs))
			if err != nil {
				err = api.Errorf(api.TRANSFER_FAIL, "transfer of %d values with %s: %v", len(reqs), xs[carried[0]].r.SegmentName, err)
				for _, i := range carried {
					errs[i] = err
				}
			} else if op == engine.OpRead {
				for _, p := range pieces {
					copy(xs[p.i].local.b, p.stage)
				}
			}
		}
		for _, off := range offs {
			c.chunks <- off
		}
	}
}

// mergeAdjacent joins each run of requests whose local and remote ranges both continue the
// previous one's into one request (in place), when the joined local range lies in one
// registered buffer (the staging buffer, or one the user registered: the engine takes a source
// only inside one). The master places the keys of a batch put one after another in a segment
// (first fit) and a batch's staged values are packed in order, so a batch of small values to
// one segment is often one request: one frame and one completion for the engine and the peer
// instead of one per value. The engine batch fails or succeeds as a whole either way
// (transferSegment fails every value it carried), so nothing else changes.
func (c *Client) mergeAdjacent(reqs []engine.TransferRequest) []engine.TransferRequest {
	out := reqs[:1]
	for _, r := range reqs[1:] {
		last := &out[len(out)-1]
		if r.Opcode == last.Opcode && r.TargetID == last.TargetID &&
			r.Source == last.Source+uintptr(last.Length) && r.TargetOffset == last.TargetOffset+last.Length &&
			c.oneLocalBuffer(last.Source, last.Length+r.Length) {
			last.Length += r.Length
			continue
		}
		out = append(out, r)
	}
	return out
}

// oneLocalBuffer reports whether [addr, addr+n) lies in the staging buffer or in one buffer the
// user registered.
func (c *Client) oneLocalBuffer(addr uintptr, n uint64) bool {
	if addr >= c.stageAddr && uint64(addr-c.stageAddr)+n <= c.stageSize {
		return true
	}
	return c.registered(addr, n)
}
