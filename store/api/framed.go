package api

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/internal/rawsys"
)

// The framed RPC: the master service's unary calls over plain framed TCP, on the gRPC port.
//
// A gRPC unary call costs several plain socket round trips (HTTP/2 headers, flow control, and
// several goroutine hand-offs on each side; figures in docs/performance.md), and a put is two
// calls. A client connection that opens with framedMagic instead of the HTTP/2 preface is
// served by a loop that reads a request, runs the very handler (and interceptor: metrics,
// leadership checks) that gRPC would run, and writes the reply, one call at a time per
// connection. Messages, status codes and handlers are the gRPC service's (ServiceDesc, the JSON
// codec, grpc/status codes), so the framed RPC changes the framing only; the master keeps
// serving gRPC on the same port to everything else. Clients use the framed RPC unless
// MC_STORE_RPC=grpc.
//
// Frames (integers little-endian):
//
//	request:  u32 n | u8 len(method) | method | JSON body           (n counts what follows it)
//	reply:    u32 n | u8 0 | JSON body                              (success)
//	          u32 n | u8 1 | u32 grpc code | message                (error)
//
// A request whose method name starts with attachMark uses the attachment layout instead
// (attach.go): its JSON, then its byte values raw; its success reply is kind 2 when it carries
// values.
//
// The magic's bytes keep the name this path had before ("lane") so that clients and masters
// of either version still understand each other.
const framedMagic = "MCLANE1\n"

// framedMaxFrame bounds a frame (the gRPC server's receive limit).
const framedMaxFrame = 64 << 20

// framedSniffTimeout bounds how long a new connection may take to send its first 8 bytes.
const framedSniffTimeout = 10 * time.Second

// ---- server ----

// FramedServer serves the framed RPC for a service registered the gRPC way.
type FramedServer struct {
	srv     any
	methods map[string]grpc.MethodDesc
	icpt    grpc.UnaryServerInterceptor

	// IdleTimeout, when > 0, closes a connection that sends no request for that long (set it
	// before serving). Clients drop such sockets from their pools before reusing them.
	IdleTimeout time.Duration

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// NewFramedServer serves desc's unary methods on srv through icpt (nil: none).
func NewFramedServer(desc *grpc.ServiceDesc, srv any, icpt grpc.UnaryServerInterceptor) *FramedServer {
	l := &FramedServer{srv: srv, methods: map[string]grpc.MethodDesc{}, icpt: icpt, conns: map[net.Conn]struct{}{}}
	for _, m := range desc.Methods {
		l.methods["/"+desc.ServiceName+"/"+m.MethodName] = m
	}
	return l
}

// Close closes every framed-RPC connection; later ones are refused.
func (l *FramedServer) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for c := range l.conns {
		c.Close()
	}
}

