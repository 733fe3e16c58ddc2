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
	// The outputs are not the inputs: a member's data goes out right after its header, and
	// the headers are checked while it moves (announce, collect), a round trip less.
	o, err := g.announce(ctx, header{kind: kindGather, root: int32(root), count: int64(len(in))}, nil)
	if err != nil {
		return err
	}
	if o.indexOf(root) < 0 {
		// Every member sees it (the root is not among the members all of them checked), so
		// no data was sent; the headers are still exchanged, as by every op.
		if err := o.collect(nil); err != nil {
			return o.finish(err)
		}
		return o.finish(&MismatchError{Msg: "gather: root rank is not an active member of the group"})
	}
	if o.n == 1 {
		copy(outs[g.rank], in)
		return nil
	}
	if g.rank != root {
		if len(in) > 0 {
			if err := o.send(root, stepData, in); err != nil {
				return o.finish(err)
			}
		}
		return o.finish(o.collect(nil))
	}
	// The members' messages arrive in any order: every receive is posted first, so each lands
	// in its output instead of waiting aside (a copy) for the receive before it.
	var qs recvEach
	if len(in) > 0 {
		peers := make([]int, 0, o.n-1)
		bufs := make([][]byte, 0, o.n-1)
		for k := 1; k < o.n; k++ {
			r := o.rankAt(o.idx + k)
			peers, bufs = append(peers, r), append(bufs, outs[r])
		}
		qs = o.recvEach(peers, stepData, bufs)
	}
	if err := o.collect(nil); err != nil {
		qs.stop(err)
		return o.finish(err)
	}
	copy(outs[root], in)
	return o.finish(qs.wait())
}
