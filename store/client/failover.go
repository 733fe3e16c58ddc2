package client

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
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
type masterConn struct {
	display string
	grpc    bool               // gRPC instead of the framed RPC (Config.GRPC)
	sec     api.ClientSecurity // TLS and token of every connection, the new leader's too
	watcher *ha.ViewWatcher    // nil for a fixed address

	mu     sync.Mutex
	addr   string
	cc     rpcConn
	closed bool
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
	m := &masterConn{display: address, grpc: cfg.GRPC, sec: sec}
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
	m.watcher = w
	return m, nil
}

// Leader is the address calls currently go to ("" before the first call of an HA client).
func (m *masterConn) Leader() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.addr
}

func (m *masterConn) conn(ctx context.Context) (rpcConn, error) {
	if m.watcher == nil {
		return m.cc, nil
	}
	// Poll the watcher's view rather than wait on its Changes channel: many calls wait at
	// once during a failover and the channel wakes only one of them.
	v := m.watcher.Current()
	for v.Leader == "" {
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, status.Errorf(codes.Unavailable, "no master leads %s: %v", m.display, ctx.Err())
		case <-t.C:
		}
		v = m.watcher.Current()
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
	}
	return m.cc, nil
}

func (m *masterConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	delay := 20 * time.Millisecond
	for {
		cc, err := m.conn(ctx)
		if err == nil {
			actx, cancel := ctx, context.CancelFunc(func() {})
			if m.watcher != nil {
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
		if !retry || ctx.Err() != nil {
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

func (m *masterConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, fmt.Errorf("mooncake store client: the master service has no streaming methods (%s)", method)
}

func (m *masterConn) Close() error {
	m.mu.Lock()
	m.closed = true
	cc := m.cc
	m.cc = nil
	m.mu.Unlock()
	if m.watcher != nil {
		m.watcher.Close()
	}
	if cc != nil {
		return cc.Close()
	}
	return nil
}

// MasterAddress is the master the client talks to now: the configured host:port, or, with an
// HA address, the leader it follows ("" before it found one).
func (c *Client) MasterAddress() string { return c.cc.Leader() }