func (l *FramedServer) serveConn(c net.Conn, info ConnInfo) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		c.Close()
		return
	}
	l.conns[c] = struct{}{}
	l.mu.Unlock()
	ctx, cancel := context.WithCancel(peer.NewContext(context.Background(), &peer.Peer{Addr: c.RemoteAddr(), AuthInfo: info}))
	defer func() {
		cancel()
		c.Close()
		l.mu.Lock()
		delete(l.conns, c)
		l.mu.Unlock()
	}()
	rw := rawsys.Wrap(c) // requests do not wake the runtime's monitor thread (package rawsys)
	r := bufio.NewReaderSize(rw, 64<<10)
	w := bufio.NewWriterSize(rw, 64<<10)
	var codec jsonCodec
	// The request frame and the answer's JSON are read and written in buffers of this
	// connection, used again by its next call: requests decode into copies (strings, values),
	// and an answer is in the socket's buffer before the next request is read.
	var in, outBuf []byte
	for {
		if l.IdleTimeout > 0 {
			c.SetReadDeadline(time.Now().Add(l.IdleTimeout))
		}
		frame, err := readFrameInto(r, in)
		if err != nil {
			return // EOF, idle too long, or a malformed frame: drop the connection
		}
		if l.IdleTimeout > 0 {
			c.SetReadDeadline(time.Time{})
		}
		if cap(frame) <= keptFrameBuffer {
			in = frame
		}
		if len(frame) < 1 || len(frame) < 1+int(frame[0]) {
			return
		}
		name, body := string(frame[1:1+int(frame[0])]), frame[1+int(frame[0]):]
		var resp any
		var vals [][]byte // a marked call's attached values (attach.go)
		attached := strings.HasPrefix(name, attachMark)
		if attached {
			name = name[len(attachMark):]
		}
		m, ok := l.methods[name]
		if !ok {
			err = status.Errorf(codes.Unimplemented, "unknown method %q", name)
		} else if attached {
			if body, vals, err = splitAttached(body); err != nil {
				err = status.Error(codes.InvalidArgument, err.Error())
			}
			for i, v := range vals {
				vals[i] = bytes.Clone(v) // a value may outlive the frame (the value cache)
			}
		}
		if err == nil {
			resp, err = m.Handler(l.srv, ctx, func(v any) error {
				if err := codec.Unmarshal(body, v); err != nil {
					return status.Error(codes.InvalidArgument, err.Error())
				}
				if err := attachValues(v, vals); err != nil {
					return status.Error(codes.InvalidArgument, err.Error())
				}
				return nil
			}, l.icpt)
		}
		var out []byte
		var outVals [][]byte
		if err == nil {
			if attached {
				resp, outVals = detachValues(resp)
			}
			out, err = codec.marshalAppend(outBuf[:0], resp)
		}
		if err == nil && outVals != nil {
			err = writeFrame(w, append([][]byte{{replyAttached}}, attachedParts(out, outVals)...)...)
		} else if err == nil {
			err = writeFrame(w, []byte{0}, out)
		} else {
			st := status.Convert(err)
			err = writeFrame(w, binary.LittleEndian.AppendUint32([]byte{1}, uint32(st.Code())), []byte(st.Message()))
		}
		if err != nil {
			return
		}
		if cap(out) <= keptFrameBuffer {
			outBuf = out
		}
	}
}

// keptFrameBuffer: a connection keeps buffers up to this size for its next call.
const keptFrameBuffer = 1 << 20

func readFrame(r *bufio.Reader) ([]byte, error) { return readFrameInto(r, nil) }

// readFrameInto reads a frame into buf when it is large enough (else into a new slice).
func readFrameInto(r *bufio.Reader, buf []byte) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(hdr[:])
	if n > framedMaxFrame {
		return nil, fmt.Errorf("frame of %d bytes exceeds the %d-byte limit", n, framedMaxFrame)
	}
	if uint32(cap(buf)) >= n {
		buf = buf[:n]
	} else {
		buf = make([]byte, n)
	}
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

func writeFrame(w *bufio.Writer, parts ...[]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	w.Write(binary.LittleEndian.AppendUint32(nil, uint32(n)))
	for _, p := range parts {
		w.Write(p)
	}
	return w.Flush()
}

// FramedListener splits a listener: connections opening with the framed-RPC magic are served by srv,
// the rest are returned by Accept (for grpc.Server.Serve).
type FramedListener struct {
	net.Listener
	srv   *FramedServer
	sec   ServerSecurity
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	mu    sync.Mutex
	err   error // why the accept loop ended (under mu)
}

// NewFramedListener starts accepting on lis (plain TCP, no token).
func NewFramedListener(lis net.Listener, srv *FramedServer) *FramedListener {
	return NewSecureListener(lis, srv, ServerSecurity{})
}

// NewSecureListener starts accepting on lis; every connection is first secured as sec says
// (TLS, token: see secure.go). The gRPC server that Accepts from it needs ServerCreds.
func NewSecureListener(lis net.Listener, srv *FramedServer, sec ServerSecurity) *FramedListener {
	l := &FramedListener{Listener: lis, srv: srv, sec: sec, conns: make(chan net.Conn), done: make(chan struct{})}
	go l.acceptLoop()
	return l
}

