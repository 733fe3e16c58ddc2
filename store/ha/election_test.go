package ha

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/testsvc"
)

// quietLog keeps expected warnings (lost leases, failed renewals) out of test output
// unless -v.
func quietLog(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	return slog.New(slog.DiscardHandler)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// store is one HA store under test: how to reach it and the TTL its tests use.
type store struct {
	name      string
	endpoints string
	ttl       time.Duration
}

func etcdStore(t *testing.T) store {
	return store{"etcd", "etcd://" + testsvc.StartEtcd(t), 2 * time.Second} // etcd's minimum lease TTL is about 2 s
}

func redisStore(t *testing.T) store {
	return store{"redis", "redis://" + testsvc.StartRedis(t), time.Second}
}

func (s store) dial(t *testing.T) *Conn {
	t.Helper()
	c, err := Dial(context.Background(), s.endpoints)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (s store) elector(t *testing.T, c *Conn, cluster, addr string) Elector {
	t.Helper()
	e, err := c.NewElector(ElectorConfig{ClusterID: cluster, Address: addr, TTL: s.ttl, Logger: quietLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

type campaignResult struct {
	l   Leadership
	err error
	at  time.Time
}

func campaignAsync(e Elector, ctx context.Context) <-chan campaignResult {
	ch := make(chan campaignResult, 1)
	go func() {
		l, err := e.Campaign(ctx)
		ch <- campaignResult{l, err, time.Now()}
	}()
	return ch
}

func waitResult(t *testing.T, ch <-chan campaignResult, within time.Duration, what string) campaignResult {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r
	case <-time.After(within):
		t.Fatalf("%s: no leadership within %s", what, within)
		return campaignResult{}
	}
}

func waitLost(t *testing.T, l Leadership, within time.Duration, what string) time.Time {
	t.Helper()
	select {
	case <-l.Lost():
		return time.Now()
	case <-time.After(within):
		t.Fatalf("%s: Lost() did not fire within %s", what, within)
		return time.Time{}
	}
}

func waitView(t *testing.T, w *ViewWatcher, want func(View) bool, within time.Duration, what string) View {
	t.Helper()
	deadline := time.After(within)
	for {
		if v := w.Current(); want(v) {
			return v
		}
		select {
		case <-w.Changes():
		case <-deadline:
			t.Fatalf("%s: view is %v", what, w.Current())
		}
	}
}

// testElection runs the election scenarios against one store.
func testElection(t *testing.T, s store) {
	ctx := context.Background()
	ttl := s.ttl
	ca, cb := s.dial(t), s.dial(t)
	ea := s.elector(t, ca, "c1", "10.0.0.1:50051")
	eb := s.elector(t, cb, "c1", "10.0.0.2:50051")
	w, err := WatchView(ctx, s.endpoints, "c1", WithPollInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if v := w.Current(); v.Leader != "" {
		t.Fatalf("fresh cluster has %v", v)
	}

	// A wins and waits the margin before serving.
	start := time.Now()
	la, err := ea.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < serveMargin(ttl) {
		t.Fatalf("leader served after %s, before the margin (%s)", d, serveMargin(ttl))
	}
	if !la.Valid() || la.View().Leader != "10.0.0.1:50051" || la.View().Version == 0 {
		t.Fatalf("leadership %v valid=%v", la.View(), la.Valid())
	}
	waitView(t, w, func(v View) bool { return v == la.View() }, 2*time.Second, "watcher sees A")

	// B cannot win while A renews.
	bch := campaignAsync(eb, ctx)
	select {
	case r := <-bch:
		t.Fatalf("second leader while the first renews: %v, %v", r.l, r.err)
	case <-time.After(3 * ttl):
	}
	select {
	case <-la.Lost():
		t.Fatalf("A lost leadership while renewing: %v", la.Err())
	default:
	}

	// A stalls (stops renewing): its Lost fires before B serves, by at least the margin (A
	// stops leaseMargin before the store expires its lease, B waits serveMargin after).
	la.(*term).pause()
	lostA := waitLost(t, la, 2*ttl, "paused A")
	if !errors.Is(la.Err(), ErrLeaseExpired) || la.Valid() {
		t.Fatalf("paused A: err %v valid %v", la.Err(), la.Valid())
	}
	rb := waitResult(t, bch, 4*ttl, "B after A stalled")
	if gap := rb.at.Sub(lostA); gap < serveMargin(ttl) {
		t.Fatalf("B served %s after A's Lost fired; want at least the margin (%s)", gap, serveMargin(ttl))
	}
	lb := rb.l
	if lb.View().Version <= la.View().Version {
		t.Fatalf("view version did not grow: %v then %v", la.View(), lb.View())
	}
	waitView(t, w, func(v View) bool { return v == lb.View() }, 2*time.Second, "watcher sees B")

	// B crashes (connection gone, nothing revoked): A takes over once B's lease expires,
	// plus the margin.
	ach := campaignAsync(ea, ctx)
	crash := time.Now()
	cb.Close()
	lostB := waitLost(t, lb, 2*ttl, "B after its connection closed")
	ra := waitResult(t, ach, 5*ttl, "A after B crashed")
	if d := ra.at.Sub(crash); d < serveMargin(ttl) {
		t.Fatalf("A served %s after B crashed; want at least the margin (%s)", d, serveMargin(ttl))
	}
	if !ra.at.After(lostB) {
		t.Fatal("A served before B's Lost fired")
	}
	la2 := ra.l

	// Graceful handover: A resigns, C takes over after only the margin.
	cc := s.dial(t)
	ec := s.elector(t, cc, "c1", "10.0.0.3:50051")
	cch := campaignAsync(ec, ctx)
	time.Sleep(ttl / 2)
	resign := time.Now()
	if err := la2.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(la2.Err(), ErrResigned) {
		t.Fatalf("resigned A: %v", la2.Err())
	}
	rc := waitResult(t, cch, 4*ttl, "C after A resigned")
	if d := rc.at.Sub(resign); d < serveMargin(ttl) || d > ttl+ttl/2+time.Second {
		t.Fatalf("C served %s after A resigned; want the margin (%s), well under 1.5 TTL", d, serveMargin(ttl))
	}
	waitView(t, w, func(v View) bool { return v == rc.l.View() }, 2*time.Second, "watcher sees C")

	// Another cluster id is independent.
	ed := s.elector(t, cc, "c2", "10.0.0.4:50051")
	cctx, cancel := context.WithTimeout(ctx, 3*ttl)
	defer cancel()
	if _, err := ed.Campaign(cctx); err != nil {
		t.Fatalf("cluster c2: %v", err)
	}

	// Close resigns: the view empties.
	if err := ec.Close(); err != nil {
		t.Fatal(err)
	}
	waitView(t, w, func(v View) bool { return v.Leader == "" }, 2*time.Second, "watcher sees no leader")
	if _, err := ec.Campaign(ctx); err == nil {
		t.Fatal("Campaign on a closed elector succeeded")
	}
	// A campaign gives up with its context.
	cctx2, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	if _, err := ed.Campaign(cctx2); !errors.Is(err, context.DeadlineExceeded) {
		// ed holds c2; its second campaign must wait, then time out.
		t.Fatalf("campaign with a short context: %v", err)
	}
}

func TestElectionEtcd(t *testing.T) {
	t.Parallel()
	testElection(t, etcdStore(t))
}

func TestElectionRedis(t *testing.T) {
	t.Parallel()
	testElection(t, redisStore(t))
}

func TestElectorConfig(t *testing.T) {
	c := &Conn{ep: Endpoints{Kind: KindRedis}}
	for _, cfg := range []ElectorConfig{{Address: "h:1"}, {ClusterID: "c"}, {ClusterID: "c", Address: "nohost"}, {ClusterID: "c", Address: "h:1", TTL: -1}} {
		if _, err := c.NewElector(cfg); err == nil {
			t.Errorf("NewElector(%+v) accepted", cfg)
		}
	}
}

func TestDialUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, ep := range []string{"redis://127.0.0.1:1", "etcd://127.0.0.1:1"} {
		if _, err := Dial(ctx, ep); err == nil || !strings.Contains(err.Error(), "does not answer") {
			t.Errorf("Dial(%s): %v", ep, err)
		}
	}
}
