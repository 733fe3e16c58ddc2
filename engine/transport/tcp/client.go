package tcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/auth"
	"github.com/mooncake-go/mooncake/engine/transport"
	"github.com/mooncake-go/mooncake/internal/memview"
	"github.com/mooncake-go/mooncake/internal/rawsys"
)

// DefaultChunkSize is the largest frame a client sends for one piece of a request.
const DefaultChunkSize = 8 << 20

// ErrClosed is returned after Client.Close.
var ErrClosed = errors.New("tcp transport is closed")

// Client is the initiator side: a pool of connections per peer address. It implements
// transport.Transport.
type Client struct {
	// ChunkSize is the largest READ/WRITE frame; 0 means DefaultChunkSize.
	ChunkSize uint64
	// SocketBuffer, when > 0, sets SO_RCVBUF/SO_SNDBUF on new connections.
	SocketBuffer int
	// DialTimeout bounds connection set-up (default 5 s, never past the ctx deadline).
	DialTimeout time.Duration
	// MaxIdle is the number of idle connections kept per peer (default 16).
	MaxIdle int
	// Tokens, when set, returns the tokens to prove to addr on a new connection, each with a
	// handshake of its own (auth.go); none: the connection is not authenticated.
	Tokens func(addr string) []*auth.Token
	// Self names this side in the handshake (the engine's segment name).
	Self string
	// AuthTimeout bounds a handshake (default DefaultAuthTimeout, never past the ctx deadline).
	AuthTimeout time.Duration

	mu     sync.Mutex
	idle   map[string][]*conn // by poolKey: address and the token its connections prove
	active map[*conn]struct{}
	closed bool
}

type conn struct {
	c      net.Conn
	rw     net.Conn // c with raw reads and writes (package rawsys; c itself when detached): the frames go through it
	br     *bufio.Reader
	fw     frameWriter
	addr   string
	key    string // poolKey
	seq    uint32
	hb     [reqHdrLen]byte
	rb     [respHdrLen]byte
	used   bool // served at least one run before
	authed bool // the handshake proved a token on it
}

// NewClient returns an empty client.
func NewClient() *Client {
	return &Client{idle: make(map[string][]*conn), active: make(map[*conn]struct{})}
}

// Name implements transport.Transport.
func (c *Client) Name() string { return "tcp" }

// Close closes every connection, idle or in use.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, l := range c.idle {
		for _, cn := range l {
			cn.c.Close()
		}
	}
	c.idle = map[string][]*conn{}
	for cn := range c.active {
		cn.c.Close()
	}
	return nil
}

// Forget closes the idle connections to addr (after the peer failed).
func (c *Client) Forget(addr string) {
	c.mu.Lock()
	var l []*conn
	for k, conns := range c.idle {
		if len(conns) > 0 && conns[0].addr == addr {
			l = append(l, conns...)
			delete(c.idle, k)
		}
	}
	c.mu.Unlock()
	for _, cn := range l {
		cn.c.Close()
	}
}

// poolKey is the idle-pool key of connections to addr that prove toks: a connection is reused
// only for the same peer and the same tokens (a group's connections reach its buffers, others
// do not; a group added later needs connections that prove its token too).
func poolKey(addr string, toks []*auth.Token) string {
	k := addr
	for _, t := range toks {
		k += "\x00" + t.Fingerprint()
	}
	return k
}