func (l *FramedListener) acceptLoop() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			l.once.Do(func() { close(l.done) })
			return
		}
		go l.sniff(c)
	}
}

func (l *FramedListener) sniff(c net.Conn) {
	remote := c.RemoteAddr()
	sc, head, info, err := l.sec.setupServer(c)
	if err != nil {
		c.Close()
		if l.sec.Refused != nil && !errors.Is(err, io.EOF) {
			l.sec.Refused(remote, err)
		}
		return
	}
	c = sc
	if string(head) == framedMagic {
		if !info.Authenticated {
			// A framed client without the token: tell it why, then hang up.
			w := bufio.NewWriter(c)
			c.SetWriteDeadline(time.Now().Add(setupTimeout))
			writeFrame(w, binary.LittleEndian.AppendUint32([]byte{1}, uint32(codes.Unauthenticated)), []byte(NeedTokenMessage))
			c.Close()
			if l.sec.Refused != nil {
				l.sec.Refused(remote, errors.New("framed-RPC client without a token"))
			}
			return
		}
		l.srv.serveConn(c, info)
		return
	}
	if !info.Authenticated && l.sec.Refused != nil {
		l.sec.Refused(remote, errors.New("gRPC client without a token: its calls are refused"))
	}
	// Not the framed RPC: hand it to gRPC with the bytes read so far put back in front.
	pc := &prefixConn{Conn: c, r: io.MultiReader(bytes.NewReader(head), c), info: info}
	select {
	case l.conns <- pc:
	case <-l.done:
		c.Close()
	}
}

// Accept returns the next connection that is not a framed-RPC connection.
func (l *FramedListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.err != nil {
			return nil, l.err
		}
		return nil, net.ErrClosed
	}
}

