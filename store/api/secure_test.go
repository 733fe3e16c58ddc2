package api

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/auth"
)

func testToken(t testing.TB) *auth.Token {
	tok, err := auth.NewToken("0123456789abcdef-api-token")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// serve runs the master's connection set-up on one end of a pipe whose other end is peer.
func serve(t testing.TB, sec ServerSecurity, peer func(c net.Conn)) (ConnInfo, []byte, error) {
	s, c := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		peer(c)
		c.Close()
	}()
	_, head, info, err := sec.setupServer(s)
	s.Close()
	<-done
	return info, head, err
}

// The set-up with the right token authenticates and hands on the protocol's first bytes; a
// framed client that skips it is not authenticated.
func TestSetupServer(t *testing.T) {
	tok := testToken(t)
	sec := ServerSecurity{Token: tok}
	info, head, err := serve(t, sec, func(c net.Conn) {
		cs, err := ClientSecurity{Token: tok}.setupClient(context.Background(), c, "pipe")
		if err == nil {
			io.WriteString(cs, framedMagic)
		}
	})
	if err != nil || !info.Authenticated || string(head) != framedMagic {
		t.Fatalf("good client: %+v %q %v", info, head, err)
	}
	info, head, err = serve(t, sec, func(c net.Conn) { io.WriteString(c, framedMagic) })
	if err != nil || info.Authenticated || string(head) != framedMagic {
		t.Fatalf("client without a token: %+v %q %v", info, head, err)
	}
	other, _ := auth.NewToken("another-token-of-enough-length")
	var cerr error
	_, _, err = serve(t, sec, func(c net.Conn) {
		_, cerr = ClientSecurity{Token: other}.setupClient(context.Background(), c, "pipe")
	})
	if err == nil || !IsSetupRefusal(cerr) {
		t.Fatalf("wrong token: server %v, client %v", err, cerr)
	}
	// Without a token everything is let through.
	info, _, err = serve(t, ServerSecurity{}, func(c net.Conn) { io.WriteString(c, framedMagic) })
	if err != nil || !info.Authenticated {
		t.Fatalf("open master: %+v %v", info, err)
	}
}

// FuzzSetupServer: whatever a peer without the token sends, the master's connection set-up
// never panics and never reports the connection authenticated.
func FuzzSetupServer(f *testing.F) {
	f.Add([]byte(framedMagic + "\x05\x00\x00\x00"))
	f.Add([]byte(authMagic))
	f.Add([]byte(authMagic + "\x01\x01\x00\x30garbage"))
	f.Add([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
	tok := testToken(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		sec := ServerSecurity{Token: tok}
		info, _, err := serve(t, sec, func(c net.Conn) {
			c.SetDeadline(time.Now().Add(2 * time.Second))
			go io.Copy(io.Discard, c)
			c.Write(in)
		})
		if err == nil && info.Authenticated {
			t.Fatalf("%q authenticated without the token", in)
		}
	})
}
