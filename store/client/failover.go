package client

import (
	"context"
	"fmt"
	"log"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/ha"
)

// DefaultClusterID is the cluster a client given an etcd:// or redis:// master address follows
// when Config.ClusterID (MC_STORE_CLUSTER_ID) is empty (the master's default --cluster_id).
const DefaultClusterID = "mooncake_cluster"

// haAttemptTimeout bounds one attempt of an RPC when following an HA leader, so that a call to
// a paused (deposed) leader is retried at the new one before the caller's deadline.
const haAttemptTimeout = 3 * time.Second

// IsHAAddress reports whether a master address names an HA store to find the leader in
// ("etcd://h:p,h:p", "etcds://..." (TLS), "redis://h:p", "rediss://...") rather than a master's host:port.
func IsHAAddress(addr string) bool {
	a := strings.ToLower(strings.TrimSpace(addr))
	return strings.HasPrefix(a, "etcd://") || strings.HasPrefix(a, "etcds://") || strings.HasPrefix(a, "redis://") || strings.HasPrefix(a, "rediss://")
}

// masterConn is the client's connection to the master: a grpc.ClientConnInterface that, for an
// HA address, follows the leader key and re-dials when it changes, and for either kind of
// address retries calls that failed because the master was unreachable or answered
// UNAVAILABLE_IN_CURRENT_STATUS (not the serving leader), until the call's deadline. The
// master's operations are idempotent for a retrying client (a repeated put_start of the same
// client and key returns the same replicas, put_end of a complete key succeeds, re-mounting
// the same segment succeeds), so a call whose reply was lost may safely be sent again.
//
// A client given a master's plain host:port follows the leader too once that master says it
// runs HA (ServiceStatus's HA discovery: see follow). When no master has answered for
// outageAfter, the connection logs it once and fails each call after a single attempt, with
// the attempt's error code (RPC_FAIL, RPC_TIMEOUT), until a master answers again (the
// heartbeat keeps asking every second), which it logs too.
type masterConn struct {
	display string
	grpc    bool                           // gRPC instead of the framed RPC (Config.GRPC)
	sec     api.ClientSecurity             // TLS and token of every connection, the new leader's too
	haOpts  ha.Options                     // how to reach the HA store (Config.HA)
	watcher atomic.Pointer[ha.ViewWatcher] // nil: a fixed address (not, or not yet, following)

	// outageAfter: how long calls keep retrying before the outage is declared (the
	// client's RPCTimeout, so a failover shorter than that costs no call its result).
	outageAfter time.Duration
	// gen counts the calls that failed to reach a master and the leaders followed: a
	// reservation made at another gen is not written (reserve.go).
	gen atomic.Uint64

	mu     sync.Mutex
	addr   string
	cc     rpcConn
	closed bool
	// Outage bookkeeping: failingSince is when the first call or heartbeat failed after the
	// last success (zero while a master answers); down once that lasted outageAfter.
	failingSince time.Time
	down         bool
	lastErr      error
	// A discovery not yet followed (the HA store was unreachable): retried by retryFollow.
	pendingEP, pendingCluster string
	lastFollowTry             time.Time
}

// rpcConn is a connection to one master: the framed RPC (default) or gRPC (MC_STORE_RPC=grpc).
type rpcConn interface {
	grpc.ClientConnInterface
	Close() error
}

// dialRPC connects to the master at addr. Every connection (each framed socket, each gRPC
// (re)connection) runs sec's TLS and token handshakes first, so a client following a new
// leader authenticates to it before its first call.
func dialRPC(addr string, useGRPC bool, sec api.ClientSecurity) (rpcConn, error) {
	if !useGRPC {
		return api.DialFramedSecure(addr, sec)
	}
	return api.DialSecure(addr, sec, dialOpts()...)
}

// security is what cfg brings to master connections: TLS when cfg.MasterTLS, the token when
// MC_AUTH_TOKEN is set.
func security(cfg Config) (api.ClientSecurity, error) {
	sec := api.ClientSecurity{Token: cfg.AuthToken, Self: "store client " + cfg.LocalHostname}
	if cfg.MasterTLS {
		tc, err := cfg.TLS.Config("")
		if err != nil {
			return sec, fmt.Errorf("TLS to the master: %w", err)
		}
		sec.TLS = tc
	}
	return sec, nil
}