// Close stops accepting (framed-RPC connections already open are closed by FramedServer.Close).
func (l *FramedListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type prefixConn struct {
	net.Conn
	r    io.Reader
	info ConnInfo // what the listener established (see serverCreds)
}

func (p *prefixConn) Read(b []byte) (int, error) { return p.r.Read(b) }

// ---- client ----

// FramedConn is a client connection to a master over the framed RPC: a grpc.ClientConnInterface whose
// Invoke sends one framed request on an idle socket (dialled on demand) and waits for its reply.
// Failures read like gRPC's: codes.Unavailable when the master cannot be reached or the
// connection broke, codes.DeadlineExceeded when ctx ended first.
type FramedConn struct {
	addr string
	sec  ClientSecurity
	idle chan *framedSock
	// plain: the master answered a call in the attachment layout "unknown method" (it predates
	// attach.go), so calls go in the plain layout.
	plain atomic.Bool

	mu     sync.Mutex
	closed bool
}

type framedSock struct {
	c    net.Conn
	raw  net.Conn // the TCP connection under c (c itself without TLS): awaitReply polls it
	r    *bufio.Reader
	w    *bufio.Writer
	idle time.Time // when it went back to the pool
}

// staleAfter is how long a pooled socket sits idle before get checks that the master has not
// closed it: --rpc_conn_timeout_seconds counts whole seconds from the master's last reply, so a
// socket reused sooner cannot have timed out, and the busy path pays no system call.
const staleAfter = 500 * time.Millisecond

// DialFramed returns a lazy framed-RPC connection to addr ("host:port").
func DialFramed(addr string) (*FramedConn, error) { return DialFramedSecure(addr, ClientSecurity{}) }

// DialFramedSecure is DialFramed with every socket secured as sec says (TLS, token) before
// its first call: a socket dialled later (more concurrency, a reconnection) goes through the
// same set-up.
func DialFramedSecure(addr string, sec ClientSecurity) (*FramedConn, error) {
	if addr == "" {
		return nil, Errorf(INVALID_PARAMS, "master address is empty")
	}
	return &FramedConn{addr: addr, sec: sec, idle: make(chan *framedSock, 16)}, nil
}

// Invoke implements grpc.ClientConnInterface.
func (l *FramedConn) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	if len(attachMark)+len(method) > 255 {
		return status.Errorf(codes.Internal, "method name %q too long", method)
	}
	marked := !l.plain.Load()
	sent, vals := args, [][]byte(nil)
	if marked {
		sent, vals = detachValues(args)
	}
	var codec jsonCodec
	body, err := codec.Marshal(sent)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	s, err := l.get(ctx)
	if err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok {
		s.c.SetDeadline(d)
	} else {
		s.c.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { s.c.SetDeadline(time.Unix(1, 0)) })
	var frame []byte
	if marked {
		frame, err = s.call(ctx, attachMark+method, attachedParts(body, vals)...)
	} else {
		frame, err = s.call(ctx, method, body)
	}
	stop()
	if err != nil {
		s.c.Close()
		// The socket's deadline comes only from ctx (its deadline, or AfterFunc on cancel), and
		// it can fire a moment before ctx itself reports the end.
		if ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) {
			return status.Errorf(codes.DeadlineExceeded, "master %s: %v", l.addr, err)
		}
		return status.Errorf(codes.Unavailable, "master %s: %v", l.addr, err)
	}
	if len(frame) >= 5 && frame[0] == 1 && codes.Code(binary.LittleEndian.Uint32(frame[1:5])) == codes.Unauthenticated {
		s.c.Close() // the master hangs up after refusing a connection without the token
	} else {
		l.put(s)
	}
	if len(frame) == 0 {
		return status.Errorf(codes.Internal, "master %s sent an empty reply", l.addr)
	}
	switch frame[0] {
	case 0:
		if err := codec.Unmarshal(frame[1:], reply); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		return nil
	case replyAttached:
		body, vals, err := splitAttached(frame[1:])
		if err == nil {
			err = codec.Unmarshal(body, reply)
		}
		if err == nil {
			err = attachValues(reply, vals)
		}
		if err != nil {
			return status.Errorf(codes.Internal, "master %s: %v", l.addr, err)
		}
		return nil
	case 1:
		if len(frame) < 5 {
			return status.Errorf(codes.Internal, "master %s sent a short error reply", l.addr)
		}
		code, msg := codes.Code(binary.LittleEndian.Uint32(frame[1:5])), string(frame[5:])
		if marked && code == codes.Unimplemented && strings.Contains(msg, attachMark+method) {
			// A master older than attachments: the plain layout from now on (attach.go).
			l.plain.Store(true)
			return l.Invoke(ctx, method, args, reply)
		}
		return status.Error(code, msg)
	}
	return status.Errorf(codes.Internal, "master %s sent a reply of unknown kind %d", l.addr, frame[0])
}

type onSentKey struct{}

// OnSent returns ctx carrying f: a framed-RPC call made with it runs f on the calling thread
// once its request is sent and before it waits for the reply, so that the caller's own work
// overlaps the master's. f may run more than once (a call retried) or not at all (a request
// that could not be sent, or a gRPC connection): callers make it idempotent and run it again
// after the call.
func OnSent(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, onSentKey{}, f)
}

// call sends one request (the method name, then parts), runs ctx's OnSent function, and reads
// its reply frame.
func (s *framedSock) call(ctx context.Context, method string, parts ...[]byte) ([]byte, error) {
	if err := writeFrame(s.w, append([][]byte{{byte(len(method))}, []byte(method)}, parts...)...); err != nil {
		return nil, err
	}
	if f, ok := ctx.Value(onSentKey{}).(func()); ok {
		f()
	}
	s.awaitReply(ctx)
	return readFrame(s.r)
}

