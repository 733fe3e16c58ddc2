package tcp

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/auth"
	"github.com/mooncake-go/mooncake/internal/futex"
	"github.com/mooncake-go/mooncake/internal/memview"
	"github.com/mooncake-go/mooncake/internal/rawsys"
)

// Pin keeps a registered buffer alive while the server reads or writes it.
type Pin interface{ Release() }

// Handler is what the server asks about local memory and control calls.
type Handler interface {
	// Acquire returns local memory [addr, addr+length) if it lies inside one registered
	// buffer that a connection which proved the tokens who (none: unauthenticated) may
	// reach, pinned until Release; otherwise an error (a *RemoteError gives the code sent).
	Acquire(addr, length uint64, who []*auth.Token) ([]byte, Pin, error)
	// Control answers OpDescriptor, OpNotify and OpPing on a connection that proved who.
	Control(op Op, payload []byte, who []*auth.Token) ([]byte, error)
}

// Signaler is an optional Handler method: Signaled runs after a signal word (a 4-byte write to
// a 4-aligned address) was stored and its futex waiters woken, so that waiters in this process
// can be told without a futex sleep of their own.
type Signaler interface {
	Signaled(addr uint64)
}

// Lander is an optional Handler method: Land may give a WRITE's payload another destination
// than its target (local memory [addr, addr+length), already acquired), so that bytes bound for
// a staging area go straight where the memory's owner would have copied them. It returns nil
// to leave the write to its target; otherwise dst has length bytes, the payload is read into it, and done reports
// whether all of it arrived (false: the connection failed, dst holds a part). interrupt, safe to
// call from any goroutine until done runs, makes a read that waits for the payload fail at once
// (the connection is then dropped): an owner that must stop writes into dst before the bytes
// come calls it.
type Lander interface {
	Land(addr, length uint64, interrupt func()) (dst []byte, done func(ok bool))
}

// landBytes: payloads shorter than this are never offered to a Lander.
const landBytes = 16 << 10

// Server serves frames on a listener.
type Server struct {
	ln net.Listener
	h  Handler

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup

	// SocketBuffer, when > 0, sets SO_RCVBUF/SO_SNDBUF on accepted connections.
	SocketBuffer int
	// Auth, when set, authenticates every connection before its first frame (auth.go).
	Auth *ServerAuth
}

// NewServer returns a server for ln; call Serve to start it.
func NewServer(ln net.Listener, h Handler) *Server {
	return &Server{ln: ln, h: h, conns: make(map[net.Conn]struct{})}
}