func dialOpts() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
		MinConnectTimeout: 2 * time.Second,
	})}
}

func dialMaster(ctx context.Context, cfg Config) (*masterConn, error) {
	address, clusterID := cfg.MasterServerAddress, cfg.ClusterID
	sec, err := security(cfg)
	if err != nil {
		return nil, err
	}
	m := &masterConn{display: address, grpc: cfg.GRPC, sec: sec, haOpts: cfg.HA, outageAfter: cfg.RPCTimeout}
	if m.outageAfter <= 0 {
		m.outageAfter = DefaultRPCTimeout
	}
	if !IsHAAddress(address) {
		cc, err := dialRPC(address, m.grpc, m.sec)
		if err != nil {
			return nil, err
		}
		m.addr, m.cc = address, cc
		return m, nil
	}
	if clusterID == "" {
		clusterID = DefaultClusterID
	}
	m.display = fmt.Sprintf("cluster %q on %s (MC_STORE_CLUSTER_ID)", clusterID, address)
	w, err := ha.WatchView(ctx, address, clusterID, ha.WithOptions(cfg.HA))
	if err != nil {
		return nil, api.Errorf(api.INVALID_PARAMS, "follow the master leader of cluster %q on %s: %v", clusterID, address, err)
	}
	m.watcher.Store(w)
	return m, nil
}

// follow makes a client given a plain host:port follow the leader of the cluster the master
// described in ss (HA discovery), as a client given the etcd:// address does: from then on
// calls go to whichever master leads, and a takeover is followed within the watch's delay. It
// does nothing for an HA address, or when the master runs without HA. When the HA store
// cannot be reached from here it logs that, keeps the plain address, and retryFollow tries
// again.
func (m *masterConn) follow(ctx context.Context, ss *api.ServiceStatusResponse) {
	if ss == nil || ss.HAEndpoints == "" || m.watcher.Load() != nil {
		return
	}
	m.mu.Lock()
	m.pendingEP, m.pendingCluster = ss.HAEndpoints, ss.ClusterID
	m.mu.Unlock()
	m.tryFollow(ctx)
}

// retryFollow retries a pending follow at most every 5 s (the heartbeat calls it).
func (m *masterConn) retryFollow(ctx context.Context) {
	m.mu.Lock()
	due := m.pendingEP != "" && time.Since(m.lastFollowTry) >= 5*time.Second
	m.mu.Unlock()
	if due {
		m.tryFollow(ctx)
	}
}

func (m *masterConn) tryFollow(ctx context.Context) {
	m.mu.Lock()
	ep, cluster, plain := m.pendingEP, m.pendingCluster, m.display
	m.lastFollowTry = time.Now()
	m.mu.Unlock()
	if ep == "" || m.watcher.Load() != nil {
		return
	}
	if cluster == "" {
		cluster = DefaultClusterID
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	w, err := ha.WatchView(wctx, ep, cluster, ha.WithOptions(m.haOpts))
	cancel()
	if err != nil {
		log.Printf("mooncake store client: master %s runs HA (cluster %q on %s) but its leader key cannot be followed from here, so calls stay on %s and a takeover will not be followed: %v", plain, cluster, ep, plain, err)
		return
	}
	m.mu.Lock()
	if m.closed || m.watcher.Load() != nil {
		m.mu.Unlock()
		w.Close()
		return
	}
	m.pendingEP = ""
	m.display = fmt.Sprintf("cluster %q on %s (learned from %s)", cluster, ep, plain)
	m.watcher.Store(w)
	m.mu.Unlock()
	log.Printf("mooncake store client: master %s runs HA: following the leader of cluster %q on %s", plain, cluster, ep)
}

// describe names what the connection follows, for messages.
func (m *masterConn) describe() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.display
}

// Leader is the address calls currently go to ("" before the first call of an HA client).
func (m *masterConn) Leader() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.addr
}

