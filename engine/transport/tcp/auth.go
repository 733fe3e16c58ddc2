package tcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/mooncake-go/mooncake/auth"
)

// Authentication (package auth): a connection that starts with the handshake's magic runs it
// before its first frame; the token it proved is handed to every Handler call on it, so the
// handler decides what it may reach. A connection that starts with a frame is unauthenticated:
// it is served only when ServerAuth.Required says so.

// DefaultAuthTimeout bounds a connection's handshake.
const DefaultAuthTimeout = 10 * time.Second

// ServerAuth is the server side's authentication settings.
type ServerAuth struct {
	// Tokens returns the tokens accepted now (none: every handshake fails).
	Tokens func() []*auth.Token
	// Required reports whether connections without a handshake are refused (nil: they are).
	Required func() bool
	// Self names this server in the handshake (its segment name).
	Self string
	// Log records refused connections (rate-limited); nil: they are not logged.
	Log *auth.RefusalLog
	// Timeout bounds the handshake; 0: DefaultAuthTimeout.
	Timeout time.Duration
}

// handshakeConn reads through the connection's buffered reader (which peeked at the magic).
type handshakeConn struct {
	br *bufio.Reader
	net.Conn
}

func (h handshakeConn) Read(b []byte) (int, error) { return h.br.Read(b) }

// admit authenticates a new connection: it returns the tokens the peer proved (none for an
// unauthenticated connection the server serves) and whether to serve it. A client may run
// several handshakes, one after the other, before its first frame: one per token it holds for
// this server (the groups it shares with it); each must succeed.
func (a *ServerAuth) admit(c net.Conn, br *bufio.Reader) ([]*auth.Token, bool) {
	to := a.Timeout
	if to <= 0 {
		to = DefaultAuthTimeout
	}
	var proved []*auth.Token
	for {
		head, err := br.Peek(4)
		if err != nil {
			return nil, false // closed before its first frame: nothing to log
		}
		if string(head) != "MCAU" {
			if len(proved) == 0 && (a.Required == nil || a.Required()) {
				a.refused(c, "", auth.ErrNoHandshake)
				return nil, false
			}
			return proved, true
		}
		var toks []*auth.Token
		if a.Tokens != nil {
			toks = a.Tokens()
		}
		if len(toks) == 0 {
			a.refused(c, "", errors.New("it tried to authenticate, but this engine has no token; set the same MC_AUTH_TOKEN on both sides"))
			return nil, false
		}
		ctx, cancel := context.WithTimeout(context.Background(), to)
		p, err := auth.Server(ctx, handshakeConn{br, c}, toks, a.Self)
		cancel()
		if err != nil {
			a.refused(c, p.ID, err)
			return nil, false
		}
		proved = append(proved, p.Token)
	}
}

func (a *ServerAuth) refused(c net.Conn, claimed string, err error) {
	if a.Log != nil {
		a.Log.Refused(c.RemoteAddr().String(), claimed, err)
	}
}

// handshake proves toks on a fresh connection to addr, one handshake after the other. A
// token the peer refuses closes the connection: the others are proved again on a new one
// (redial) without it. It fails when the peer accepts none of them.
func (c *Client) handshake(ctx context.Context, nc net.Conn, addr string, toks []*auth.Token, redial func() (net.Conn, error)) (net.Conn, error) {
	to := c.AuthTimeout
	if to <= 0 {
		to = DefaultAuthTimeout
	}
	var firstErr error
	for len(toks) > 0 {
		if nc == nil {
			var err error
			if nc, err = redial(); err != nil {
				return nil, err
			}
		}
		failed := -1
		var err error
		for i, t := range toks {
			hctx, cancel := context.WithTimeout(ctx, to)
			_, err = auth.Client(hctx, nc, t, c.Self)
			cancel()
			if err != nil {
				failed = i
				break
			}
		}
		if err == nil {
			return nc, nil
		}
		nc.Close()
		nc = nil
		if firstErr == nil {
			firstErr = err
		}
		if !errors.Is(err, auth.ErrRefused) {
			break
		}
		toks = slices.Delete(slices.Clone(toks), failed, failed+1)
	}
	if errors.Is(firstErr, auth.ErrRefused) {
		return nil, fmt.Errorf("peer %s refused: %w", addr, firstErr)
	}
	return nil, fmt.Errorf("peer %s: %w", addr, firstErr)
}

// hint adds what to do to the failure of a fresh, unauthenticated connection that the peer
// closed before answering anything: it most likely requires a token.
func hint(fresh, answered, authenticated bool, err error) error {
	if !fresh || answered || authenticated || err == nil {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrClosed) {
		return err
	}
	return fmt.Errorf("%w (the peer closed the connection before answering: if it has MC_AUTH_TOKEN set, set the same MC_AUTH_TOKEN here)", err)
}
