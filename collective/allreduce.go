package collective

import (
	"context"
	"fmt"
	"sync"

	"github.com/mooncake-go/mooncake/collective/reduce"
)

// AllReduce reduces buf (whole elements of dt) with op across the group; every rank ends
// with the result in buf.
func (g *Group) AllReduce(ctx context.Context, buf []byte, dt reduce.DType, op reduce.Op) error {
	return g.allReduce(ctx, buf, nil, dt, op)
}

// AllReduceOrRestore is AllReduce for callers that rerun a failed op (elastic membership): when
// it fails, buf holds its input again. save (at least len(buf) bytes; nil: no restore, plain
// AllReduce) keeps what the op overwrote. The same-host path fills it chunk by chunk while its
// pipeline has the input in cache, which costs far less memory traffic than a copy of buf up
// front (ranks on one host share the memory bus, and an up-front copy took a large share of a
// large all_reduce; figures in docs/performance.md).
func (g *Group) AllReduceOrRestore(ctx context.Context, buf, save []byte, dt reduce.DType, op reduce.Op) error {
	save, err := saveFor("all_reduce", buf, save)
	if err != nil {
		return err
	}
	return g.allReduce(ctx, buf, save, dt, op)
}

// saveFor checks a restore buffer and cuts it to buf's length (nil stays nil).
func saveFor(op string, buf, save []byte) ([]byte, error) {
	if save == nil {
		return nil, nil
	}
	if len(save) < len(buf) {
		return nil, invalidSave(op, len(save), len(buf))
	}
	return save[:len(buf)], nil
}

func invalidSave(op string, have, want int) error {
	return fmt.Errorf("%s: the restore buffer has %d bytes, smaller than the %d-byte input", op, have, want)
}

func (g *Group) allReduce(ctx context.Context, buf, save []byte, dt reduce.DType, op reduce.Op) error {
	es, err := checkReduce("all_reduce", len(buf), dt, op)
	if err != nil {
		return err
	}
	if p := g.path(); p != nil {
		return p.allReduce(ctx, buf, save, dt, op, es, -1)
	}
	h := header{kind: kindAllReduce, dtype: dt, op: op, count: int64(len(buf) / es)}
	if n := len(g.Members()); n > 1 && n <= fusedRanks && len(buf) <= g.opts.FusedBytes && len(buf) > 0 {
		return g.allReduceFused(ctx, h, buf, dt, op, n)
	}
	// The op is in place: its first data goes out right after its header (it only reads buf),
	// and the members' headers are checked before anything writes into buf (announce,
	// collect), so a mismatch leaves buf as it was.
	o, err := g.announce(ctx, h, nil)
	if err != nil {
		return err
	}
	if o.n == 1 {
		return nil
	}
	checked := func() error { return o.collect(nil) }
	small := g.opts.SmallBytes
	if o.n == 2 {
		small = max(small, g.opts.PairBytes)
	}
	if len(buf) <= small || len(buf)/es < o.n {
		copy(save, buf)
		err = o.allReduceRecursive(buf, dt, op, checked)
		if err == nil && op == reduce.Avg {
			err = reduce.Divide(buf, dt, o.n)
		}
		if err != nil {
			copy(buf, save)
		}
	} else {
		err = o.ring(buf, save, dt, op, true, checked) // divides AVG segments itself; restores from save
	}
	return o.finish(err)
}

// fusedRanks: all_reduce of at most Options.FusedBytes among at most this many members sends its
// data with its header (every rank to every rank) and is done after that one exchange.
const fusedRanks = 8

// allReduceFused: every member's input rides in its header message; each rank then reduces
// all inputs in member order (bit-identical results everywhere). One message per peer and
// one round, against a header round plus log2(n) rounds of recursive doubling. n is the
// member count when the op was called; begin rechecks it (a view change in between fails
// the op with a membership mismatch, as any op).
func (g *Group) allReduceFused(ctx context.Context, h header, buf []byte, dt reduce.DType, op reduce.Op, n int) error {
	space := g.pool.get(n * len(buf))
	defer g.pool.put(space)
	ins := make([][]byte, n)
	for i := range ins {
		ins[i] = space[i*len(buf) : (i+1)*len(buf)]
	}
	o, err := g.beginFused(ctx, h, buf, ins)
	if err != nil {
		return err
	}
	if o.n != n {
		return o.finish(fmt.Errorf("all_reduce on rank %d: the group changed from %d to %d members during the op", g.rank, n, o.n))
	}
	ins[o.idx] = buf
	err = reduce.ReduceMany(buf, ins, dt, op)
	if err == nil && op == reduce.Avg {
		err = reduce.Divide(buf, dt, o.n)
	}
	return o.finish(err)
}

