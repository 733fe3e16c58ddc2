package collective

import (
	"context"

	"github.com/mooncake-go/mooncake/collective/reduce"
)

// Reduce reduces buf with op across the group into root's buf; the other ranks' buffers are
// left as they were.
func (g *Group) Reduce(ctx context.Context, buf []byte, dt reduce.DType, op reduce.Op, root int) error {
	return g.reduceTo(ctx, buf, nil, dt, op, root)
}

// ReduceOrRestore is Reduce that leaves root's buf holding its input when it fails (see
// AllReduceOrRestore; save nil: plain Reduce).
func (g *Group) ReduceOrRestore(ctx context.Context, buf, save []byte, dt reduce.DType, op reduce.Op, root int) error {
	save, err := saveFor("reduce", buf, save)
	if err != nil {
		return err
	}
	return g.reduceTo(ctx, buf, save, dt, op, root)
}

func (g *Group) reduceTo(ctx context.Context, buf, save []byte, dt reduce.DType, op reduce.Op, root int) (err error) {
	es, err := checkReduce("reduce", len(buf), dt, op)
	if err != nil {
		return err
	}
	if p := g.path(); p != nil && root >= 0 {
		return p.allReduce(ctx, buf, save, dt, op, es, root)
	}
	o, err := g.begin(ctx, header{kind: kindReduce, dtype: dt, op: op, root: int32(root), count: int64(len(buf) / es)})
	if err != nil {
		return err
	}
	ri := o.indexOf(root)
	if ri < 0 {
		return o.finish(&MismatchError{Msg: "reduce: root rank is not an active member of the group"})
	}
	if o.n == 1 || len(buf) == 0 {
		if op == reduce.Avg {
			return o.finish(reduce.Divide(buf, dt, o.n))
		}
		return o.finish(nil)
	}
	acc := buf
	if o.idx == ri {
		copy(save, buf)
		defer func() {
			if err != nil {
				copy(buf, save)
			}
		}()
	} else {
		acc = g.pool.get(len(buf))
		defer g.pool.put(acc)
		copy(acc, buf)
	}
	if len(buf) <= g.opts.SmallBytes || len(buf)/es < o.n {
		err = o.reduceTree(acc, dt, op, ri)
		if err == nil && o.idx == ri && op == reduce.Avg {
			err = reduce.Divide(buf, dt, o.n)
		}
	} else {
		err = o.ring(acc, nil, dt, op, false, nil)
		if err == nil {
			err = o.gatherSegments(acc, es, ri)
		}
	}
	return o.finish(err)
}

// reduceTree is a binomial tree toward member index ri.
func (o *opState) reduceTree(acc []byte, dt reduce.DType, op reduce.Op, ri int) error {
	n := o.n
	vr := (o.idx - ri + n) % n
	tmp := o.g.pool.get(len(acc))
	defer o.g.pool.put(tmp)
	for mask := 1; mask < n; mask <<= 1 {
		if vr&mask == 0 {
			src := vr | mask
			if src < n {
				if err := o.recvFull(o.rankAt(src+ri), stepData, tmp); err != nil {
					return err
				}
				if err := reduce.Reduce(acc, tmp, dt, op); err != nil {
					return err
				}
			}
		} else {
			return o.send(o.rankAt((vr&^mask)+ri), stepData, acc)
		}
	}
	return nil
}

// gatherSegments sends each member's finished ring segment ((i+1) mod n) to the root.
func (o *opState) gatherSegments(acc []byte, es, ri int) error {
	n := o.n
	segs := segments(len(acc)/es, n, es)
	if o.idx != ri {
		s := segs[(o.idx+1)%n]
		if s.n == 0 {
			return nil
		}
		return o.send(o.members[ri], stepResult, acc[s.off:s.off+s.n])
	}
	for i := 0; i < n; i++ {
		if i == ri {
			continue
		}
		s := segs[(i+1)%n]
		if s.n == 0 {
			continue
		}
		if err := o.recvFull(o.members[i], stepResult, acc[s.off:s.off+s.n]); err != nil {
			return err
		}
	}
	return nil
}
