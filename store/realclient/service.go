package realclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/auth"
)

// ServiceName is what the hello line's "service" says.
const ServiceName = "mooncake real client"

// MaxLine bounds each JSON line on the wire.
const MaxLine = 64 << 10

// setupTimeout bounds the hello, the authentication and the request/reply exchange.
const setupTimeout = 10 * time.Second

// Info is what a real client tells a dummy: how to join the store it serves.
type Info struct {
	MasterServerAddress string `json:"master_server_address"` // host:port, or etcd://... / redis://... (HA)
	ClusterID           string `json:"cluster_id,omitempty"`  // the HA cluster it follows
	MetadataServer      string `json:"metadata_server"`
	Protocol            string `json:"protocol"`
	Host                string `json:"host"`                // the address peers reach this host at
	Segment             string `json:"segment"`             // the real client's own segment (host:port)
	TenantID            string `json:"tenant_id,omitempty"` // the key namespace its dummies use (--tenant_id)
}

// Request is what a dummy sends: the sizes it was set up with (for the real client's log).
type Request struct {
	MemPoolSize     uint64 `json:"mem_pool_size"`
	LocalBufferSize uint64 `json:"local_buffer_size"`
	PID             int    `json:"pid"`
}

type hello struct {
	Service string `json:"service"`
	Auth    bool   `json:"auth"`
}

type reply struct {
	Info  *Info  `json:"info,omitempty"`
	Error string `json:"error,omitempty"`
}

// Server is a real client's attach service.
type Server struct {
	info  Info
	token *auth.Token
	logf  func(string, ...any)

	mu       sync.Mutex
	conns    map[net.Conn]struct{} // every connection being served, attached or in its setup
	attached map[net.Conn]Request
	closed   bool // Serve returned or is returning: no connection is served any more
	wg       sync.WaitGroup
}

// NewServer returns a service that hands info to dummies; token (nil: none) is what they must
// prove; logf (nil: silent) hears attaches, detaches and refusals.
func NewServer(info Info, token *auth.Token, logf func(string, ...any)) *Server {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return &Server{info: info, token: token, logf: logf, conns: map[net.Conn]struct{}{}, attached: map[net.Conn]Request{}}
}

// Attached is the number of dummy clients attached now.
func (s *Server) Attached() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.attached)
}

// Serve accepts on l until ctx ends or l fails, then closes l and every attached connection and
// waits for them.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	defer func() {
		// Every connection, also one still in its setup: closing only the attached ones
		// missed a dummy whose setup had just ended, and Serve then waited for it forever.
		s.mu.Lock()
		s.closed = true
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("real client service: accept: %w", err)
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(ctx, c)
		}()
	}
}

func (s *Server) handle(ctx context.Context, c net.Conn) {
	defer c.Close()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	remote := c.RemoteAddr().String()
	req, err := s.setup(ctx, c)
	if err != nil {
		s.logf("real client service: refused %s: %v", remote, err)
		return
	}
	s.mu.Lock()
	s.attached[c] = req
	n := len(s.attached)
	s.mu.Unlock()
	s.logf("real client service: dummy client pid %d from %s attached (mem_pool_size=%d, local_buffer_size=%d; %d attached)",
		req.PID, remote, req.MemPoolSize, req.LocalBufferSize, n)
	// The dummy sends nothing more: EOF (or any byte) means it is gone.
	io.Copy(io.Discard, io.LimitReader(c, 1))
	s.mu.Lock()
	delete(s.attached, c)
	n = len(s.attached)
	s.mu.Unlock()
	s.logf("real client service: dummy client pid %d from %s detached (%d attached)", req.PID, remote, n)
}