// allReduceRecursive is recursive doubling; with a member count that is not a power of two
// the first 2*rem members pair up first (the even one hands its data to the odd one and gets
// the result back at the end). checked (the op's header check) runs once, after this rank's
// first send and before anything writes into buf.
func (o *opState) allReduceRecursive(buf []byte, dt reduce.DType, op reduce.Op, checked func() error) error {
	check := func() error {
		if c := checked; c != nil {
			checked = nil
			return c()
		}
		return nil
	}
	p := 1
	for p*2 <= o.n {
		p *= 2
	}
	rem := o.n - p
	tmp := o.g.pool.get(len(buf))
	defer o.g.pool.put(tmp)
	idx := o.idx
	newIdx := -1
	if idx < 2*rem {
		if idx%2 == 0 {
			if err := o.send(o.members[idx+1], stepData, buf); err != nil {
				return err
			}
		} else {
			if err := check(); err != nil { // before a receive that a mismatch could fail otherwise
				return err
			}
			if err := o.recvFull(o.members[idx-1], stepData, tmp); err != nil {
				return err
			}
			if err := reduce.Reduce(buf, tmp, dt, op); err != nil {
				return err
			}
			newIdx = idx / 2
		}
	} else {
		newIdx = idx - rem
	}
	if newIdx >= 0 {
		for mask := 1; mask < p; mask <<= 1 {
			pn := newIdx ^ mask
			var pi int
			if pn < rem {
				pi = pn*2 + 1
			} else {
				pi = pn + rem
			}
			if err := o.exchange(o.members[pi], stepData, buf, tmp, check); err != nil {
				return err
			}
			if err := reduce.Reduce(buf, tmp, dt, op); err != nil {
				return err
			}
		}
	}
	if idx < 2*rem {
		if idx%2 == 1 {
			return o.send(o.members[idx-1], stepResult, buf)
		}
		if err := check(); err != nil {
			return err
		}
		return o.recvFull(o.members[idx+1], stepResult, buf)
	}
	return check()
}

// exchange sends out to peer and receives its message of the same step into in (all of it).
// With a Conn that posts receives, in is posted before the send, so the peer's message lands
// there directly even when it arrives while the send is under way (both sides send at once).
// between (nil: none) runs after the send, before the wait; its error ends the exchange.
func (o *opState) exchange(peer int, step uint16, out, in []byte, between func() error) error {
	q := o.recvAhead(o.ctx, peer, step, 1)
	q.add(in)
	if err := o.send(peer, step, out); err != nil {
		q.stop(err)
		return err
	}
	if between != nil {
		if err := between(); err != nil {
			q.stop(err)
			return err
		}
	}
	if err := q.next(); err != nil {
		q.stop(err)
		return err
	}
	return nil
}

