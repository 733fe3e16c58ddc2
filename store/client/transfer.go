package client

import (
	"context"

	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/internal/memview"
	"github.com/mooncake-go/mooncake/store/api"
)

// How bytes move between local memory and a replica: a memcpy through a same-host mapping, a
// direct engine transfer from registered memory, or through the staging buffer.

func (c *Client) openSegment(name string) (engine.SegmentID, error) {
	c.segMu.Lock()
	id, ok := c.segIDs[name]
	c.segMu.Unlock()
	if ok {
		return id, nil
	}
	id, err := c.eng.OpenSegment(name)
	if err != nil {
		return 0, api.Errorf(api.TRANSFER_FAIL, "open segment %s: %v", name, err)
	}
	c.segMu.Lock()
	c.segIDs[name] = id
	c.segMu.Unlock()
	return id, nil
}

// buf is local memory taking part in a transfer: a Go or foreign slice, and whether it lies in
// engine-registered memory (then transfers use it directly, without staging).
type buf struct {
	b          []byte
	registered bool
}

// transfer moves len(local.b) bytes between local and the replica (write: local -> replica).
func (c *Client) transfer(ctx context.Context, write bool, local buf, r api.Replica) error {
	n := uint64(len(local.b))
	if n > r.Size {
		return api.Errorf(api.BUFFER_OVERFLOW, "%d bytes do not fit a %d-byte replica", n, r.Size)
	}
	id, err := c.openSegment(r.SegmentName)
	if err != nil {
		return err
	}
	// Same host: one memcpy through the peer's (or our own) shared mapping, held for the copy so
	// a peer dying or a segment being freed meanwhile cannot unmap it under us.
	if view, release, ok, err := c.eng.MapRemotePinned(id, r.Addr, n); err == nil && ok {
		if !write {
			// A large result is usually fresh memory (a new bytes object, a malloc above the
			// mmap threshold): fault it in with one system call, not one fault per 4 KiB.
			populateView(local.b, true)
		}
		if write {
			copy(view, local.b)
		} else {
			copy(local.b, view)
		}
		release()
		return nil
	}
	op := engine.OpRead
	if write {
		op = engine.OpWrite
	}
	if local.registered {
		err := c.eng.TransferSync(ctx, []engine.TransferRequest{{Opcode: op, Source: memview.Addr(local.b), TargetID: id, TargetOffset: r.Addr, Length: n}})
		if err != nil {
			return api.Errorf(api.TRANSFER_FAIL, "transfer %d bytes with %s: %v", n, r.SegmentName, err)
		}
		return nil
	}
	return c.staged(ctx, op, local.b, id, r)
}

// staged moves data through staging chunks, several chunks per engine batch.
func (c *Client) staged(ctx context.Context, op engine.Opcode, data []byte, id engine.SegmentID, r api.Replica) error {
	stage := memview.Bytes(c.stageAddr, int(c.stageSize))
	for done := uint64(0); done < uint64(len(data)); {
		// take one chunk (blocking), then any more that are free right away
		var offs []uint64
		select {
		case off := <-c.chunks:
			offs = append(offs, off)
		case <-ctx.Done():
			return api.Errorf(api.RPC_TIMEOUT, "waiting for local buffer space: %v", ctx.Err())
		}
		want := (uint64(len(data)) - done + c.chunk - 1) / c.chunk
	more:
		for uint64(len(offs)) < min(want, 8) {
			select {
			case off := <-c.chunks:
				offs = append(offs, off)
			default:
				break more
			}
		}
		reqs := make([]engine.TransferRequest, 0, len(offs))
		type piece struct{ stage, data []byte }
		var pieces []piece
		p := done
		for _, off := range offs {
			if p >= uint64(len(data)) {
				break
			}
			n := min(c.chunk, uint64(len(data))-p)
			pc := piece{stage[off : off+n], data[p : p+n]}
			if op == engine.OpWrite {
				copy(pc.stage, pc.data)
			}
			pieces = append(pieces, pc)
			reqs = append(reqs, engine.TransferRequest{Opcode: op, Source: c.stageAddr + uintptr(off), TargetID: id, TargetOffset: r.Addr + p, Length: n})
			p += n
		}
		err := c.eng.TransferSync(ctx, reqs)
		if err == nil && op == engine.OpRead {
			for _, pc := range pieces {
				copy(pc.data, pc.stage)
			}
		}
		for _, off := range offs {
			c.chunks <- off
		}
		if err != nil {
			return api.Errorf(api.TRANSFER_FAIL, "transfer %d bytes with %s: %v", len(data), r.SegmentName, err)
		}
		done = p
	}
	return nil
}