// Addr is the listening address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve accepts connections until Close. It returns nil after Close.
func (s *Server) Serve() error {
	var backoff time.Duration
	for {
		c, err := s.ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Temporary failure (e.g. EMFILE): back off and keep serving.
			if backoff == 0 {
				backoff = 5 * time.Millisecond
			} else if backoff < time.Second {
				backoff *= 2
			}
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// Close stops the listener, closes every connection and waits for their goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	err := s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *Server) serveConn(c net.Conn) {
	// A buffer unmapped behind the engine's back faults as a panic we recover from, rather
	// than killing the process.
	debug.SetPanicOnFault(true)
	defer func() {
		// A handler bug must not take the whole process down with it.
		recover()
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.wg.Done()
	}()
	tuneConn(c, s.SocketBuffer)
	// Reads and writes by raw system calls: a request does not wake the runtime's monitor
	// thread (package rawsys). Deadlines and Close go to the same socket.
	rc := rawsys.Wrap(c)
	br := bufio.NewReaderSize(rc, serverReadBuffer)
	var who []*auth.Token
	if s.Auth != nil {
		var ok bool
		if who, ok = s.Auth.admit(rc, br); !ok {
			return // refused: nothing was read or written past the handshake
		}
	}
	bw := bufio.NewWriterSize(rc, 64<<10)
	sg, _ := s.h.(Signaler)
	ld, _ := s.h.(Lander)
	interrupt := func() { c.SetReadDeadline(time.Now()) }
	var hb [reqHdrLen]byte
	var rb [respHdrLen]byte
	var h Header
	var ctrl []byte
	respond := func(status int32, seq uint32, payload []byte, n uint64) error {
		encodeResp(rb[:], &respHeader{Status: status, Seq: seq, Length: n})
		if _, err := bw.Write(rb[:]); err != nil {
			return err
		}
		if len(payload) > 0 {
			_, err := bw.Write(payload)
			return err
		}
		return nil
	}
	respondErr := func(seq uint32, err error) error {
		code := int32(StatusInvalidArgument)
		var re *RemoteError
		if errors.As(err, &re) {
			code = int32(re.Code)
		}
		msg := err.Error()
		if len(msg) > 4096 {
			msg = msg[:4096]
		}
		return respond(code, seq, []byte(msg), uint64(len(msg)))
	}
	for {
		if _, err := io.ReadFull(br, hb[:]); err != nil {
			return
		}
		if err := DecodeHeader(hb[:], &h); err != nil {
			return // malformed: drop this connection only
		}
		var err error
		switch h.Op {
		case OpWrite:
			view, pin, aerr := s.h.Acquire(h.Addr, h.Length, who)
			if aerr != nil {
				if _, err = io.CopyN(io.Discard, br, int64(h.Length)); err != nil {
					return
				}
				err = respondErr(h.Seq, aerr)
				break
			}
			if h.Length == 4 && h.Addr%4 == 0 {
				// A signal word: stored atomically, so a reader that loads it atomically sees
				// every byte written before it (Go memory model, and the race detector).
				var w [4]byte
				if _, err = io.ReadFull(br, w[:]); err == nil {
					atomic.StoreUint32(memview.Uint32(uintptr(h.Addr)), binary.NativeEndian.Uint32(w[:]))
					futex.Wake(memview.Uint32(uintptr(h.Addr)), math.MaxInt32)
					if sg != nil {
						sg.Signaled(h.Addr)
					}
				}
			} else if dst, landed := s.land(ld, &h, interrupt); dst != nil {
				err = readInto(br, rc, dst)
				landed(err == nil)
			} else {
				err = readInto(br, rc, view)
			}
			pin.Release()
			if err != nil {
				return
			}
			if h.Flags&FlagQuiet == 0 {
				err = respond(StatusOK, h.Seq, nil, 0)
			}
		case OpRead:
			view, pin, aerr := s.h.Acquire(h.Addr, h.Length, who)
			if aerr != nil {
				err = respondErr(h.Seq, aerr)
				break
			}
			err = respond(StatusOK, h.Seq, view, h.Length)
			pin.Release()
		default:
			if cap(ctrl) < int(h.Length) {
				ctrl = make([]byte, h.Length)
			}
			ctrl = ctrl[:h.Length]
			if _, err = io.ReadFull(br, ctrl); err != nil {
				return
			}
			out, cerr := s.h.Control(h.Op, ctrl, who)
			if cerr != nil {
				err = respondErr(h.Seq, cerr)
			} else {
				err = respond(StatusOK, h.Seq, out, uint64(len(out)))
			}
		}
		if err != nil {
			return
		}
		if br.Buffered() == 0 {
			if err := bw.Flush(); err != nil {
				return
			}
		}
	}
}

// land asks ld (nil: none) for another destination of a large WRITE's payload.
func (s *Server) land(ld Lander, h *Header, interrupt func()) ([]byte, func(bool)) {
	if ld == nil || h.Length < landBytes {
		return nil, nil
	}
	dst, done := ld.Land(h.Addr, h.Length, interrupt)
	if dst == nil {
		return nil, nil
	}
	if len(dst) != int(h.Length) { // a Lander bug: the payload goes to its target
		done(false)
		return nil, nil
	}
	return dst, done
}

func tuneConn(c net.Conn, buf int) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	tc.SetNoDelay(true)
	tc.SetKeepAlive(true)
	tc.SetKeepAlivePeriod(15 * time.Second)
	if buf > 0 {
		tc.SetReadBuffer(buf)
		tc.SetWriteBuffer(buf)
	}
}

// serverReadBuffer is the size of a served connection's read buffer. It holds frame headers and
// small payloads (a run of head and doorbell words); larger payloads are read straight into
// their target once it is drained (readInto), so every buffered byte of a large payload is a
// second copy: with 256 KiB, a 16 MiB all_reduce between two network namespaces spent 3.8 %
// of its CPU copying payload bytes out of this buffer (perf).
const serverReadBuffer = 16 << 10
