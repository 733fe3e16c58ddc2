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
	// The outputs are not the input: the data goes out right after the header, and the
	// members' headers are checked while it moves (announce, collect), a round trip less.
	o, err := g.announce(ctx, header{kind: kindAllGather, count: int64(len(in))}, nil)
	if err != nil {
		return err
	}
	if o.n == 1 {
		copy(outs[g.rank], in)
		return nil
	}
	if len(in) == 0 {
		return o.finish(o.collect(nil))
	}
	checked := func() error { return o.collect(nil) }
	if len(in) <= g.opts.SmallBytes {
		err = o.allGatherDirect(in, outs, checked)
	} else {
		err = o.allGatherRing(in, outs, checked)
	}
	if err == nil {
		copy(outs[g.rank], in)
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

func (o *opState) allGatherDirect(in []byte, outs [][]byte, checked func() error) error {
	// Every receive is posted before the first send, so a peer's message lands in its output
	// instead of being set aside (a copy) until its receive is made. The headers are checked
	// (checked) once this rank's data is out.
	peers := make([]int, 0, o.n-1)
	bufs := make([][]byte, 0, o.n-1)
	for k := 1; k < o.n; k++ {
		r := o.rankAt(o.idx - k)
		peers, bufs = append(peers, r), append(bufs, outs[r])
	}
	qs := o.recvEach(peers, stepData, bufs)
	for k := 1; k < o.n; k++ {
		if err := o.send(o.rankAt(o.idx+k), stepData, in); err != nil {
			qs.stop(err)
			return err
		}
	}
	if err := checked(); err != nil {
		qs.stop(err)
		return err
	}
	return qs.wait()
}

// allGatherRing forwards blocks around the ring in chunks; a chunk is forwarded as soon as it
// arrived. The receives are known from the start and each has a place of its own in outs, so
// all of them are posted before the first send: every chunk lands in its output (over tcp,
// read from the network straight into it) however far the loop lags behind the deliveries,
// rather than being set aside (a second copy) until the loop gets to it.
func (o *opState) allGatherRing(in []byte, outs [][]byte, checked func() error) error {
	n, idx := o.n, o.idx
	cs := chunkSpans(0, len(in), o.chunkBytes(1))
	right, left := o.rankAt(idx+1), o.rankAt(idx-1)
	s := o.startSender(len(cs) * n)
	q := o.recvAhead(s.ctx, left, stepData, (n-1)*len(cs))
	dsts := make([][]byte, 0, (n-1)*len(cs))
	for step := 0; step < n-1; step++ {
		blk := outs[o.rankAt(idx-step-1)]
		for _, c := range cs {
			dst := blk[c.off : c.off+c.n]
			dsts = append(dsts, dst)
			q.add(dst)
		}
	}
	for _, c := range cs {
		s.push(right, stepData, in[c.off:c.off+c.n], nil)
	}
	if err := checked(); err != nil { // the headers, while this rank's chunks go out
		q.stop(err)
		s.wait(err)
		return err
	}
	forward := (n - 2) * len(cs) // the chunks of every step but the last go on to the right
	var err error
	for j, dst := range dsts {
		if err = q.next(); err != nil {
			q.stop(err)
			break
		}
		if j < forward {
			s.push(right, stepData, dst, nil)
		}
	}
	return s.wait(err)
}