// get returns a connection to addr: an idle one unless fresh, else a new one. A new one for a
// run is detached from the runtime's poller (its caller waits in poll(2)); one for a Stream
// (stream) stays with it.
func (c *Client) get(ctx context.Context, addr string, fresh, stream bool) (*conn, error) {
	var toks []*auth.Token
	if c.Tokens != nil {
		toks = c.Tokens(addr)
	}
	key := poolKey(addr, toks)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if l := c.idle[key]; len(l) > 0 && !fresh {
		cn := l[len(l)-1]
		c.idle[key] = l[:len(l)-1]
		c.active[cn] = struct{}{}
		c.mu.Unlock()
		return cn, nil
	}
	// Idle connections to addr that prove another set of tokens are of no further use: the
	// tokens for addr changed (a group came or went).
	var stale []*conn
	for k, l := range c.idle {
		if k != key && len(l) > 0 && l[0].addr == addr {
			stale = append(stale, l...)
			delete(c.idle, k)
		}
	}
	c.mu.Unlock()
	for _, cn := range stale {
		cn.c.Close()
	}
	to := c.DialTimeout
	if to <= 0 {
		to = 5 * time.Second
	}
	d := net.Dialer{Timeout: to}
	dial := func() (net.Conn, error) {
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("cannot connect to %s: %w", addr, err)
		}
		tuneConn(nc, c.SocketBuffer)
		return nc, nil
	}
	nc, err := dial()
	if err != nil {
		return nil, err
	}
	authed := false
	if len(toks) > 0 {
		if nc, err = c.handshake(ctx, nc, addr, toks, dial); err != nil {
			return nil, err
		}
		authed = true
	}
	cn := &conn{c: nc, rw: rawsys.Wrap(nc), addr: addr, key: key, authed: authed}
	if !stream {
		// Out of the runtime's poller: the caller reads the answers of its runs itself
		// (rawsys.Detached). A Stream's answers are read by a goroutine of its own.
		d, err := rawsys.Detach(nc)
		if err != nil {
			return nil, fmt.Errorf("cannot use the connection to %s: %w", addr, err)
		}
		cn.c, cn.rw = d, d
	}
	cn.br = bufio.NewReaderSize(cn.rw, 64<<10)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		nc.Close()
		return nil, ErrClosed
	}
	c.active[cn] = struct{}{}
	c.mu.Unlock()
	return cn, nil
}

func (c *Client) put(cn *conn, ok bool) {
	c.mu.Lock()
	delete(c.active, cn)
	max := c.MaxIdle
	if max <= 0 {
		max = 16
	}
	if ok && !c.closed && len(c.idle[cn.key]) < max {
		cn.used = true
		cn.c.SetDeadline(time.Time{})
		c.idle[cn.key] = append(c.idle[cn.key], cn)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	cn.c.Close()
}

func (c *Client) chunk() uint64 {
	if c.ChunkSize == 0 {
		return DefaultChunkSize
	}
	return c.ChunkSize
}

// Execute implements transport.Transport: it pipelines reqs, in order, over one connection.
func (c *Client) Execute(ctx context.Context, t *transport.Target, reqs []transport.Request, r transport.Reporter) {
	next := 0 // first request not yet reported
	for attempt := 0; ; attempt++ {
		cn, err := c.get(ctx, t.Addr, attempt > 0, false)
		if err != nil {
			err = wrapIOErr(ctx, err)
			for i := next; i < len(reqs); i++ {
				r.Done(i, err)
			}
			return
		}
		if dl, ok := ctx.Deadline(); ok {
			cn.c.SetDeadline(dl)
		}
		done, answered, err := c.run(cn, reqs[next:], next, r)
		next += done
		if err == nil {
			c.put(cn, true)
			return
		}
		c.put(cn, false)
		// A pooled connection whose peer went away fails before any answer: retry once on
		// a fresh connection (READ/WRITE are idempotent).
		if cn.used && !answered && attempt == 0 && ctx.Err() == nil {
			continue
		}
		err = wrapIOErr(ctx, hint(!cn.used, answered, cn.authed, err))
		for i := next; i < len(reqs); i++ {
			r.Done(i, err)
		}
		return
	}
}

func wrapIOErr(ctx context.Context, err error) error {
	var ne net.Error
	if ctx.Err() != nil || (errors.As(err, &ne) && ne.Timeout()) || errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("tcp transfer timed out: %w (%v)", context.DeadlineExceeded, err)
	}
	return fmt.Errorf("tcp transfer failed: %w", err)
}

// A run is written by the caller before it reads the answers when that write cannot block on
// a server that stops reading while its answers fill the caller's socket buffers: either the
// answers are small (no READs; with quiet WRITEs most frames get none) and at most
// inlineFrames, or what the caller writes fits an empty socket send buffer whatever the server
// does (at most inlineSendBytes, half the kernel's smallest send buffer; a run starts with it empty,
// the server having read every earlier frame before answering the last). A small get is one
// such READ header. Other runs write on a goroutine while the caller reads answers.
const (
	inlineFrames    = 64
	inlineSendBytes = 2048
)

