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
	// The outputs are not the inputs: the root's pieces go out right after its header, and
	// the headers are checked while they move (announce, collect), a round trip less.
	o, err := g.announce(ctx, header{kind: kindScatter, root: int32(root), count: int64(len(out))}, nil)
	if err != nil {
		return err
	}
	if o.indexOf(root) < 0 {
		if err := o.collect(nil); err != nil {
			return o.finish(err)
		}
		return o.finish(&MismatchError{Msg: "scatter: root rank is not an active member of the group"})
	}
	if o.n == 1 {
		copy(out, ins[root])
		return nil
	}
	if g.rank != root {
		var qs recvEach
		if len(out) > 0 {
			qs = o.recvEach([]int{root}, stepData, [][]byte{out})
		}
		if err := o.collect(nil); err != nil {
			qs.stop(err)
			return o.finish(err)
		}
		return o.finish(qs.wait())
	}
	if len(out) > 0 {
		for k := 1; k < o.n; k++ {
			r := o.rankAt(o.idx + k)
			if err := o.send(r, stepData, ins[r]); err != nil {
				return o.finish(err)
			}
		}
	}
	if err := o.collect(nil); err != nil {
		return o.finish(err)
	}
	copy(out, ins[root])
	return o.finish(nil)
}
