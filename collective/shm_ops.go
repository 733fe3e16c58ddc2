package collective

import (
	"context"

	"github.com/mooncake-go/mooncake/collective/reduce"
)

// The algorithms of the same-host fast path. Every op is a sequence of rounds, the same number
// on every rank; in a round each rank writes into its own arena's current data half, calls
// sync (post + wait for all), then reads peers' halves of that round. Halves alternate with the
// round counter, so a rank never overwrites data a peer may still read: the peer posts its
// next round only after its reads, and the writer waits for that post before reusing the half.

// par is the data half of the current round.
func (o *shmOp) par() uint32 { return o.p.step & 1 }

// halfOf returns rank's data half par.
func (o *shmOp) halfOf(rank int, par uint32) []byte {
	p := o.p
	off := p.dataOff + int(par)*p.half
	return p.views[rank][off : off+p.half : off+p.half]
}

// sliceSpan is member i's part of count elements of es bytes split n ways, in 64-byte units
// where possible (the last part takes the remainder).
func sliceSpan(i, count, n, es int) (off, size int) {
	unit := max(1, 64/es)
	units := count / unit
	base, extra := units/n, units%n
	start := (i*base + min(i, extra)) * unit
	k := base * unit
	if i < extra {
		k += unit
	}
	if i == n-1 {
		k += count % unit
	}
	return start * es, k * es
}

// partBytes is the per-member part of a data half for ops that send every member its own
// piece (scatter, reduce_scatter, all_to_all): a multiple of es, 64-byte aligned when it can be.
func (o *shmOp) partBytes(es int) int {
	s := o.p.chunk / o.n
	if s >= 64 {
		s &^= 63
	}
	s = s / es * es
	return max(s, es)
}

// copyRound is the round size of a copy-only op moving total bytes per member: a quarter of
// it (at least four rounds, so copies in and out overlap), within [chunk, half].
func (o *shmOp) copyRound(total int) int {
	return min(max(total/4&^63, o.p.chunk), o.p.half)
}

func rounds(total, per int) int {
	if total <= 0 {
		return 1
	}
	return (total + per - 1) / per
}

func (p *shmPath) barrier(ctx context.Context) error {
	o, err := p.start(ctx, header{kind: kindBarrier})
	if err != nil {
		return err
	}
	return o.finish(o.sync())
}

// allReduce reduces buf across the members; with root >= 0 (reduce) only root's buf takes the
// result.
// save (nil, or len(buf) bytes): see Group.AllReduceOrRestore.
func (p *shmPath) allReduce(ctx context.Context, buf, save []byte, dt reduce.DType, op reduce.Op, es, root int) error {
	kind := kindAllReduce
	if root >= 0 {
		kind = kindReduce
	}
	o, err := p.start(ctx, header{kind: kind, dtype: dt, op: op, root: int32(root), count: int64(len(buf) / es)})
	if err != nil {
		return err
	}
	if len(buf) <= p.chunk && (len(buf) <= p.g.opts.SmallBytes || len(buf)/es < 2*o.n) {
		err = o.reduceSmall(buf, dt, op, root)
	} else {
		err = o.reduceLarge(buf, save, dt, op, es, root)
	}
	if err == nil && root >= 0 && o.indexOf(root) < 0 {
		err = &MismatchError{Msg: "reduce: root rank is not an active member of the group"}
	}
	return o.finish(err)
}

func (o *shmOp) indexOf(rank int) int {
	for i, m := range o.members {
		if m == rank {
			return i
		}
	}
	return -1
}

// reduceSmall: one round; every rank publishes its whole input and reduces all of them in
// member order (so every rank computes bit-identical results).
func (o *shmOp) reduceSmall(buf []byte, dt reduce.DType, op reduce.Op, root int) error {
	p := o.p
	par := o.par()
	copy(o.halfOf(p.rank, par), buf)
	if err := o.sync(); err != nil {
		return err
	}
	if (root >= 0 && p.rank != root) || len(buf) == 0 {
		return nil
	}
	srcs := p.srcs[:0]
	for _, m := range o.members {
		srcs = append(srcs, o.halfOf(m, par)[:len(buf)])
	}
	err := reduce.ReduceMany(buf, srcs, dt, op)
	clear(p.srcs[:cap(p.srcs)])
	if err == nil && op == reduce.Avg {
		err = reduce.Divide(buf, dt, o.n)
	}
	return err
}