// run sends reqs and reads their answers. It returns how many requests were reported, whether
// any answer arrived, and the connection-level error that stopped it (nil: all reported).
func (c *Client) run(cn *conn, reqs []transport.Request, base int, r transport.Reporter) (int, bool, error) {
	chunk := c.chunk()
	reads := false
	last := -1 // index of the last request that makes a frame
	frames := uint32(0)
	sendBytes := uint64(0) // headers and WRITE payloads
	for i := range reqs {
		if reqs[i].Length > 0 {
			last = i
			reads = reads || !reqs[i].Write
			f := (reqs[i].Length + chunk - 1) / chunk
			frames += uint32(f)
			sendBytes += f * reqHdrLen
			if reqs[i].Write {
				sendBytes += reqs[i].Length
			}
		}
	}
	startSeq := cn.seq
	var werr error
	var wg sync.WaitGroup
	if frames <= inlineFrames && (!reads || sendBytes <= inlineSendBytes) {
		werr = c.send(cn, reqs, chunk, last)
		if werr != nil {
			return 0, false, werr
		}
	} else {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.send(cn, reqs, chunk, last); err != nil {
				werr = err
				cn.c.Close() // unblock the reader
			}
		}()
	}
	done, answered, rerr := c.receive(cn, reqs, base, chunk, startSeq, startSeq+frames, r)
	if rerr != nil {
		cn.c.Close() // unblock a writer stuck on a peer that stopped reading
	}
	wg.Wait()
	if rerr == nil && werr != nil {
		rerr = werr
	}
	if rerr != nil && werr != nil && !answered {
		rerr = werr
	}
	return done, answered, rerr
}

// send writes the frames of reqs. Every WRITE frame but the run's last frame is quiet: the
// server answers it only if it fails, and the answer to a later frame confirms it (frames on
// one connection are applied in order). last is the index of the run's last request that
// makes a frame; -1 makes every WRITE quiet (streams).
func (c *Client) send(cn *conn, reqs []transport.Request, chunk uint64, last int) error {
	seq := cn.seq
	for i := range reqs {
		q := &reqs[i]
		if q.Length == 0 {
			continue
		}
		op := OpRead
		if q.Write {
			op = OpWrite
		}
		for off := uint64(0); off < q.Length; off += chunk {
			n := min(chunk, q.Length-off)
			seq++
			var flags uint16
			if q.Write && (i != last || off+n < q.Length) {
				flags = FlagQuiet
			}
			EncodeHeader(cn.hb[:], &Header{Op: op, Flags: flags, Seq: seq, Addr: q.Remote + off, Length: n})
			cn.fw.add(cn.hb[:])
			if q.Write {
				cn.fw.addRef(memview.Bytes(q.Local+uintptr(off), int(n)))
			}
			if cn.fw.full() {
				if err := cn.fw.flush(cn.rw); err != nil {
					return err
				}
			}
		}
	}
	cn.seq = seq
	return cn.fw.flush(cn.rw)
}

