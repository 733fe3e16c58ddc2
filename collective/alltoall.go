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
	o, err := g.begin(ctx, header{kind: kindAllToAll, extra: extra})
	if err != nil {
		return err
	}
	copy(outs[g.rank], ins[g.rank])
	for k := 1; k < o.n; k++ {
		r := o.rankAt(o.idx + k)
		if len(ins[r]) > 0 {
			if err := o.send(r, stepData, ins[r]); err != nil {
				return o.finish(err)
			}
		}
	}
	for k := 1; k < o.n; k++ {
		r := o.rankAt(o.idx - k)
		if len(outs[r]) > 0 {
			if err := o.recvFull(r, stepData, outs[r]); err != nil {
				return o.finish(err)
			}
		}
	}
	return nil
}
