package realclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/auth"
)

var testInfo = Info{MasterServerAddress: "127.0.0.1:50051", ClusterID: "c1", MetadataServer: "P2PHANDSHAKE",
	Protocol: "tcp", Host: "127.0.0.1", Segment: "127.0.0.1:12345"}

// serve starts a real client service on a free port; it stops with the test.
func serve(t *testing.T, token *auth.Token) (*Server, string, *logs) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lg := &logs{}
	s := NewServer(testInfo, token, lg.add)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, l.Addr().String(), lg
}

type logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *logs) add(f string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, strings.TrimSpace(fmt.Sprintf(f, a...)))
}

func (l *logs) has(sub string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.lines {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !f(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAttachAndDetach(t *testing.T) {
	s, addr, lg := serve(t, nil)
	info, conn, err := Attach(context.Background(), addr, nil, Request{MemPoolSize: 1 << 20, LocalBufferSize: 2 << 20, PID: 7}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if info != testInfo {
		t.Fatalf("got %+v, want %+v", info, testInfo)
	}
	waitFor(t, "one attached", func() bool { return s.Attached() == 1 })
	if !lg.has("dummy client pid 7 from 127.0.0.1:") || !lg.has("mem_pool_size=1048576, local_buffer_size=2097152; 1 attached") {
		t.Fatalf("attach not logged: %q", lg.lines)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "none attached", func() bool { return s.Attached() == 0 })
	waitFor(t, "detach logged", func() bool { return lg.has("detached (0 attached)") })
}

func TestDummyHearsTheRealClientGo(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(testInfo, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, l) }()
	gone := make(chan error, 1)
	_, conn, err := Attach(context.Background(), l.Addr().String(), nil, Request{}, func(err error) { gone <- err })
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-gone:
		if !errors.Is(err, io.EOF) {
			t.Logf("gone with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the dummy was not told its real client went away")
	}
}

func TestAuthentication(t *testing.T) {
	tok, _ := auth.NewToken(strings.Repeat("r", 32))
	other, _ := auth.NewToken(strings.Repeat("o", 32))
	s, addr, lg := serve(t, tok)
	if _, _, err := Attach(context.Background(), addr, nil, Request{}, nil); err == nil ||
		!strings.Contains(err.Error(), "requires authentication: set MC_AUTH_TOKEN") {
		t.Fatalf("no token: %v", err)
	}
	if _, _, err := Attach(context.Background(), addr, other, Request{}, nil); err == nil ||
		!strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), "set the same MC_AUTH_TOKEN on both sides") {
		t.Fatalf("wrong token: %v", err)
	}
	waitFor(t, "refusal logged", func() bool { return lg.has("refused") })
	if s.Attached() != 0 {
		t.Fatalf("%d attached after refusals", s.Attached())
	}
	info, conn, err := Attach(context.Background(), addr, tok, Request{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if info != testInfo {
		t.Fatalf("got %+v", info)
	}
}

func TestNoRealClient(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	if _, _, err := Attach(context.Background(), addr, nil, Request{}, nil); err == nil ||
		!strings.Contains(err.Error(), "no real client at "+addr) {
		t.Fatalf("got %v", err)
	}
}

// TestNotARealClient: something else on the port (here: a server that talks garbage, and one
// that says nothing) is named as such, within the set-up timeout.
func TestNotARealClient(t *testing.T) {
	for _, greeting := range []string{"HTTP/1.1 400 Bad Request\r\n\r\n", "{\"service\":\"redis\"}\n", strings.Repeat("x", MaxLine+10)} {
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		go func() {
			c, err := l.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, greeting)
			time.Sleep(time.Second)
			c.Close()
		}()
		_, _, err := Attach(context.Background(), l.Addr().String(), nil, Request{}, nil)
		l.Close()
		if err == nil || !strings.Contains(err.Error(), "is not a mooncake real client") {
			t.Fatalf("greeting %.20q: %v", greeting, err)
		}
	}
}

// TestMalformedRequests: a peer that sends garbage, an oversized line or unknown fields is
// refused and disconnected; the service goes on serving.
func TestMalformedRequests(t *testing.T) {
	s, addr, lg := serve(t, nil)
	for _, req := range []string{"garbage\n", "{\"mem_pool_size\": -1}\n", "{\"bogus\": 1}\n", strings.Repeat("{", MaxLine+1)} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 256)
		c.Read(buf) // the hello
		io.WriteString(c, req)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _ := io.ReadAll(c)
		c.Close()
		if len(n) != 0 {
			t.Fatalf("request %.20q got a reply %q", req, n)
		}
	}
	waitFor(t, "refusals logged", func() bool { return lg.has("bad request") })
	if _, conn, err := Attach(context.Background(), addr, nil, Request{}, nil); err != nil {
		t.Fatalf("after malformed requests: %v", err)
	} else {
		conn.Close()
	}
	if s.Attached() > 1 {
		t.Fatal("malformed requests were attached")
	}
}