// receive reads the answers of a run sent by send. An answer to frame s also confirms every
// quiet frame before s that got no answer of its own.
func (c *Client) receive(cn *conn, reqs []transport.Request, base int, chunk uint64, seq, endSeq uint32, r transport.Reporter) (int, bool, error) {
	var rh respHeader
	answered := false
	have := false // rh holds an answer not yet matched to its frame
	for i := range reqs {
		q := &reqs[i]
		if q.Length == 0 {
			r.Done(base+i, nil)
			continue
		}
		var reqErr error
		for off := uint64(0); off < q.Length; off += chunk {
			n := min(chunk, q.Length-off)
			seq++
			if !have {
				if _, err := io.ReadFull(cn.br, cn.rb[:]); err != nil {
					return i, answered, err
				}
				answered = true
				if err := decodeResp(cn.rb[:], &rh); err != nil {
					return i, answered, err
				}
				if int32(rh.Seq-seq) < 0 || int32(endSeq-rh.Seq) < 0 {
					return i, answered, fmt.Errorf("%w: answer %d out of order (want %d or later)", ErrMalformedFrame, rh.Seq, seq)
				}
				have = true
			}
			if rh.Seq != seq {
				// A quiet frame the server applied without a word.
				if !q.Write {
					return i, answered, fmt.Errorf("%w: answer %d skips READ %d", ErrMalformedFrame, rh.Seq, seq)
				}
				if reqErr == nil {
					r.Progress(base+i, n)
				}
				continue
			}
			have = false
			if rh.Status != StatusOK {
				if rh.Length > MaxControlFrame {
					return i, answered, fmt.Errorf("%w: error message too long", ErrMalformedFrame)
				}
				msg := make([]byte, rh.Length)
				if _, err := io.ReadFull(cn.br, msg); err != nil {
					return i, answered, err
				}
				if reqErr == nil {
					reqErr = &RemoteError{Code: int(rh.Status), Msg: string(msg)}
				}
				continue
			}
			if !q.Write {
				if rh.Length != n {
					return i, answered, fmt.Errorf("%w: READ answer of %d bytes, want %d", ErrMalformedFrame, rh.Length, n)
				}
				if err := readInto(cn.br, cn.rw, memview.Bytes(q.Local+uintptr(off), int(n))); err != nil {
					return i, answered, err
				}
			} else if rh.Length != 0 {
				return i, answered, fmt.Errorf("%w: unexpected WRITE answer payload", ErrMalformedFrame)
			}
			if reqErr == nil {
				r.Progress(base+i, n)
			}
		}
		r.Done(base+i, reqErr)
	}
	if have {
		return len(reqs), answered, fmt.Errorf("%w: answer %d to no frame of the run", ErrMalformedFrame, rh.Seq)
	}
	return len(reqs), answered, nil
}

// Call sends one control request to addr and returns the answer's payload.
func (c *Client) Call(ctx context.Context, addr string, op Op, payload []byte) ([]byte, error) {
	if op == OpRead || op == OpWrite {
		return nil, fmt.Errorf("tcp: Call is for control ops, not op %d", op)
	}
	for attempt := 0; ; attempt++ {
		cn, err := c.get(ctx, addr, attempt > 0, false)
		if err != nil {
			return nil, wrapIOErr(ctx, err)
		}
		dl, ok := ctx.Deadline()
		if !ok {
			dl = time.Now().Add(10 * time.Second)
		}
		cn.c.SetDeadline(dl)
		out, answered, err := c.call(cn, op, payload)
		var re *RemoteError
		if err == nil || errors.As(err, &re) {
			c.put(cn, true)
			return out, err
		}
		c.put(cn, false)
		if cn.used && !answered && attempt == 0 && ctx.Err() == nil {
			continue
		}
		return nil, wrapIOErr(ctx, hint(!cn.used, answered, cn.authed, err))
	}
}

func (c *Client) call(cn *conn, op Op, payload []byte) ([]byte, bool, error) {
	cn.seq++
	EncodeHeader(cn.hb[:], &Header{Op: op, Seq: cn.seq, Length: uint64(len(payload))})
	cn.fw.add(cn.hb[:])
	cn.fw.add(payload)
	if err := cn.fw.flush(cn.rw); err != nil {
		return nil, false, err
	}
	var rh respHeader
	if _, err := io.ReadFull(cn.br, cn.rb[:]); err != nil {
		return nil, false, err
	}
	if err := decodeResp(cn.rb[:], &rh); err != nil {
		return nil, true, err
	}
	if rh.Seq != cn.seq || rh.Length > MaxControlFrame {
		return nil, true, fmt.Errorf("%w: bad control answer", ErrMalformedFrame)
	}
	out := make([]byte, rh.Length)
	if _, err := io.ReadFull(cn.br, out); err != nil {
		return nil, true, err
	}
	if rh.Status != StatusOK {
		return nil, true, &RemoteError{Code: int(rh.Status), Msg: string(out)}
	}
	return out, true, nil
}
