package collective

import (
	"context"
	"fmt"
	"sync"

	"github.com/mooncake-go/mooncake/wire"
)

// MemNetwork connects n ranks of one process through memory: the reference Conn that tests run
// the algorithms on, with the same semantics as p2p (buffered sends, FIFO per peer and tag,
// posted receives, any-source receives, aborts).
type MemNetwork struct {
	conns []*memConn
}

// NewMemNetwork returns a network of n ranks.
func NewMemNetwork(n int) *MemNetwork {
	m := &MemNetwork{}
	for i := 0; i < n; i++ {
		m.conns = append(m.conns, &memConn{net: m, rank: i, aborted: map[uint64]*wire.AbortError{}})
	}
	return m
}

// Conn returns rank's end.
func (m *MemNetwork) Conn(rank int) Conn { return m.conns[rank] }

// Kill makes rank silent: messages to and from it are dropped from now on (a dead peer).
func (m *MemNetwork) Kill(rank int) {
	c := m.conns[rank]
	c.mu.Lock()
	c.dead = true
	c.mu.Unlock()
}

type memMsg struct {
	from int
	tag  uint64
	data []byte
}

type memRecv struct {
	peer int
	tag  uint64
	buf  []byte
	n    int
	from int
	err  error
	done chan struct{}
}

type memConn struct {
	net     *MemNetwork
	rank    int
	mu      sync.Mutex
	dead    bool
	queue   []memMsg
	posted  []*memRecv
	aborted map[uint64]*wire.AbortError
}

func (c *memConn) isDead() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dead
}

func (c *memConn) Send(ctx context.Context, peer int, tag uint64, data []byte) error {
	if peer < 0 || peer >= len(c.net.conns) {
		return fmt.Errorf("no rank %d", peer)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.isDead() {
		return nil
	}
	c.net.conns[peer].deliver(c.rank, tag, append([]byte(nil), data...))
	return nil
}

func (c *memConn) deliver(from int, tag uint64, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return
	}
	if wire.IsAbortTag(tag) {
		ae := wire.DecodeAbort(data)
		ae.Peer = from
		c.abortLocked(wire.SpaceOf(tag), ae)
		return
	}
	if _, ok := c.aborted[wire.SpaceOf(tag)]; ok {
		return
	}
	for i, r := range c.posted {
		if r.tag == tag && (r.peer == wire.AnySource || r.peer == from) {
			c.posted = append(c.posted[:i], c.posted[i+1:]...)
			r.fill(from, data)
			return
		}
	}
	c.queue = append(c.queue, memMsg{from, tag, data})
}

func (r *memRecv) fill(from int, data []byte) {
	r.from = from
	if len(data) > len(r.buf) {
		r.err = fmt.Errorf("message from rank %d has %d bytes, the receive buffer holds %d", from, len(data), len(r.buf))
	} else {
		r.n = copy(r.buf, data)
	}
	close(r.done)
}

func (c *memConn) abortLocked(space uint64, ae *wire.AbortError) {
	if _, ok := c.aborted[space]; ok {
		return
	}
	c.aborted[space] = ae
	keep := c.posted[:0]
	for _, r := range c.posted {
		if wire.SpaceOf(r.tag) == space {
			r.err = ae
			close(r.done)
		} else {
			keep = append(keep, r)
		}
	}
	c.posted = keep
	q := c.queue[:0]
	for _, m := range c.queue {
		if wire.SpaceOf(m.tag) != space {
			q = append(q, m)
		}
	}
	c.queue = q
}

func (c *memConn) Recv(ctx context.Context, peer int, tag uint64, buf []byte) (int, error) {
	n, _, err := c.RecvFrom(ctx, peer, tag, buf)
	return n, err
}

// RecvFrom is Recv that also reports the sender (for AnySource).
func (c *memConn) RecvFrom(ctx context.Context, peer int, tag uint64, buf []byte) (int, int, error) {
	c.mu.Lock()
	if ae, ok := c.aborted[wire.SpaceOf(tag)]; ok {
		c.mu.Unlock()
		return 0, -1, ae
	}
	r := &memRecv{peer: peer, tag: tag, buf: buf, done: make(chan struct{})}
	found := false
	for i, m := range c.queue {
		if m.tag == tag && (peer == wire.AnySource || peer == m.from) {
			c.queue = append(c.queue[:i], c.queue[i+1:]...)
			r.fill(m.from, m.data)
			found = true
			break
		}
	}
	if !found {
		c.posted = append(c.posted, r)
	}
	c.mu.Unlock()
	select {
	case <-r.done:
		return r.n, r.from, r.err
	case <-ctx.Done():
		c.mu.Lock()
		defer c.mu.Unlock()
		select {
		case <-r.done:
			return r.n, r.from, r.err
		default:
		}
		for i, p := range c.posted {
			if p == r {
				c.posted = append(c.posted[:i], c.posted[i+1:]...)
				break
			}
		}
		return 0, -1, ctx.Err()
	}
}

func (c *memConn) Abort(space uint64, peers []int, ab *wire.AbortError) {
	c.mu.Lock()
	c.abortLocked(space, ab)
	dead := c.dead
	c.mu.Unlock()
	if dead {
		return
	}
	for _, p := range peers {
		if p != c.rank && p >= 0 && p < len(c.net.conns) {
			c.net.conns[p].deliver(c.rank, wire.AbortTag(space), wire.EncodeAbort(ab))
		}
	}
}
