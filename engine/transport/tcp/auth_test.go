package tcp

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/auth"
)

// whoHandler answers OpPing with how many tokens the connection proved.
type whoHandler struct{}

func (whoHandler) Acquire(uint64, uint64, []*auth.Token) ([]byte, Pin, error) {
	return nil, nil, &RemoteError{Code: StatusAddressNotRegistered, Msg: "none"}
}
func (whoHandler) Control(op Op, _ []byte, who []*auth.Token) ([]byte, error) {
	out := ""
	for _, t := range who {
		out += t.Fingerprint() + ","
	}
	return []byte(out), nil
}

func authServer(tb testing.TB, required bool, toks ...*auth.Token) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := NewServer(ln, whoHandler{})
	srv.Auth = &ServerAuth{Tokens: func() []*auth.Token { return toks }, Required: func() bool { return required }, Self: "srv"}
	go srv.Serve()
	tb.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func token(tb testing.TB, s string) *auth.Token {
	t, err := auth.NewToken(s + "-0123456789abcdef")
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

// TestClientProvesEveryToken: a connection proves each of the client's tokens the server
// accepts; a refused one is dropped (on a new connection) and the rest still proved.
func TestClientProvesEveryToken(t *testing.T) {
	a, b, x := token(t, "a"), token(t, "b"), token(t, "x")
	addr := authServer(t, true, a, b)
	c := NewClient()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		toks []*auth.Token
		want string
	}{
		{[]*auth.Token{a, b}, a.Fingerprint() + "," + b.Fingerprint() + ","},
		{[]*auth.Token{x, b}, b.Fingerprint() + ","},
		{[]*auth.Token{a, x}, a.Fingerprint() + ","},
	} {
		c.Tokens = func(string) []*auth.Token { return tc.toks }
		got, err := c.Call(ctx, addr, OpPing, nil)
		if err != nil || string(got) != tc.want {
			t.Fatalf("tokens %v: %q, %v (want %q)", tc.toks, got, err, tc.want)
		}
	}
	c.Tokens = func(string) []*auth.Token { return []*auth.Token{x} }
	_, err := c.Call(ctx, addr, OpPing, nil)
	if !errors.Is(err, auth.ErrRefused) || !strings.Contains(err.Error(), "peer "+addr+" refused: authentication failed") {
		t.Fatalf("wrong token: %v", err)
	}
	c.Tokens = nil
	if _, err := c.Call(ctx, addr, OpPing, nil); err == nil || !strings.Contains(err.Error(), "set the same MC_AUTH_TOKEN here") {
		t.Fatalf("no token: %v", err)
	}
	// A server that does not require a token serves an unauthenticated connection.
	open := authServer(t, false, a)
	if got, err := c.Call(ctx, open, OpPing, nil); err != nil || string(got) != "" {
		t.Fatalf("open server: %q, %v", got, err)
	}
}

// BenchmarkConnect is the set-up cost of a connection: dial and a ping, with and without the
// handshake (every iteration on a new connection).
func BenchmarkConnect(b *testing.B) {
	tok := token(b, "bench")
	for _, mode := range []string{"plain", "auth"} {
		b.Run(mode, func(b *testing.B) {
			var addr string
			c := NewClient()
			defer c.Close()
			if mode == "auth" {
				addr = authServer(b, true, tok)
				c.Tokens = func(string) []*auth.Token { return []*auth.Token{tok} }
			} else {
				ln, _ := net.Listen("tcp", "127.0.0.1:0")
				srv := NewServer(ln, whoHandler{})
				go srv.Serve()
				b.Cleanup(func() { srv.Close() })
				addr = ln.Addr().String()
			}
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := c.Call(ctx, addr, OpPing, nil); err != nil {
					b.Fatal(err)
				}
				c.Forget(addr)
			}
		})
	}
}
