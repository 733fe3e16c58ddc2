package collective

import "context"

// Gather copies every rank's in into outs[rank] on root (outs is indexed by rank and only
// used on root, where every outs[r] of a member r must be len(in) bytes).
func (g *Group) Gather(ctx context.Context, in []byte, outs [][]byte, root int) error {
	if g.rank == root {
		if err := checkOuts("gather", g.Members(), outs, len(in)); err != nil {
			return err
		}
	}
	if p := g.path(); p != nil && root >= 0 {
		return p.allGather(ctx, in, outs, root)
	}
	o, err := g.begin(ctx, header{kind: kindGather, root: int32(root), count: int64(len(in))})
	if err != nil {
		return err
	}
	if o.indexOf(root) < 0 {
		return o.finish(&MismatchError{Msg: "gather: root rank is not an active member of the group"})
	}
	if g.rank != root {
		if len(in) == 0 {
			return nil
		}
		return o.finish(o.send(root, stepData, in))
	}
	copy(outs[root], in)
	if len(in) == 0 {
		return nil
	}
	// The members' messages arrive in any order: every receive is posted first, so each lands
	// in its output instead of waiting aside (a copy) for the receive before it.
	peers := make([]int, 0, o.n-1)
	bufs := make([][]byte, 0, o.n-1)
	for k := 1; k < o.n; k++ {
		r := o.rankAt(o.idx + k)
		peers, bufs = append(peers, r), append(bufs, outs[r])
	}
	return o.finish(o.recvEach(peers, stepData, bufs).wait())
}
