package auth

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func tok(t *testing.T, s string) *Token {
	t.Helper()
	k, err := NewToken(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

type result struct {
	peer Peer
	err  error
}

// pair runs a client and a server handshake over a real loopback TCP connection.
func pair(t *testing.T, ct *Token, st []*Token) (client, server result) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := ln.Accept()
		if err != nil {
			server.err = err
			return
		}
		defer c.Close()
		server.peer, server.err = Server(ctx, c, st, "srv")
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	client.peer, client.err = Client(ctx, c, ct, "cli")
	c.Close()
	wg.Wait()
	return
}

func TestHandshake(t *testing.T) {
	a, b := tok(t, "aaaaaaaaaaaaaaaaaaaa"), tok(t, "bbbbbbbbbbbbbbbbbbbb")
	c, s := pair(t, a, []*Token{b, a})
	if c.err != nil || s.err != nil {
		t.Fatalf("right token: client %v, server %v", c.err, s.err)
	}
	if c.peer.ID != "srv" || s.peer.ID != "cli" || s.peer.Token != a || c.peer.Token != a {
		t.Fatalf("peers: client saw %+v, server saw %+v", c.peer, s.peer)
	}
	c, s = pair(t, a, []*Token{b})
	if !errors.Is(c.err, ErrRefused) || !errors.Is(s.err, ErrBadProof) {
		t.Fatalf("wrong token: client %v, server %v", c.err, s.err)
	}
	if !strings.Contains(c.err.Error(), "set the same MC_AUTH_TOKEN on both sides") {
		t.Fatalf("message does not say what to do: %v", c.err)
	}
}

// A server that does not authenticate (it reads a 32-byte frame header and hangs up) and a
// client that does not (it sends a frame header) are both told so.
func TestPeerWithoutHandshake(t *testing.T) {
	a := tok(t, "aaaaaaaaaaaaaaaaaaaa")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c1, c2 := net.Pipe()
	go func() {
		var hdr [32]byte
		io.ReadFull(c2, hdr[:])
		c2.Close()
	}()
	if _, err := Client(ctx, c1, a, "cli"); !errors.Is(err, ErrNoHandshake) {
		t.Fatalf("server without token: %v", err)
	}
	c1, c2 = net.Pipe()
	go func() {
		c2.Write(append([]byte("MCTQ\x01\x02"), make([]byte, 26)...))
		c2.Close()
	}()
	if _, err := Server(ctx, c1, []*Token{a}, "srv"); !errors.Is(err, ErrNoHandshake) {
		t.Fatalf("client without token: %v", err)
	}
}

// recorder keeps every byte written through it.
type recorder struct {
	io.ReadWriter
	out bytes.Buffer
}

func (r *recorder) Write(b []byte) (int, error) { r.out.Write(b); return r.ReadWriter.Write(b) }

// TestReplay captures a successful handshake and plays each side's bytes to a fresh peer with
// the same token: both refuse, because the fresh peer's nonce differs.
func TestReplay(t *testing.T) {
	a := tok(t, "aaaaaaaaaaaaaaaaaaaa")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c1, c2 := net.Pipe()
	cr, sr := &recorder{ReadWriter: c1}, &recorder{ReadWriter: c2}
	errs := make(chan error, 1)
	go func() { _, err := Server(ctx, sr, []*Token{a}, "srv"); errs <- err }()
	if _, err := Client(ctx, cr, a, "cli"); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	c1.Close()
	// Client's bytes to a new server.
	msgs := splitMessages(t, cr.out.Bytes())
	c3, c4 := net.Pipe()
	go func() { _, err := Server(ctx, c4, []*Token{a}, "srv"); errs <- err; c4.Close() }()
	c3.Write(msgs[0]) // the old hello
	if _, err := ReadMessage(c3); err != nil {
		t.Fatal(err)
	}
	c3.Write(msgs[1]) // the old proof
	if res, err := ReadMessage(c3); err != nil || res.Type != MsgResult || res.OK {
		t.Fatalf("replayed client proof: result %+v, %v", res, err)
	}
	if err := <-errs; !errors.Is(err, ErrBadProof) {
		t.Fatalf("replayed client proof: server says %v", err)
	}
	c3.Close()
	// Server's bytes to a new client.
	smsgs := splitMessages(t, sr.out.Bytes())
	c5, c6 := net.Pipe()
	go func() {
		ReadMessage(c6)
		c6.Write(smsgs[0])
		ReadMessage(c6)
		c6.Write(smsgs[1])
	}()
	if _, err := Client(ctx, c5, a, "cli"); !errors.Is(err, ErrBadProof) {
		t.Fatalf("replayed server answers: client says %v", err)
	}
	c5.Close()
	c6.Close()
}

func splitMessages(t *testing.T, b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		_, n, err := decodeHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b[:hdrLen+n])
		b = b[hdrLen+n:]
	}
	return out
}