// conn is the connection to the master to call now. wait: when following a cluster with no
// leader at the moment, wait for one until ctx ends (else fail at once).
func (m *masterConn) conn(ctx context.Context, wait bool) (rpcConn, error) {
	w := m.watcher.Load()
	if w == nil {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.cc, nil
	}
	// Poll the watcher's view rather than wait on its Changes channel: many calls wait at
	// once during a failover and the channel wakes only one of them.
	v := w.Current()
	for v.Leader == "" {
		if !wait {
			return nil, status.Errorf(codes.Unavailable, "no master leads %s", m.describe())
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, status.Errorf(codes.Unavailable, "no master leads %s: %v", m.describe(), ctx.Err())
		case <-t.C:
		}
		v = w.Current()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, status.Error(codes.Canceled, "master connection closed")
	}
	if v.Leader != m.addr || m.cc == nil {
		cc, err := dialRPC(v.Leader, m.grpc, m.sec)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "dial master leader %s: %v", v.Leader, err)
		}
		if m.cc != nil {
			m.cc.Close()
		}
		m.addr, m.cc = v.Leader, cc
		m.gen.Add(1)
	}
	return m.cc, nil
}

func (m *masterConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	delay := 20 * time.Millisecond
	once := m.isDown() // declared outage: one attempt, then the error
	for {
		cc, err := m.conn(ctx, !once)
		if err == nil {
			actx, cancel := ctx, context.CancelFunc(func() {})
			if m.watcher.Load() != nil || once {
				actx, cancel = context.WithTimeout(ctx, haAttemptTimeout)
			}
			if rv := reflect.ValueOf(reply); rv.Kind() == reflect.Pointer && !rv.IsNil() {
				rv.Elem().SetZero()
			}
			err = cc.Invoke(actx, method, args, reply, opts...)
			cancel()
		}
		retry := false
		if err != nil {
			switch status.Code(err) {
			case codes.Unavailable:
				// gRPC reports a failed handshake as Unavailable: a refused token or an
				// untrusted certificate does not heal by retrying.
				retry = !api.IsSetupRefusal(err)
			case codes.DeadlineExceeded:
				retry = ctx.Err() == nil // only the attempt timed out
			}
		} else if c, ok := reply.(api.Coded); ok && c.StatusCode() == api.UNAVAILABLE_IN_CURRENT_STATUS {
			retry = true
		}
		if !retry {
			if err == nil || ctx.Err() == nil {
				m.answered() // a master answered (possibly with an error of its own)
			} else {
				m.failed(err)
			}
			return err
		}
		if ctx.Err() != nil || once {
			m.failed(err)
			return err
		}
		m.failed(err)
		if m.isDown() {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			if err == nil {
				return nil // reply holds UNAVAILABLE_IN_CURRENT_STATUS
			}
			return err
		case <-t.C:
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

func (m *masterConn) isDown() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.down
}

// failed records that a call or heartbeat found no serving master; once that has lasted
// outageAfter, the outage is declared and logged, once.
func (m *masterConn) failed(err error) {
	m.gen.Add(1)
	if err == nil {
		err = api.Errorf(api.UNAVAILABLE_IN_CURRENT_STATUS, "no master is serving")
	}
	m.mu.Lock()
	now := time.Now()
	if m.failingSince.IsZero() {
		m.failingSince = now
	}
	m.lastErr = err
	declare := !m.down && now.Sub(m.failingSince) >= m.outageAfter
	if declare {
		m.down = true
	}
	since, display := m.failingSince, m.display
	m.mu.Unlock()
	if declare {
		log.Printf("mooncake store client: no master reachable for %s (%s since %s): calls fail with RPC_FAIL/RPC_TIMEOUT after one attempt until one answers: %v",
			now.Sub(since).Round(time.Millisecond), display, since.Format(time.RFC3339), err)
	}
}

// answered records that a master answered.
func (m *masterConn) answered() {
	m.mu.Lock()
	wasDown, since, display := m.down, m.failingSince, m.display
	m.down, m.failingSince, m.lastErr = false, time.Time{}, nil
	m.mu.Unlock()
	if wasDown {
		log.Printf("mooncake store client: master reachable again (%s) after %s", display, time.Since(since).Round(time.Millisecond))
	}
}

func (m *masterConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, fmt.Errorf("mooncake store client: the master service has no streaming methods (%s)", method)
}

func (m *masterConn) Close() error {
	m.mu.Lock()
	m.closed = true
	cc := m.cc
	m.cc = nil
	m.mu.Unlock()
	if w := m.watcher.Load(); w != nil {
		w.Close()
	}
	if cc != nil {
		return cc.Close()
	}
	return nil
}

// MasterAddress is the master the client talks to now: the configured host:port, or, with an
// HA address, the leader it follows ("" before it found one).
func (c *Client) MasterAddress() string { return c.cc.Leader() }
