package collective

import (
	"context"
	"fmt"
)

// AllGather copies every rank's in into outs[rank] on every rank. outs is indexed by rank;
// every outs[r] of a member r must be len(in) bytes.
func (g *Group) AllGather(ctx context.Context, in []byte, outs [][]byte) error {
	if err := checkOuts("all_gather", g.Members(), outs, len(in)); err != nil {
		return err
	}
	if p := g.path(); p != nil {
		return p.allGather(ctx, in, outs, -1)
	}
	o, err := g.begin(ctx, header{kind: kindAllGather, count: int64(len(in))})
	if err != nil {
		return err
	}
	copy(outs[g.rank], in)
	if o.n == 1 || len(in) == 0 {
		return nil
	}
	if len(in) <= g.opts.SmallBytes {
		err = o.allGatherDirect(in, outs)
	} else {
		err = o.allGatherRing(in, outs)
	}
	return o.finish(err)
}

func checkOuts(name string, members []int, outs [][]byte, n int) error {
	for _, m := range members {
		if m >= len(outs) {
			return fmt.Errorf("%s: %d output buffers for a group with rank %d", name, len(outs), m)
		}
		if len(outs[m]) != n {
			return fmt.Errorf("%s: output buffer for rank %d has %d bytes, want %d", name, m, len(outs[m]), n)
		}
	}
	return nil
}

func (o *opState) allGatherDirect(in []byte, outs [][]byte) error {
	for k := 1; k < o.n; k++ {
		if err := o.send(o.rankAt(o.idx+k), stepData, in); err != nil {
			return err
		}
	}
	for k := 1; k < o.n; k++ {
		r := o.rankAt(o.idx - k)
		if err := o.recvFull(r, stepData, outs[r]); err != nil {
			return err
		}
	}
	return nil
}

// allGatherRing forwards blocks around the ring in chunks; a chunk is forwarded as soon as it
// arrived.
func (o *opState) allGatherRing(in []byte, outs [][]byte) error {
	n, idx := o.n, o.idx
	cs := chunkSpans(0, len(in), o.chunkBytes(1))
	right, left := o.rankAt(idx+1), o.rankAt(idx-1)
	s := o.startSender(len(cs) * n)
	for _, c := range cs {
		s.push(right, stepData, in[c.off:c.off+c.n], nil)
	}
	var err error
loop:
	for step := 0; step < n-1; step++ {
		blk := outs[o.rankAt(idx-step-1)]
		for _, c := range cs {
			dst := blk[c.off : c.off+c.n]
			if err = o.recvFullCtx(s.ctx, left, stepData, dst); err != nil {
				break loop
			}
			if step < n-2 {
				s.push(right, stepData, dst, nil)
			}
		}
	}
	return s.wait(err)
}
