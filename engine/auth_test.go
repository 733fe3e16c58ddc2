package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/auth"
	"github.com/mooncake-go/mooncake/engine/transport"
	"github.com/mooncake-go/mooncake/engine/transport/tcp"
	"github.com/mooncake-go/mooncake/internal/memview"
)

const (
	tokA = "token-a-0123456789abcdef"
	tokB = "token-b-0123456789abcdef"
)

type errReporter struct {
	mu   sync.Mutex
	errs map[int]error
}

func (r *errReporter) Progress(int, uint64) {}
func (r *errReporter) Done(i int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.errs == nil {
		r.errs = map[int]error{}
	}
	r.errs[i] = err
}

// rawRun sends reqs to addr with a bare tcp client proving toks (none: unauthenticated) and
// returns the first request's error.
func rawRun(addr string, toks []*auth.Token, reqs []transport.Request) error {
	c := tcp.NewClient()
	defer c.Close()
	if len(toks) > 0 {
		c.Tokens = func(string) []*auth.Token { return toks }
	}
	var r errReporter
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.Execute(ctx, &transport.Target{Addr: addr}, reqs, &r)
	return r.errs[0]
}

func mustTok(t *testing.T, s string) *auth.Token {
	k, err := auth.NewToken(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func addrOf(e *Engine) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(e.RPCPort())) }

