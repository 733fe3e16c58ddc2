package collective

import (
	"context"
	"fmt"
)

// AllToAll sends ins[r] to rank r and receives outs[r] from rank r (both indexed by rank;
// sizes may differ per rank, as in all_to_all_single with split sizes). Every rank checks the
// whole size matrix, so a disagreement fails the op on all ranks.
func (g *Group) AllToAll(ctx context.Context, ins, outs [][]byte) error {
	members := g.Members()
	last := members[len(members)-1]
	if len(ins) <= last || len(outs) <= last {
		return fmt.Errorf("all_to_all: %d input and %d output buffers for a group with rank %d", len(ins), len(outs), last)
	}
	extra := make([]int64, 2*len(ins))
	if len(outs) != len(ins) {
		return fmt.Errorf("all_to_all: %d input buffers but %d output buffers", len(ins), len(outs))
	}
	for i := range ins {
		extra[i] = int64(len(ins[i]))
		extra[len(ins)+i] = int64(len(outs[i]))
	}
	if p := g.path(); p != nil {
		return p.allToAll(ctx, ins, outs)
	}
	// A pair's data of at most Options.FusedBytes rides in its op header message (both ends
	// decide from the pair's size, which the headers check): small all_to_alls take one
	// message per peer instead of a header round and then a data round.
	fused := g.opts.FusedBytes
	carried := func(n int) bool { return fused > 0 && n <= fused }
	var out, in func(i, r int) []byte
	if fused > 0 {
		out = func(_, r int) []byte {
			if carried(len(ins[r])) {
				return ins[r]
			}
			return nil
		}
		in = func(_, r int) []byte {
			if carried(len(outs[r])) {
				if outs[r] == nil {
					return []byte{}
				}
				return outs[r]
			}
			return nil
		}
	}
	// The outputs are not the inputs: the pieces go out right after the header, and the
	// members' headers are checked while they move (announce, collect), a round trip less.
	o, err := g.announce(ctx, header{kind: kindAllToAll, extra: extra}, out)
	if err != nil {
		return err
	}
	// The receives are posted before the sends (with a Conn that posts, p2p): a peer's piece
	// that arrives while this rank is still sending lands in its output buffer instead of
	// being set aside and copied a second time.
	var qs []*recvAhead
	for k := 1; k < o.n; k++ {
		r := o.rankAt(o.idx - k)
		if len(outs[r]) > 0 && !carried(len(outs[r])) {
			q := o.recvAhead(o.ctx, r, stepData, 1)
			q.add(outs[r])
			qs = append(qs, q)
		}
	}
	stop := func(err error) {
		for _, q := range qs {
			if q != nil {
				q.stop(err)
			}
		}
	}
	for k := 1; k < o.n; k++ {
		r := o.rankAt(o.idx + k)
		if len(ins[r]) > 0 && !carried(len(ins[r])) {
			if err := o.send(r, stepData, ins[r]); err != nil {
				stop(err)
				return o.finish(err)
			}
		}
	}
	if o.n > 1 {
		if err := o.collect(in); err != nil {
			stop(err)
			return o.finish(err)
		}
	}
	copy(outs[g.rank], ins[g.rank])
	for i, q := range qs {
		if err := q.next(); err != nil {
			stop(err)
			return o.finish(err)
		}
		qs[i] = nil
	}
	return o.finish(nil)
}
