package collective

import "context"

// Broadcast copies root's buf to every rank's buf (same size on every rank).
func (g *Group) Broadcast(ctx context.Context, buf []byte, root int) error {
	if p := g.path(); p != nil && root >= 0 && root < g.maxSize {
		return p.broadcast(ctx, buf, root)
	}
	o, err := g.begin(ctx, header{kind: kindBroadcast, root: int32(root), count: int64(len(buf))})
	if err != nil {
		return err
	}
	ri := o.indexOf(root)
	if ri < 0 {
		return o.finish(&MismatchError{Msg: "broadcast: root rank is not an active member of the group"})
	}
	if o.n == 1 || len(buf) == 0 {
		return o.finish(nil)
	}
	if len(buf) <= g.opts.SmallBytes {
		err = o.broadcastTree(buf, ri)
	} else {
		err = o.broadcastChain(buf, ri)
	}
	return o.finish(err)
}

// broadcastTree is a binomial tree rooted at member index ri.
func (o *opState) broadcastTree(buf []byte, ri int) error {
	n := o.n
	vr := (o.idx - ri + n) % n
	mask := 1
	for mask < n {
		if vr&mask != 0 {
			if err := o.recvFull(o.rankAt(vr-mask+ri), stepData, buf); err != nil {
				return err
			}
			break
		}
		mask <<= 1
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if vr+mask < n {
			if err := o.send(o.rankAt(vr+mask+ri), stepData, buf); err != nil {
				return err
			}
		}
	}
	return nil
}

// broadcastChain pipelines chunks along root -> root+1 -> ... : each member forwards a chunk
// while the next one arrives.
func (o *opState) broadcastChain(buf []byte, ri int) error {
	n := o.n
	vr := (o.idx - ri + n) % n
	cs := chunkSpans(0, len(buf), o.chunkBytes(1))
	next, prev := o.rankAt(o.idx+1), o.rankAt(o.idx-1)
	last := vr == n-1
	if vr == 0 {
		for _, c := range cs {
			if err := o.send(next, stepData, buf[c.off:c.off+c.n]); err != nil {
				return err
			}
		}
		return nil
	}
	var s *sender
	ctx := o.ctx
	if !last {
		s = o.startSender(len(cs))
		ctx = s.ctx
	}
	// Every chunk's receive is posted up front (each has its place in buf), so chunks land
	// there however far the loop lags behind the deliveries.
	q := o.recvAhead(ctx, prev, stepData, len(cs))
	for _, c := range cs {
		q.add(buf[c.off : c.off+c.n])
	}
	var err error
	for _, c := range cs {
		if err = q.next(); err != nil {
			q.stop(err)
			break
		}
		if s != nil {
			s.push(next, stepData, buf[c.off:c.off+c.n], nil)
		}
	}
	if s != nil {
		return s.wait(err)
	}
	return err
}