func TestContextBoundsHandshake(t *testing.T) {
	c1, c2 := net.Pipe()
	defer c2.Close()
	go io.Copy(io.Discard, c2) // reads the hello, never answers
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := Client(ctx, c1, tok(t, "aaaaaaaaaaaaaaaaaaaa"), "cli")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("silent server: %v", err)
	}
}

func TestEncodeDecode(t *testing.T) {
	msgs := []Message{
		{Type: MsgHello, Nonce: [NonceLen]byte{1, 2, 3}, ID: "10.0.0.5:15123"},
		{Type: MsgChallenge, Nonce: [NonceLen]byte{9}, ID: ""},
		{Type: MsgProof, MAC: [MACLen]byte{7, 7}},
		{Type: MsgResult, OK: true, MAC: [MACLen]byte{5}},
		{Type: MsgResult},
	}
	for _, m := range msgs {
		b := m.Append(nil)
		got, err := Decode(b)
		if err != nil || got != m {
			t.Fatalf("round trip of %+v: %+v, %v", m, got, err)
		}
		for i := 0; i < len(b); i++ {
			if _, err := Decode(b[:i]); !errors.Is(err, ErrMalformed) {
				t.Fatalf("%d of %d bytes decoded: %v", i, len(b), err)
			}
		}
		if _, err := Decode(append(b, 0)); !errors.Is(err, ErrMalformed) {
			t.Fatalf("trailing byte accepted: %v", err)
		}
	}
	long := Message{Type: MsgHello, ID: strings.Repeat("x", 300)}
	if got, err := Decode(long.Append(nil)); err != nil || len(got.ID) != MaxIDLen {
		t.Fatalf("long identity: %d bytes, %v", len(got.ID), err)
	}
	bad := map[string][]byte{
		"magic":   []byte("MCAX\x01\x03\x20\x00" + strings.Repeat("a", 32)),
		"version": []byte("MCAU\x02\x03\x20\x00" + strings.Repeat("a", 32)),
		"type":    []byte("MCAU\x01\x09\x20\x00" + strings.Repeat("a", 32)),
		"length":  []byte("MCAU\x01\x03\x21\x00" + strings.Repeat("a", 33)),
		"idlen":   []byte("MCAU\x01\x01\x22\x00" + strings.Repeat("a", 32) + "\x02x"),
		"status":  []byte("MCAU\x01\x04\x21\x00\x02" + strings.Repeat("a", 32)),
	}
	for name, b := range bad {
		if _, err := Decode(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("bad %s accepted: %v", name, err)
		}
	}
}

