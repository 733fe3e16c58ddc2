package collective

import (
	"context"

	"github.com/mooncake-go/mooncake/collective/reduce"
)

// ReduceScatter reduces, for every rank r, the ins[r] of all ranks into rank r's out. ins is
// indexed by rank; every ins[r] of a member r must be len(out) bytes (whole elements of dt).
func (g *Group) ReduceScatter(ctx context.Context, ins [][]byte, out []byte, dt reduce.DType, op reduce.Op) error {
	es, err := checkReduce("reduce_scatter", len(out), dt, op)
	if err != nil {
		return err
	}
	if err := checkOuts("reduce_scatter", g.Members(), ins, len(out)); err != nil {
		return err
	}
	if p := g.path(); p != nil {
		return p.reduceScatter(ctx, ins, out, dt, op, es)
	}
	// The output is not an input: this rank's first data goes out right after its header, and
	// the headers are checked while it moves (announce, collect), a round trip less.
	o, err := g.announce(ctx, header{kind: kindReduceScatter, dtype: dt, op: op, count: int64(len(out) / es)}, nil)
	if err != nil {
		return err
	}
	if o.n == 1 {
		copy(out, ins[g.rank])
		return nil
	}
	checked := func() error { return o.collect(nil) }
	switch {
	case len(out) == 0:
		err = checked()
	case len(out) <= g.opts.SmallBytes:
		err = o.reduceScatterDirect(ins, out, dt, op, checked)
	default:
		err = o.reduceScatterRing(ins, out, dt, op, checked)
	}
	if err == nil && op == reduce.Avg {
		err = reduce.Divide(out, dt, o.n)
	}
	return o.finish(err)
}

// reduceScatterDirect: every member sends ins[r] to r; r reduces them in member order. The
// headers are checked (checked) once this rank's data is out.
func (o *opState) reduceScatterDirect(ins [][]byte, out []byte, dt reduce.DType, op reduce.Op, checked func() error) error {
	for k := 1; k < o.n; k++ {
		r := o.rankAt(o.idx + k)
		if err := o.send(r, stepData, ins[r]); err != nil {
			return err
		}
	}
	if err := checked(); err != nil {
		return err
	}
	tmp := o.g.pool.get(len(out))
	defer o.g.pool.put(tmp)
	for i, r := range o.members {
		src := tmp
		if i == 0 {
			src = out
		}
		if r == o.g.rank {
			copy(src, ins[r])
		} else if err := o.recvFull(r, stepData, src); err != nil {
			return err
		}
		if i > 0 {
			if err := reduce.Reduce(out, src, dt, op); err != nil {
				return err
			}
		}
	}
	return nil
}

// reduceScatterRing: at step s member i sends its partial of block (i-s-1) to the right and
// adds its own contribution to the partial of block (i-s-2) arriving from the left; after n-1
// steps block i is complete at member i. Chunks are forwarded as soon as they are reduced. The
// headers are checked (checked) while this rank's first chunks go out.
func (o *opState) reduceScatterRing(ins [][]byte, out []byte, dt reduce.DType, op reduce.Op, checked func() error) error {
	n, idx := o.n, o.idx
	es := elemSize(dt)
	cs := chunkSpans(0, len(out), o.chunkBytes(es))
	right, left := o.rankAt(idx+1), o.rankAt(idx-1)
	s := o.startSender(len(cs) * n)
	first := ins[o.rankAt(idx-1)]
	for _, c := range cs {
		s.push(right, stepData, first[c.off:c.off+c.n], nil)
	}
	if err := checked(); err != nil {
		return s.wait(err)
	}
	var err error
loop:
	for step := 0; step < n-1; step++ {
		own := ins[o.rankAt(idx-step-2)]
		lastStep := step == n-2
		for _, c := range cs {
			var dst []byte
			if lastStep {
				dst = out[c.off : c.off+c.n]
			} else {
				dst = o.g.pool.get(c.n)
			}
			if err = o.recvFullCtx(s.ctx, left, stepData, dst); err == nil {
				err = reduce.Reduce(dst, own[c.off:c.off+c.n], dt, op)
			}
			if err != nil {
				if !lastStep {
					o.g.pool.put(dst)
				}
				break loop
			}
			if !lastStep {
				s.push(right, stepData, dst, dst)
			}
		}
	}
	return s.wait(err)
}