func (s *Server) setup(ctx context.Context, c net.Conn) (Request, error) {
	var req Request
	c.SetDeadline(time.Now().Add(setupTimeout))
	if err := writeLine(c, hello{Service: ServiceName, Auth: s.token != nil}); err != nil {
		return req, err
	}
	if s.token != nil {
		hctx, cancel := context.WithTimeout(ctx, setupTimeout)
		_, err := auth.Server(hctx, c, []*auth.Token{s.token}, "mooncake_client")
		cancel()
		if err != nil {
			return req, err
		}
		c.SetDeadline(time.Now().Add(setupTimeout))
	}
	r := bufio.NewReaderSize(c, 4096)
	if err := readLine(r, &req); err != nil {
		return req, fmt.Errorf("bad request: %w", err)
	}
	info := s.info
	if err := writeLine(c, reply{Info: &info}); err != nil {
		return req, err
	}
	c.SetDeadline(time.Time{})
	return req, nil
}

// Conn is a dummy's attachment to its real client; Close detaches.
type Conn struct {
	c    net.Conn
	done chan struct{}
}

// Close detaches from the real client.
func (a *Conn) Close() error {
	err := a.c.Close()
	<-a.done
	return err
}

// Attach connects to the real client at addr, proves token when it asks (nil: none to
// prove), and returns what it says. gone (nil: not told) is called once if the real client goes
// away while attached.
func Attach(ctx context.Context, addr string, token *auth.Token, req Request, gone func(error)) (Info, *Conn, error) {
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	c, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return Info{}, nil, fmt.Errorf("no real client at %s (start mooncake_client --port=<that port> there): %w", addr, err)
	}
	info, err := attach(dctx, c, addr, token, req)
	if err != nil {
		c.Close()
		return Info{}, nil, err
	}
	a := &Conn{c: c, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		_, err := io.Copy(io.Discard, c)
		if gone != nil && !errors.Is(err, net.ErrClosed) {
			if err == nil {
				err = io.EOF
			}
			gone(err)
		}
	}()
	return info, a, nil
}

func attach(ctx context.Context, c net.Conn, addr string, token *auth.Token, req Request) (Info, error) {
	if d, ok := ctx.Deadline(); ok {
		c.SetDeadline(d)
	}
	r := bufio.NewReaderSize(c, 4096)
	var h hello
	if err := readLine(r, &h); err != nil {
		return Info{}, fmt.Errorf("%s is not a mooncake real client (mooncake_client --port): %w", addr, err)
	}
	if h.Service != ServiceName {
		return Info{}, fmt.Errorf("%s is not a mooncake real client: it says it is %q", addr, h.Service)
	}
	if h.Auth {
		if token == nil {
			return Info{}, fmt.Errorf("real client %s requires authentication: set MC_AUTH_TOKEN (or MC_AUTH_TOKEN_FILE) to its token", addr)
		}
		if r.Buffered() > 0 {
			return Info{}, fmt.Errorf("real client %s sent bytes before authenticating", addr)
		}
		if _, err := auth.Client(ctx, c, token, "dummy client"); err != nil {
			return Info{}, fmt.Errorf("real client %s refused: %w; set the same MC_AUTH_TOKEN on both sides", addr, err)
		}
		if d, ok := ctx.Deadline(); ok {
			c.SetDeadline(d) // auth.Client cleared it
		}
	}
	if err := writeLine(c, req); err != nil {
		return Info{}, fmt.Errorf("real client %s: %w", addr, err)
	}
	var rep reply
	if err := readLine(r, &rep); err != nil {
		return Info{}, fmt.Errorf("real client %s did not answer: %w", addr, err)
	}
	if rep.Error != "" || rep.Info == nil {
		return Info{}, fmt.Errorf("real client %s refused: %s", addr, rep.Error)
	}
	if rep.Info.MasterServerAddress == "" {
		return Info{}, fmt.Errorf("real client %s named no master", addr)
	}
	c.SetDeadline(time.Time{})
	return *rep.Info, nil
}

func writeLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// readLine decodes one JSON line of at most MaxLine bytes into v, refusing unknown fields.
func readLine(r *bufio.Reader, v any) error {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > MaxLine {
			return fmt.Errorf("line longer than %d bytes", MaxLine)
		}
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) && len(line) == 0 {
				return fmt.Errorf("connection closed: %w", err)
			}
			return err
		}
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("malformed line: %w", err)
	}
	return nil
}
