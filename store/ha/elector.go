package ha

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// DefaultTTL is the leader lease TTL when ElectorConfig.TTL is 0, as upstream.
const DefaultTTL = 5 * time.Second

// View is who leads: the leader's "ip:port" and the view version, which grows with every
// new leadership (etcd: the leader key's create revision; Redis: master_view_version).
// The zero View means no leader.
type View struct {
	Leader  string
	Version uint64
}

func (v View) String() string {
	if v.Leader == "" {
		return "no leader"
	}
	return fmt.Sprintf("leader %s (view %d)", v.Leader, v.Version)
}

// Errors a Leadership reports through Err, and Append through ErrFenced.
var (
	// ErrLeaseExpired: the lease was not renewed in time (store unreachable, or this
	// process paused).
	ErrLeaseExpired = errors.New("leader lease expired before it could be renewed")
	// ErrLeaderKeyLost: the store says the lease or the leader key is gone or has another
	// owner.
	ErrLeaderKeyLost = errors.New("leader key is gone or owned by another master")
	// ErrResigned: Resign or Elector.Close ended the leadership.
	ErrResigned = errors.New("leadership resigned")
)

// ElectorConfig configures an Elector.
type ElectorConfig struct {
	// ClusterID is the master's --cluster_id. Required.
	ClusterID string
	// Address is this master's "ip:port" as clients should dial it. Required.
	Address string
	// TTL of the leader lease; 0 means DefaultTTL. etcd rounds it up to whole seconds.
	TTL time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

func (c *ElectorConfig) check() error {
	if err := checkClusterID(c.ClusterID); err != nil {
		return err
	}
	if err := checkHostPort(c.Address); err != nil {
		return fmt.Errorf("ha: master address: %w", err)
	}
	if c.TTL < 0 {
		return fmt.Errorf("ha: leader lease TTL %s is negative", c.TTL)
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Elector campaigns for leadership of one cluster.
type Elector interface {
	// Campaign blocks until this master is the leader and may serve: it holds the leader
	// key and has waited serveMargin(TTL) since taking it. It returns early with ctx's error.
	// Call it again after a Leadership is lost to stand again. Only one Campaign at a
	// time per Elector.
	Campaign(ctx context.Context) (Leadership, error)
	// Close resigns the current leadership, if any, and makes later campaigns fail. It does
	// not interrupt a Campaign in progress (cancel its context) and does not close the Conn.
	Close() error
}

// Leadership is one term as leader.
type Leadership interface {
	// View is this term's view (this master's address and the view version).
	View() View
	// Lost is closed as soon as the leadership may have ended; the master must stop
	// serving at once.
	Lost() <-chan struct{}
	// Err says why Lost fired (wrapping ErrLeaseExpired, ErrLeaderKeyLost or ErrResigned);
	// nil before.
	Err() error
	// Valid reports whether the lease is still known to be held right now. Check it before
	// acknowledging a request: after a long pause the Lost channel may not yet have been
	// read.
	Valid() bool
	// Resign gives the leadership up: stops renewing and deletes the leader key if this
	// term still owns it, so a standby takes over without waiting for the lease to expire.
	Resign(ctx context.Context) error
}

// renewFunc renews a lease once. It returns how long the lease is valid from when the
// request was sent, or an error wrapping ErrLeaderKeyLost when the lease is definitely
// gone; other errors are retried until the lease runs out.
type renewFunc func(ctx context.Context) (time.Duration, error)

// term is the common Leadership: a renewal loop and a local deadline.
type term struct {
	view   View
	ttl    time.Duration
	log    *slog.Logger
	renew  renewFunc
	resign func(ctx context.Context) error // deletes the key if still ours; best effort
	gone   <-chan error                    // the store says the key changed; may be nil

	lost     chan struct{}
	loopDone chan struct{}
	cancel   context.CancelFunc

	mu       sync.Mutex
	deadline time.Time
	err      error

	// pauseRenewals stops renewing without resigning (tests simulate a stalled process).
	pauseRenewals chan struct{}
	pauseOnce     sync.Once
}

// leaseMargin is taken off every local deadline to cover clock-rate differences.
func leaseMargin(ttl time.Duration) time.Duration { return ttl / 10 }

func newTerm(view View, ttl time.Duration, sent time.Time, log *slog.Logger, renew renewFunc,
	resign func(context.Context) error, gone <-chan error) *term {
	ctx, cancel := context.WithCancel(context.Background())
	t := &term{view: view, ttl: ttl, log: log, renew: renew, resign: resign, gone: gone,
		lost: make(chan struct{}), loopDone: make(chan struct{}), cancel: cancel,
		deadline: sent.Add(ttl - leaseMargin(ttl)), pauseRenewals: make(chan struct{})}
	go t.run(ctx)
	return t
}

func (t *term) View() View            { return t.view }
func (t *term) Lost() <-chan struct{} { return t.lost }

func (t *term) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

func (t *term) Valid() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err == nil && time.Now().Before(t.deadline)
}

// lose ends the term with err (first call wins).
func (t *term) lose(err error) {
	t.mu.Lock()
	if t.err != nil {
		t.mu.Unlock()
		return
	}
	t.err = err
	t.mu.Unlock()
	close(t.lost)
	t.cancel()
	if !errors.Is(err, ErrResigned) {
		t.log.Warn("mooncake master lost leadership; stop serving", "view", t.view.Version, "leader", t.view.Leader, "reason", err)
	}
}

type renewResult struct {
	sent  time.Time
	valid time.Duration
	err   error
}

func (t *term) run(ctx context.Context) {
	defer close(t.loopDone)
	t.mu.Lock()
	timer := time.NewTimer(time.Until(t.deadline))
	t.mu.Unlock()
	defer timer.Stop()
	interval := t.ttl / 3
	tick := time.NewTicker(interval)
	defer tick.Stop()
	results := make(chan renewResult, 1)
	inflight, paused := false, false
	pauseCh, gone := t.pauseRenewals, t.gone
	// After a failed renewal, retry soon rather than at the next tick: a renewal that
	// timed out has used up most of an interval already.
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	startRenew := func() {
		inflight = true
		go func() {
			rctx, cancel := context.WithTimeout(ctx, interval)
			defer cancel()
			sent := time.Now()
			valid, err := t.renew(rctx)
			results <- renewResult{sent, valid, err}
		}()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-pauseCh:
			paused, pauseCh = true, nil
		case <-timer.C:
			t.lose(fmt.Errorf("ha: view %d of %s: %w (TTL %s)", t.view.Version, t.view.Leader, ErrLeaseExpired, t.ttl))
			return
		case err, ok := <-gone:
			if !ok {
				gone = nil
				continue
			}
			t.lose(fmt.Errorf("ha: view %d of %s: %w", t.view.Version, t.view.Leader, err))
			return
		case <-tick.C:
			if inflight || paused {
				continue
			}
			startRenew()
		case <-retry.C:
			if inflight || paused {
				continue
			}
			startRenew()
		case r := <-results:
			inflight = false
			if errors.Is(r.err, ErrLeaderKeyLost) {
				t.lose(fmt.Errorf("ha: view %d of %s: %w", t.view.Version, t.view.Leader, r.err))
				return
			}
			if r.err != nil {
				if ctx.Err() == nil {
					t.log.Warn("mooncake master could not renew its leader lease; retrying", "view", t.view.Version, "err", r.err)
				}
				retry.Reset(retryDelay(t.ttl) / 2)
				continue
			}
			nd := r.sent.Add(r.valid - leaseMargin(t.ttl))
			t.mu.Lock()
			if nd.After(t.deadline) {
				t.deadline = nd
			}
			d := time.Until(t.deadline)
			t.mu.Unlock()
			timer.Reset(d)
		}
	}
}

// pause stops renewals (a test hook: the process looks stalled to the store).
func (t *term) pause() { t.pauseOnce.Do(func() { close(t.pauseRenewals) }) }

func (t *term) Resign(ctx context.Context) error {
	t.lose(fmt.Errorf("ha: view %d of %s: %w", t.view.Version, t.view.Leader, ErrResigned))
	<-t.loopDone
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	if err := t.resign(ctx); err != nil {
		return fmt.Errorf("ha: resigning view %d: %w", t.view.Version, err)
	}
	return nil
}

// serveMargin is how long a new leader waits after winning before it serves: a margin for
// clock-rate drift and for a deposed leader's late notice, not a whole TTL (package doc,
// "Why a new leader waits only a margin").
func serveMargin(ttl time.Duration) time.Duration { return ttl / 10 }

// waitServe waits serveMargin after winning so the previous leader has stopped. It returns
// nil when the term may serve, the term's error if it was lost meanwhile, or ctx's error.
func (t *term) waitServe(ctx context.Context) error {
	w := time.NewTimer(serveMargin(t.ttl))
	defer w.Stop()
	select {
	case <-w.C:
		if !t.Valid() {
			if err := t.Err(); err != nil {
				return err
			}
			return fmt.Errorf("ha: view %d: %w", t.view.Version, ErrLeaseExpired)
		}
		return nil
	case <-t.lost:
		return t.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retryDelay is the pause between campaign attempts after an error.
func retryDelay(ttl time.Duration) time.Duration {
	d := ttl / 5
	if d < 100*time.Millisecond {
		d = 100 * time.Millisecond
	}
	if d > time.Second {
		d = time.Second
	}
	return d
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// campaigner is what the etcd and Redis electors share: the configuration, the term being
// served, and whether Close was called. Each elector only knows how to win a term in its store.
type campaigner struct {
	cfg ElectorConfig

	mu     sync.Mutex
	cur    *term
	closed bool
}

// stopped returns why a campaign must end now (the elector closed, or ctx ended), or nil.
func (c *campaigner) stopped(ctx context.Context) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return fmt.Errorf("ha: campaign on a closed elector")
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ha: campaign for cluster %q: %w", c.cfg.ClusterID, err)
	}
	return nil
}

// serve takes a term just won: it waits serveMargin (waitServe), then makes t the term this
// elector serves and returns it. (nil, nil): the term was lost meanwhile; campaign again.
func (c *campaigner) serve(ctx context.Context, t *term, log *slog.Logger) (*term, error) {
	log.Info("mooncake master won the election; waiting a clock-drift margin before serving", "view", t.view.Version, "ttl", t.ttl, "margin", serveMargin(t.ttl))
	if err := t.waitServe(ctx); err != nil {
		t.Resign(context.Background())
		if ctx.Err() != nil {
			return nil, fmt.Errorf("ha: campaign for cluster %q: %w", c.cfg.ClusterID, ctx.Err())
		}
		log.Warn("mooncake master lost leadership before serving; standing again", "err", err)
		return nil, nil
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		t.Resign(context.Background())
		return nil, fmt.Errorf("ha: elector closed during campaign")
	}
	c.cur = t
	c.mu.Unlock()
	log.Info("mooncake master is the leader and serving", "view", t.view.Version)
	return t, nil
}

// Close ends the campaign and resigns the term being served, if any.
func (c *campaigner) Close() error {
	c.mu.Lock()
	c.closed = true
	t := c.cur
	c.cur = nil
	c.mu.Unlock()
	if t != nil {
		return t.Resign(context.Background())
	}
	return nil
}
