package collective

import (
	"context"
	"fmt"
)

// Scatter copies root's ins[r] into rank r's out (ins is indexed by rank and only used on
// root, where every ins[r] of a member r must be len(out) bytes).
func (g *Group) Scatter(ctx context.Context, ins [][]byte, out []byte, root int) error {
	if g.rank == root {
		if err := checkOuts("scatter", g.Members(), ins, len(out)); err != nil {
			return fmt.Errorf("%w (input buffers)", err)
		}
	}
	if p := g.path(); p != nil && root >= 0 && root < g.maxSize {
		return p.scatter(ctx, ins, out, root)
	}
	o, err := g.begin(ctx, header{kind: kindScatter, root: int32(root), count: int64(len(out))})
	if err != nil {
		return err
	}
	if o.indexOf(root) < 0 {
		return o.finish(&MismatchError{Msg: "scatter: root rank is not an active member of the group"})
	}
	if g.rank != root {
		if len(out) == 0 {
			return nil
		}
		return o.finish(o.recvFull(root, stepData, out))
	}
	copy(out, ins[root])
	if len(out) == 0 {
		return nil
	}
	for k := 1; k < o.n; k++ {
		r := o.rankAt(o.idx + k)
		if err := o.send(r, stepData, ins[r]); err != nil {
			return o.finish(err)
		}
	}
	return nil
}
