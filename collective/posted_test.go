package collective

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/collective/reduce"
	"github.com/mooncake-go/mooncake/wire"
)

// postConn is a Conn that is also a ReducePoster, as p2p.Endpoint is: posted receives complete
// in the order they were posted (one after the other), each message lands (copied or
// reduced) in pieces of piece bytes, in order, and nothing lands after Cancel returns.
type postConn struct {
	Conn
	piece int
	mu    sync.Mutex
	last  chan struct{} // done of the receive posted last
}

type postRecv struct {
	mu       sync.Mutex
	canceled bool
	stop     context.CancelFunc
	done     chan struct{}
	n, src   int
	err      error
}

func (c *postConn) Post(peer int, tag uint64, buf []byte) wire.PostedRecv {
	return c.post(peer, tag, buf, func(dst, src []byte) { copy(dst, src) })
}

func (c *postConn) PostReduce(peer int, tag uint64, buf []byte, combine func(dst, src []byte)) wire.PostedRecv {
	return c.post(peer, tag, buf, combine)
}

func (c *postConn) post(peer int, tag uint64, buf []byte, land func(dst, src []byte)) wire.PostedRecv {
	ctx, stop := context.WithCancel(context.Background())
	r := &postRecv{stop: stop, done: make(chan struct{})}
	c.mu.Lock()
	prev := c.last
	c.last = r.done
	c.mu.Unlock()
	go func() {
		defer close(r.done)
		if prev != nil {
			<-prev
		}
		tmp := make([]byte, len(buf))
		n, err := c.Conn.Recv(ctx, peer, tag, tmp)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.canceled {
			return
		}
		r.n, r.src, r.err = n, peer, err
		for off := 0; err == nil && off < n; off += c.piece {
			e := min(off+c.piece, n)
			land(buf[off:e], tmp[off:e])
		}
	}()
	return r
}

func (r *postRecv) Wait(ctx context.Context) (int, int, error) {
	select {
	case <-r.done:
	case <-ctx.Done():
		r.Cancel(ctx.Err())
		<-r.done
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n, r.src, r.err
}

func (r *postRecv) Cancel(err error) {
	r.mu.Lock()
	if !r.canceled {
		r.canceled = true
		r.n, r.src, r.err = 0, -1, err
	}
	r.mu.Unlock()
	r.stop()
}

// memGroups are n groups over a MemNetwork: over postConns landing pieces of piece bytes, or
// (piece 0) over its Conns as they are; wrap, when set, wraps rank r's Conn first.
func memGroups(t *testing.T, n, piece int, opts Options, wrap func(r int, c Conn) Conn) []*Group {
	t.Helper()
	net := NewMemNetwork(n)
	gs := make([]*Group, n)
	for r := range gs {
		var c Conn = net.Conn(r)
		if wrap != nil {
			c = wrap(r, c)
		}
		if piece > 0 {
			c = &postConn{Conn: c, piece: piece}
		}
		g, err := NewGroup(c, r, n, 0, opts)
		if err != nil {
			t.Fatal(err)
		}
		gs[r] = g
	}
	t.Cleanup(func() {
		for _, g := range gs {
			g.Close()
		}
	})
	return gs
}

// TestRingPostedAllReduce: over a Conn that posts receives ahead and reduces on arrival
// (p2p's way), the ring all_reduce gives exact results with and without a save buffer, for
// chunks that arrive in many pieces or few.
func TestRingPostedAllReduce(t *testing.T) {
	if shmTest != nil {
		t.Skip("the Conn path")
	}
	cases := []struct {
		count, piece int
		opts         Options
	}{
		{3000, 8, tinyOpts}, // pieces of 24-byte chunks
		{300_000, 200_000, Options{ChunkBytes: 256 << 10}},  // pieces of several landPieces
		{300_000, 100_004, Options{ChunkBytes: 1000 << 10}}, // ... that start mid-landPiece
	}
	for _, c := range cases {
		for _, n := range []int{2, 3, 4} {
			for _, op := range []reduce.Op{reduce.Sum, reduce.Avg, reduce.Max} {
				for _, withSave := range []bool{true, false} {
					if c.count >= 100_000 && (op != reduce.Sum || n == 3) {
						continue
					}
					name := fmt.Sprintf("c%d/p%d/n%d/%s/save=%v", c.count, c.piece, n, op, withSave)
					t.Run(name, func(t *testing.T) {
						gs := memGroups(t, n, c.piece, c.opts, nil)
						ins := make([][]byte, n)
						bufs := make([][]byte, n)
						for r := range ins {
							ins[r] = fill(reduce.Float32, op, r, c.count, 1)
							bufs[r] = append([]byte(nil), ins[r]...)
						}
						want := expect(t, ins, reduce.Float32, op)
						noErrs(t, runEach(gs, 20*time.Second, func(ctx context.Context, g *Group) error {
							b := bufs[g.Rank()]
							if !withSave {
								return g.AllReduce(ctx, b, reduce.Float32, op)
							}
							return g.AllReduceOrRestore(ctx, b, make([]byte, len(b)), reduce.Float32, op)
						}))
						for r := range bufs {
							if !bytes.Equal(bufs[r], want) {
								t.Fatalf("rank %d: wrong result", r)
							}
						}
					})
				}
			}
		}
	}
}