// ring runs the chunked ring reduce-scatter over data (in place) and, with allGather, the ring
// all-gather after it. Member i ends the reduce-scatter holding the full reduction of segment
// (i+1) mod n; with AVG that segment is divided right away. The send of each chunk is queued as
// soon as the chunk is ready, so reductions overlap the transfers. With save (len(data) bytes;
// nil: none) each chunk of data is copied there just before the op first overwrites it, while
// it is in cache anyway, and on failure the overwritten chunks are put back: data then holds
// its input again (what an elastic rerun needs), for far less memory traffic than a copy of
// the whole input up front. checked (nil: the op's headers were checked already) runs once this
// member's first chunks are queued to go out, before anything writes into data.
func (o *opState) ring(data, save []byte, dt reduce.DType, op reduce.Op, allGather bool, checked func() error) error {
	n, idx := o.n, o.idx
	es := elemSize(dt)
	segs := segments(len(data)/es, n, es)
	cb := o.chunkBytes(es)
	chunks := make([][]span, n)
	total := 0
	for i, s := range segs {
		chunks[i] = chunkSpans(s.off, s.n, cb)
		total += len(chunks[i])
	}
	right, left := o.rankAt(idx+1), o.rankAt(idx-1)
	steps := n - 1
	if allGather {
		steps = 2 * (n - 1)
	}
	s := o.startSender(total * 2)
	mod := func(i int) int { return ((i % n) + n) % n }
	// saves: per chunk of data (by offset), its copy into save, made once, just before the op
	// first overwrites the chunk: on arrival of what is reduced into it, or, for this member's
	// own segment (overwritten in the all-gather), by the sender right after the chunk went
	// out, while the chunk is still in cache from that send. A chunk may be overwritten twice
	// (reduced, then received again in the all-gather when n > 2); the first time saves it.
	// The once also makes a late caller wait for a copy under way, so a receive is posted into
	// a chunk only once its copy is whole.
	type chunkSave struct {
		once sync.Once
		n    int
		done bool // the copy was made (set inside once)
	}
	var saves map[int]*chunkSave
	if save != nil {
		saves = make(map[int]*chunkSave, total)
		for _, cs := range chunks {
			for _, c := range cs {
				saves[c.off] = &chunkSave{n: c.n}
			}
		}
	}
	keep := func(off int) {
		if save == nil {
			return
		}
		cs := saves[off]
		cs.once.Do(func() {
			reduce.CopyStream(save[off:off+cs.n], data[off:off+cs.n])
			cs.done = true
		})
	}
	for _, c := range chunks[idx] {
		if save != nil {
			off := c.off
			s.pushThen(right, stepData, data[c.off:c.off+c.n], func() { keep(off) })
		} else {
			s.push(right, stepData, data[c.off:c.off+c.n], nil)
		}
	}
	if checked != nil {
		if err := checked(); err != nil {
			return s.wait(err) // nothing was written into data yet
		}
	}
	// The receives, in order: reduce-scatter chunks into rotating scratch buffers (item j uses
	// tmps[j%depth] and is posted once item j-depth is done), all-gather chunks straight into
	// data. A Conn that can post receives ahead (p2p) then never sets an early chunk aside.
	type item struct {
		dst  []byte
		step int
		off  int
	}
	var items []item
	for step := 0; step < steps; step++ {
		seg := mod(idx - (step - (n - 1)))
		if step < n-1 {
			seg = mod(idx - step - 1)
		}
		for _, c := range chunks[seg] {
			items = append(items, item{data[c.off : c.off+c.n], step, c.off})
		}
	}
	const depth = 3
	q := o.recvAhead(s.ctx, left, stepData, depth)
	// A Conn that reduces on arrival (p2p: straight from the cell of its mailbox) takes
	// reduce-scatter chunks into data itself; otherwise they go to rotating scratch buffers first.
	rp := q.reducer()
	var tmps [depth][]byte
	var combine func(dst, src []byte)
	if rp != nil {
		combine = func(dst, src []byte) { reduce.Reduce(dst, src, dt, op) }
	} else {
		for i := range tmps {
			tmps[i] = o.g.pool.get(min(cb, len(data)))
			defer o.g.pool.put(tmps[i])
		}
	}
	// Over a Conn that reads all-gather chunks straight into data (Lander), a chunk is saved
	// when posted at the latest (this member's own chunks mostly were, by the sender) and
	// received plainly; otherwise it is saved as it arrives (below).
	lands := q.lands()
	post := func(j int) {
		it := items[j]
		if it.step < n-1 && rp == nil {
			q.add(tmps[j%depth][:len(it.dst)])
			return
		}
		if rp != nil && save != nil && !(lands && it.step >= n-1) {
			// Saved on arrival: the first piece that lands saves the whole chunk, which
			// the delivery then reads from cache (one pass over memory less than a save
			// made here, chunks before the data comes).
			first := true
			land := func(dst, src []byte) {
				if first {
					first = false
					keep(it.off)
				}
				if it.step >= n-1 {
					copy(dst, src)
				} else {
					reduce.Reduce(dst, src, dt, op)
				}
			}
			q.addReduce(it.dst, land)
			return
		}
		keep(it.off) // the receive may write it any time from now on
		if it.step >= n-1 {
			q.add(it.dst)
		} else {
			q.addReduce(it.dst, combine)
		}
	}
	for j := 0; j < min(depth, len(items)); j++ {
		post(j)
	}
	var err error
	for j, it := range items {
		if err = q.next(); err != nil {
			break
		}
		if it.step < n-1 {
			if rp == nil {
				keep(it.off)
				if err = reduce.Reduce(it.dst, tmps[j%depth][:len(it.dst)], dt, op); err != nil {
					break
				}
			}
			if it.step == n-2 && op == reduce.Avg {
				if err = reduce.Divide(it.dst, dt, n); err != nil {
					break
				}
			}
		}
		if j+depth < len(items) {
			post(j + depth)
		}
		if it.step < steps-1 {
			s.push(right, stepData, it.dst, nil)
		}
	}
	if err != nil {
		q.stop(err)
	}
	err = s.wait(err)
	if err != nil && save != nil {
		// Nothing writes into data any more (receives withdrawn, sender done): put back
		// what the op overwrote.
		for off, cs := range saves {
			cs.once.Do(func() {}) // waits for a copy under way; marks an unmade one as never made
			if cs.done {
				copy(data[off:off+cs.n], save[off:off+cs.n])
			}
		}
	}
	return err
}