// FuzzDecode: Decode never panics, accepts only what re-encodes to the same bytes, and
// ReadMessage agrees with it.
func FuzzDecode(f *testing.F) {
	for _, m := range []Message{
		{Type: MsgHello, Nonce: [NonceLen]byte{1}, ID: "host:1"},
		{Type: MsgChallenge, ID: "srv"},
		{Type: MsgProof, MAC: [MACLen]byte{3}},
		{Type: MsgResult, OK: true},
	} {
		f.Add(m.Append(nil))
	}
	f.Add([]byte("MCTQ\x01\x02\x00\x00"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		rm, rerr := ReadMessage(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		if !bytes.Equal(m.Append(nil), b) {
			t.Fatalf("%x decodes to %+v which encodes differently", b, m)
		}
		if rerr != nil || rm != m {
			t.Fatalf("ReadMessage: %+v, %v; Decode: %+v", rm, rerr, m)
		}
	})
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	good := write("good", "0123456789abcdef0123\n", 0o600)
	if k, err := Load("", ""); k != nil || err != nil {
		t.Fatalf("nothing set: %v, %v", k, err)
	}
	if k, err := Load("", good); err != nil || k.Secret() != "0123456789abcdef0123" {
		t.Fatalf("file: %v, %v", k, err)
	}
	if k, err := Load(" 0123456789abcdef0123", ""); err != nil || k.Secret() != " 0123456789abcdef0123" {
		t.Fatalf("value: %v, %v", k, err)
	}
	for name, c := range map[string]struct{ v, f, want string }{
		"both":     {"0123456789abcdef0123", good, "set only one"},
		"short":    {"short", "", "too short"},
		"readable": {"", write("open", "0123456789abcdef0123", 0o644), "chmod 600"},
		"empty":    {"", write("empty", " \n", 0o600), "is empty"},
		"missing":  {"", filepath.Join(dir, "nope"), "cannot read"},
		"dir":      {"", dir, "not a regular file"},
	} {
		if k, err := Load(c.v, c.f); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, %v (want an error saying %q)", name, k, err, c.want)
		}
	}
	g1, _ := Generate()
	g2, _ := Generate()
	if g1.Equal(g2) || len(g1.Secret()) != 64 || !g1.Equal(tok(t, g1.Secret())) {
		t.Fatalf("Generate: %q %q", g1.Secret(), g2.Secret())
	}
	if s := fmt.Sprint(g1); strings.Contains(s, g1.Secret()) {
		t.Fatalf("a token prints its secret: %s", s)
	}
}

func TestRefusalLog(t *testing.T) {
	var lines []string
	now := time.Unix(100, 0)
	l := &RefusalLog{Prefix: "eng", Burst: 2, Window: time.Minute, now: func() time.Time { return now },
		Logf: func(f string, a ...any) { lines = append(lines, fmt.Sprintf(f, a...)) }}
	for i := 0; i < 5; i++ {
		l.Refused("1.2.3.4:5", "x\n", ErrBadProof)
	}
	now = now.Add(time.Minute)
	l.Refused("1.2.3.4:5", "", ErrNoHandshake)
	if len(lines) != 3 || !strings.Contains(lines[2], "3 more refusals were not logged") ||
		!strings.Contains(lines[0], `eng: refused connection from 1.2.3.4:5 (calling itself "x\n")`) {
		t.Fatalf("log lines: %q", lines)
	}
}

// TestDecodeMutations is a short, deterministic fuzz run inside the ordinary tests: every
// one-byte change, truncation and extension of valid messages either decodes to a message that
// re-encodes to the same bytes or fails with ErrMalformed (never a panic).
func TestDecodeMutations(t *testing.T) {
	seeds := []Message{
		{Type: MsgHello, Nonce: [NonceLen]byte{1}, ID: "host:1"},
		{Type: MsgChallenge, ID: "s"},
		{Type: MsgProof, MAC: [MACLen]byte{3}},
		{Type: MsgResult, OK: true},
	}
	check := func(b []byte) {
		m, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("%x: %v", b, err)
			}
			return
		}
		if !bytes.Equal(m.Append(nil), b) {
			t.Fatalf("%x decodes to %+v, which encodes differently", b, m)
		}
	}
	for _, s := range seeds {
		b := s.Append(nil)
		for i := range b {
			for _, v := range []byte{0, 1, 2, 0x20, 0x21, 0x7f, 0x80, 0xff, b[i] + 1, b[i] - 1} {
				c := bytes.Clone(b)
				c[i] = v
				check(c)
			}
			check(b[:i])
		}
		check(append(bytes.Clone(b), 0))
	}
}