// reduceLarge is a software pipeline over chunks of half a data half, one round per chunk
// (plus one): in round r a rank copies out the reduced slices of chunk r-2 (published by their
// reducers in round r-1), reduces its own slice of chunk r-1 (its own input in place, the
// peers' inputs published in round r-1, one reduce.ReduceMany pass) into the result area of
// its current half, and publishes the slices of chunk r that the other members reduce. With
// root >= 0 (reduce) only root copies results out.
//
// With save, round r also copies chunk r into save (it is being read anyway); results
// overwrite chunk r only in round r+2, so on failure buf[:saved] is restored from save and the
// rest of buf was never written.
func (o *shmOp) reduceLarge(buf, save []byte, dt reduce.DType, op reduce.Op, es, root int) (err error) {
	p := o.p
	cb := max(p.chunk/2/es*es, es)
	nc := (len(buf) + cb - 1) / cb
	out := root < 0 || p.rank == root
	chunk := func(k int) []byte { return buf[k*cb : min((k+1)*cb, len(buf))] }
	if !out {
		save = nil
	}
	saved := 0
	defer func() {
		if err != nil {
			copy(buf[:saved], save)
		}
	}()
	for r := 0; r <= nc; r++ {
		if p.testRound != nil {
			if err := p.testRound(r); err != nil {
				return err
			}
		}
		par := o.par()
		mine := o.halfOf(p.rank, par)
		if r >= 2 && out {
			o.copyResults(chunk(r-2), es, par^1, cb)
		}
		if r >= 1 {
			c := chunk(r - 1)
			so, sn := sliceSpan(o.idx, len(c)/es, o.n, es)
			if sn > 0 {
				dst := mine[cb+so : cb+so+sn]
				srcs := p.srcs[:0]
				for i, m := range o.members {
					if i == o.idx {
						srcs = append(srcs, c[so:so+sn])
					} else {
						srcs = append(srcs, o.halfOf(m, par^1)[so:so+sn])
					}
				}
				err := reduce.ReduceMany(dst, srcs, dt, op)
				clear(p.srcs[:cap(p.srcs)])
				if err == nil && op == reduce.Avg {
					err = reduce.Divide(dst, dt, o.n)
				}
				if err != nil {
					return err
				}
			}
		}
		if r < nc {
			c := chunk(r)
			if save != nil {
				// Non-temporal: the save is read only if the op fails, so it should
				// neither read its lines in first nor push the pipeline out of cache
				// (measurably faster than copy; docs/performance.md).
				saved += reduce.CopyStream(save[r*cb:], c)
			}
			count := len(c) / es
			for i := range o.members {
				if i != o.idx {
					so, sn := sliceSpan(i, count, o.n, es)
					copy(mine[so:so+sn], c[so:so+sn])
				}
			}
		}
		if err := o.sync(); err != nil {
			return err
		}
	}
	if out {
		o.copyResults(chunk(nc-1), es, o.par()^1, cb)
	}
	return nil
}

// copyResults copies every member's reduced slice of chunk c out of the result areas of data
// half par.
func (o *shmOp) copyResults(c []byte, es int, par uint32, cb int) {
	count := len(c) / es
	for i, m := range o.members {
		so, sn := sliceSpan(i, count, o.n, es)
		copy(c[so:so+sn], o.halfOf(m, par)[cb+so:cb+so+sn])
	}
}

// broadcast: per chunk, root publishes it and every other rank copies it out of root's arena.
func (p *shmPath) broadcast(ctx context.Context, buf []byte, root int) error {
	o, err := p.start(ctx, header{kind: kindBroadcast, root: int32(root), count: int64(len(buf))})
	if err != nil {
		return err
	}
	per := o.copyRound(len(buf))
	for k, nr := 0, rounds(len(buf), per); k < nr; k++ {
		off := k * per
		part := buf[off:min(off+per, len(buf))]
		par := o.par()
		if p.rank == root {
			copy(o.halfOf(p.rank, par), part)
		}
		if err := o.sync(); err != nil {
			return o.finish(err)
		}
		if k == 0 && o.indexOf(root) < 0 {
			return o.finish(&MismatchError{Msg: "broadcast: root rank is not an active member of the group"})
		}
		if p.rank != root {
			copy(part, o.halfOf(root, par))
		}
	}
	return nil
}

// allGather (root < 0) and gather (root >= 0; outs used on root only): per chunk every rank
// publishes its piece and the receivers copy it out of every peer's arena.
func (p *shmPath) allGather(ctx context.Context, in []byte, outs [][]byte, root int) error {
	kind := kindAllGather
	if root >= 0 {
		kind = kindGather
	}
	o, err := p.start(ctx, header{kind: kind, root: int32(root), count: int64(len(in))})
	if err != nil {
		return err
	}
	recv := root < 0 || p.rank == root
	if recv {
		copy(outs[p.rank], in)
	}
	per := o.copyRound(len(in))
	for k, nr := 0, rounds(len(in), per); k < nr; k++ {
		off := k * per
		end := min(off+per, len(in))
		par := o.par()
		copy(o.halfOf(p.rank, par), in[off:end])
		if err := o.sync(); err != nil {
			return o.finish(err)
		}
		if k == 0 && root >= 0 && o.indexOf(root) < 0 {
			return o.finish(&MismatchError{Msg: "gather: root rank is not an active member of the group"})
		}
		if !recv {
			continue
		}
		for _, m := range o.members {
			if m != p.rank {
				copy(outs[m][off:end], o.halfOf(m, par))
			}
		}
	}
	return nil
}