// hungUp reports whether the peer closed this idle socket (or sent something unasked, which a
// master never does): poll(2) without waiting. A socket it cannot poll counts as open.
func (s *framedSock) hungUp() bool {
	if s.r.Buffered() > 0 {
		return true
	}
	sc, ok := s.raw.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		gone = err == nil && n > 0
	})
	return gone
}

// awaitReply sleeps in poll(2) until the reply is readable (or ctx ends), rather than parking
// the goroutine on Go's network poller: the kernel then wakes this thread directly, which saves
// a scheduler hand-off per call (the caller is often a foreign thread, e.g. Python's, that Go
// must switch back to). Polls are bounded so that a cancelled ctx is noticed; the read that
// follows goes through the normal, deadline-aware path either way.
func (s *framedSock) awaitReply(ctx context.Context) {
	if s.r.Buffered() > 0 {
		return
	}
	if _, ok := s.c.(*rawsys.Detached); ok {
		return // its Read waits in poll(2) on this thread itself
	}
	sc, ok := s.raw.(syscall.Conn)
	if !ok {
		return
	}
	if tc, ok := s.c.(*tls.Conn); ok && tc.ConnectionState().HandshakeComplete {
		// TLS may hold decrypted bytes the socket no longer shows: use the plain read path.
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	for ctx.Err() == nil {
		wait := 50 * time.Millisecond
		if d, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(d))
		}
		if wait <= 0 {
			return
		}
		ready := false
		rc.Control(func(fd uintptr) {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(fds, int(wait.Milliseconds())+1)
			ready = n > 0 || (err != nil && err != unix.EINTR)
		})
		if ready {
			return
		}
	}
}

func (l *FramedConn) get(ctx context.Context) (*framedSock, error) {
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return nil, status.Error(codes.Canceled, "master connection closed")
	}
	for {
		select {
		case s := <-l.idle:
			if time.Since(s.idle) >= staleAfter && s.hungUp() {
				s.c.Close() // the master closed it while it sat in the pool (--rpc_conn_timeout_seconds)
				continue
			}
			return s, nil
		default:
		}
		break
	}
	rc, err := rawsys.DialDetached(ctx, l.addr) // out of the runtime's poller (rawsys.Detached)
	if err != nil {
		if ctx.Err() != nil {
			return nil, status.Errorf(codes.DeadlineExceeded, "connect to master %s: %v", l.addr, err)
		}
		return nil, status.Errorf(codes.Unavailable, "connect to master %s: %v", l.addr, err)
	}
	var c, raw net.Conn = rc, rc
	if c, err = l.sec.setupClient(ctx, c, l.addr); err != nil {
		if ctx.Err() != nil {
			return nil, status.Errorf(codes.DeadlineExceeded, "connect to master %s: %v", l.addr, err)
		}
		if errors.Is(err, errSetupRefused) {
			return nil, status.Error(codes.Unauthenticated, err.Error())
		}
		return nil, status.Errorf(codes.Unavailable, "connect to master %s: %v", l.addr, err)
	}
	if _, err := c.Write([]byte(framedMagic)); err != nil {
		c.Close()
		return nil, status.Errorf(codes.Unavailable, "connect to master %s: %v", l.addr, err)
	}
	return &framedSock{c: c, raw: raw, r: bufio.NewReaderSize(c, 64<<10), w: bufio.NewWriterSize(c, 64<<10)}, nil
}

func (l *FramedConn) put(s *framedSock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		s.idle = time.Now()
		select {
		case l.idle <- s:
			return
		default:
		}
	}
	s.c.Close()
}

// NewStream implements grpc.ClientConnInterface: the master service has no streams.
func (l *FramedConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, errors.New("the master service has no streaming methods")
}

// Close closes the idle sockets; calls in flight finish on theirs, which are then closed.
func (l *FramedConn) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for {
		select {
		case s := <-l.idle:
			s.c.Close()
		default:
			return nil
		}
	}
}