// TestAuthRefusesWithoutToken: a target with a token refuses READ, WRITE (single and batched)
// and the descriptor call from peers with no token or a wrong one, and its bytes stay as they
// were; the right token works.
func TestAuthRefusesWithoutToken(t *testing.T) {
	var logged []string
	var logMu sync.Mutex
	target := newEngine(t, Config{AuthToken: tokA})
	target.server.Auth.Log.SetLogf(func(f string, a ...any) {
		logMu.Lock()
		logged = append(logged, fmt.Sprintf(f, a...))
		logMu.Unlock()
	})
	buf := anon(t, 1<<20)
	fill(buf, 1)
	want := bytes.Clone(buf)
	if err := target.RegisterLocalMemory(addr(buf), uint64(len(buf)), "cpu:0"); err != nil {
		t.Fatal(err)
	}
	src := anon(t, 1<<20)
	fill(src, 9)
	dst := anon(t, 1<<20)
	remote := uint64(addr(buf))
	calls := map[string][]transport.Request{
		"write": {{Write: true, Local: addr(src), Remote: remote, Length: 1 << 20}},
		"read":  {{Local: addr(dst), Remote: remote, Length: 4096}},
		"batch": {{Write: true, Local: addr(src), Remote: remote, Length: 4096}, {Write: true, Local: addr(src), Remote: remote + 8192, Length: 4}, {Local: addr(dst), Remote: remote, Length: 64}},
	}
	for who, toks := range map[string][]*auth.Token{"no token": nil, "wrong token": {mustTok(t, tokB)}} {
		for name, reqs := range calls {
			err := rawRun(addrOf(target), toks, reqs)
			if err == nil {
				t.Fatalf("%s, %s: served", who, name)
			}
			if toks != nil && !strings.Contains(err.Error(), "refused: authentication failed; set the same MC_AUTH_TOKEN on both sides") {
				t.Fatalf("%s, %s: %v", who, name, err)
			}
			if toks == nil && !strings.Contains(err.Error(), "set the same MC_AUTH_TOKEN here") {
				t.Fatalf("%s, %s: %v", who, name, err)
			}
		}
		// The descriptor call (P2P handshake) and the engine-level API.
		var ini *Engine
		if toks == nil {
			ini = newEngine(t, Config{})
		} else {
			ini = newEngine(t, Config{AuthToken: tokB})
		}
		if _, err := ini.OpenSegment(target.SegmentName()); err == nil {
			t.Fatalf("%s: descriptor served", who)
		}
		if !bytes.Equal(buf, want) || !bytes.Equal(dst, make([]byte, len(dst))) {
			t.Fatalf("%s: bytes moved", who)
		}
	}
	logMu.Lock()
	if len(logged) == 0 || !strings.Contains(logged[0], "refused connection from 127.0.0.1:") {
		t.Fatalf("refusals logged: %q", logged)
	}
	logMu.Unlock()

	ini := newEngine(t, Config{AuthToken: tokA})
	seg, err := ini.OpenSegment(target.SegmentName())
	if err != nil {
		t.Fatal(err)
	}
	if err := ini.RegisterLocalMemory(addr(src), uint64(len(src)), "cpu:0"); err != nil {
		t.Fatal(err)
	}
	if err := ini.TransferSync(context.Background(), []TransferRequest{{Opcode: OpWrite, Source: addr(src), TargetID: seg, TargetOffset: remote, Length: 1 << 20}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, src) {
		t.Fatal("right token: bytes differ")
	}
	if err := rawRun(addrOf(target), []*auth.Token{mustTok(t, tokB), mustTok(t, tokA)}, calls["read"]); err != nil {
		t.Fatalf("second token of two: %v", err)
	}
	if !bytes.Equal(dst[:4096], src[:4096]) {
		t.Fatal("read: bytes differ")
	}
}

// TestAuthTargetWithoutToken: an initiator with a token is told the target has none.
func TestAuthTargetWithoutToken(t *testing.T) {
	target := newEngine(t, Config{})
	ini := newEngine(t, Config{AuthToken: tokA})
	_, err := ini.OpenSegment(target.SegmentName())
	if err == nil || !errors.Is(err, auth.ErrNoHandshake) && !strings.Contains(err.Error(), "MC_AUTH_TOKEN") {
		t.Fatalf("target without token: %v", err)
	}
}

// TestAuthGroupGuard: an engine without a token of its own serves unauthenticated peers its
// ordinary buffers, but a group's guarded buffer only to peers that prove the group's token,
// and leaves it out of the descriptor it answers the others.
func TestAuthGroupGuard(t *testing.T) {
	g := mustTok(t, tokA)
	target := newEngine(t, Config{})
	release := target.AddToken(g)
	defer release()
	gaddr, err := target.AllocateSharedGuarded(1<<16, g)
	if err != nil {
		t.Fatal(err)
	}
	guarded := memview.Bytes(gaddr, 1<<16)
	plain := anon(t, 1<<16)
	if err := target.RegisterLocalMemory(addr(plain), uint64(len(plain)), "cpu:0"); err != nil {
		t.Fatal(err)
	}
	src := anon(t, 1<<16)
	fill(src, 3)
	stranger := newEngine(t, Config{ForceTCP: true})
	stranger.RegisterLocalMemory(addr(src), uint64(len(src)), "cpu:0")
	seg, err := stranger.OpenSegment(target.SegmentName())
	if err != nil {
		t.Fatal(err)
	}
	d, _ := stranger.remote(seg)
	for _, b := range d.desc.Load().Buffers {
		if b.Addr == uint64(gaddr) {
			t.Fatalf("descriptor answered to a stranger lists the group's buffer %+v", b)
		}
	}
	if err := rawRun(addrOf(target), nil, []transport.Request{{Write: true, Local: addr(src), Remote: uint64(gaddr), Length: 1 << 16}}); err == nil {
		t.Fatal("stranger wrote into the group's buffer")
	}
	if !bytes.Equal(guarded, make([]byte, len(guarded))) {
		t.Fatal("group buffer changed")
	}
	if err := stranger.TransferSync(context.Background(), []TransferRequest{{Opcode: OpWrite, Source: addr(src), TargetID: seg, TargetOffset: uint64(addr(plain)), Length: 1 << 16}}); err != nil {
		t.Fatalf("plain buffer: %v", err)
	}
	member := newEngine(t, Config{ForceTCP: true})
	member.RegisterLocalMemory(addr(src), uint64(len(src)), "cpu:0")
	rel2 := member.AddToken(g)
	defer rel2()
	mseg, err := member.OpenSegmentAuth(target.SegmentName(), g)
	if err != nil {
		t.Fatal(err)
	}
	if err := member.TransferSync(context.Background(), []TransferRequest{{Opcode: OpWrite, Source: addr(src), TargetID: mseg, TargetOffset: uint64(gaddr), Length: 1 << 16}}); err != nil {
		t.Fatalf("member: %v", err)
	}
	if !bytes.Equal(guarded, src) {
		t.Fatal("member's write did not land")
	}
}

// TestAuthBadTokenFile: engine creation fails with a clear error.
func TestAuthBadTokenFile(t *testing.T) {
	_, err := New(context.Background(), Config{LocalServerName: "127.0.0.1", AuthToken: "short"})
	if err == nil || !strings.Contains(err.Error(), "too short") {
		t.Fatalf("short token: %v", err)
	}
}