// scatter: per round root publishes every member's next piece in that member's part.
func (p *shmPath) scatter(ctx context.Context, ins [][]byte, out []byte, root int) error {
	o, err := p.start(ctx, header{kind: kindScatter, root: int32(root), count: int64(len(out))})
	if err != nil {
		return err
	}
	part := o.partBytes(1)
	if p.rank == root {
		copy(out, ins[root])
	}
	for k, nr := 0, rounds(len(out), part); k < nr; k++ {
		off := k * part
		end := min(off+part, len(out))
		par := o.par()
		if p.rank == root {
			h := o.halfOf(p.rank, par)
			for i, m := range o.members {
				if m != root {
					copy(h[i*part:], ins[m][off:end])
				}
			}
		}
		if err := o.sync(); err != nil {
			return o.finish(err)
		}
		if k == 0 && o.indexOf(root) < 0 {
			return o.finish(&MismatchError{Msg: "scatter: root rank is not an active member of the group"})
		}
		if p.rank != root {
			copy(out[off:end], o.halfOf(root, par)[o.idx*part:])
		}
	}
	return nil
}

// reduceScatter: per round every rank publishes, in member i's part, its next piece of ins[i];
// member i reduces its own piece and the peers' parts i in one pass.
func (p *shmPath) reduceScatter(ctx context.Context, ins [][]byte, out []byte, dt reduce.DType, op reduce.Op, es int) error {
	o, err := p.start(ctx, header{kind: kindReduceScatter, dtype: dt, op: op, count: int64(len(out) / es)})
	if err != nil {
		return err
	}
	part := o.partBytes(es)
	for k, nr := 0, rounds(len(out), part); k < nr; k++ {
		off := k * part
		end := min(off+part, len(out))
		par := o.par()
		h := o.halfOf(p.rank, par)
		for i, m := range o.members {
			if i != o.idx {
				copy(h[i*part:], ins[m][off:end])
			}
		}
		if err := o.sync(); err != nil {
			return o.finish(err)
		}
		if end <= off {
			continue
		}
		srcs := p.srcs[:0]
		for i, m := range o.members {
			if i == o.idx {
				srcs = append(srcs, ins[m][off:end])
			} else {
				srcs = append(srcs, o.halfOf(m, par)[o.idx*part:][:end-off])
			}
		}
		err := reduce.ReduceMany(out[off:end], srcs, dt, op)
		clear(p.srcs[:cap(p.srcs)])
		if err != nil {
			return o.finish(err)
		}
	}
	if op == reduce.Avg {
		return o.finish(reduce.Divide(out, dt, o.n))
	}
	return nil
}

// allToAll: per round every rank publishes, in member i's part, its next piece for member i;
// the round count follows from the largest piece in the (validated) size matrix.
func (p *shmPath) allToAll(ctx context.Context, ins, outs [][]byte) error {
	ms := p.g.maxSize
	ex := p.op.hdr.extra[:2*ms]
	for j := 0; j < ms; j++ {
		ex[j], ex[ms+j] = 0, 0
		if j < len(ins) {
			ex[j] = int64(len(ins[j]))
		}
		if j < len(outs) {
			ex[ms+j] = int64(len(outs[j]))
		}
	}
	o, err := p.start(ctx, header{kind: kindAllToAll, extra: ex})
	if err != nil {
		return err
	}
	copy(outs[p.rank], ins[p.rank])
	part := o.partBytes(1)
	nr := 1
	for k := 0; k < nr; k++ {
		off := k * part
		par := o.par()
		h := o.halfOf(p.rank, par)
		for i, m := range o.members {
			if i != o.idx && off < len(ins[m]) {
				copy(h[i*part:(i+1)*part], ins[m][off:])
			}
		}
		if err := o.sync(); err != nil {
			return o.finish(err)
		}
		if k == 0 {
			big := int64(0)
			for i := range o.members {
				for _, m := range o.members {
					big = max(big, p.hs[i].extra[m])
				}
			}
			nr = rounds(int(big), part)
		}
		for i, m := range o.members {
			if i != o.idx && off < len(outs[m]) {
				p.copyOut(outs[m][off:min(off+part, len(outs[m]))], o.halfOf(m, par)[o.idx*part:], len(outs[m]))
			}
		}
	}
	return nil
}

// copyOut copies a piece of an all_to_all output of total bytes out of a peer's arena.
// Outputs of SharedOptions.StreamOutBytes (MC_PG_SHM_STREAM_OUT, 8 MiB) and more take
// non-temporal stores: they do not stay in cache anyway, and a plain store first reads every
// destination line from memory (time and CPU per op both drop; docs/performance.md).
// broadcast and all_gather showed no gain from it (their rounds are larger; their readers
// overlap the writer's copy).
func (p *shmPath) copyOut(dst, src []byte, total int) int {
	if total >= p.streamOut {
		return reduce.CopyStream(dst, src)
	}
	return copy(dst, src)
}
