package ha

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/mooncake-go/mooncake/etcdsec"
	"github.com/mooncake-go/mooncake/store/tlsconf"
)

// Kind is the store behind HA.
type Kind string

const (
	KindEtcd  Kind = "etcd"
	KindRedis Kind = "redis"
)

// DefaultTimeout bounds one request to etcd or Redis when the caller's context has no
// deadline.
const DefaultTimeout = 5 * time.Second

// Endpoints is a parsed endpoint string.
type Endpoints struct {
	Kind Kind
	// Addrs are the servers: for etcd client URLs ("http://h:p"), for Redis "h:p".
	Addrs []string
	// Redis only.
	Username, Password string
	DB                 int
	// TLS: rediss:// (Redis) or https:// / etcds:// (etcd); the CAs and client certificate
	// come from Options.TLS.
	TLS bool
	// TLSFiles are the client's TLS files (Options.TLS), used when TLS is set.
	TLSFiles tlsconf.Client
	// Etcd are the MC_ETCD_* settings (Options.Etcd) an etcd connection applies.
	Etcd etcdsec.Options
}

func (e Endpoints) String() string {
	return string(e.Kind) + " at " + strings.Join(e.Addrs, ",")
}

// ParseEndpoints parses the forms Mooncake accepts, separated by ';' or ',':
//
//	http://h:p;http://h:p    etcd (the --etcd_endpoints form)
//	etcd://h:p,h:p           etcd (the client form)
//	h:p                      etcd
//	https://h:p;https://h:p  etcd over TLS (also etcds://h:p,h:p)
//	redis://[user:password@]h:p[/db][;redis://h:p]   Redis; several addresses mean Redis Cluster
//	rediss://...             Redis over TLS
//
// Options (MC_REDIS_PASSWORD and MC_REDIS_DB_INDEX, filled by the caller) do not apply: see
// ParseEndpointsWith.
func ParseEndpoints(s string) (Endpoints, error) { return ParseEndpointsWith(s, Options{}) }

// Options are settings of the HA store that its address may leave out. The zero value means
// none. The package reads no environment: capi/ and cmd/ fill them from the knobs named below
// (package config).
type Options struct {
	RedisPassword string // Redis password when the URLs give none (MC_REDIS_PASSWORD)
	RedisDBIndex  string // Redis database when the URLs name none, a number >= 0 (MC_REDIS_DB_INDEX)
	// TLS files for https:// / etcds:// and rediss:// endpoints (MC_TLS_CA_FILE: the CAs the
	// server's certificate must chain to, default the system's; MC_TLS_CERT_FILE and
	// MC_TLS_KEY_FILE: a client certificate for servers that require one).
	TLS tlsconf.Client
	// Etcd: credentials and TLS of etcd endpoints under upstream's names (MC_ETCD_CONF_FILE,
	// MC_ETCD_TLS_*); with MC_ETCD_TLS_CA_CERT set, etcd:// endpoints are dialled over TLS too.
	Etcd etcdsec.Options
}

// ParseEndpointsWith is ParseEndpoints where o's Redis password and database apply when the
// URLs give none.
func ParseEndpointsWith(s string, o Options) (Endpoints, error) {
	raw := strings.Trim(strings.TrimSpace(s), `"'`)
	if raw == "" {
		return Endpoints{}, fmt.Errorf("ha: no endpoints given (want e.g. \"http://127.0.0.1:2379\" or \"redis://127.0.0.1:6379\")")
	}
	ep := Endpoints{TLSFiles: o.TLS, Etcd: o.Etcd}
	dbSet := false
	etcdTLS := map[bool]bool{}
	for _, item := range strings.FieldsFunc(raw, func(r rune) bool { return r == ';' || r == ',' || r == ' ' }) {
		kind, addr := KindEtcd, item
		scheme, rest, hasScheme := strings.Cut(item, "://")
		if hasScheme {
			switch strings.ToLower(scheme) {
			case "etcd", "http":
				addr = "http://" + rest
				etcdTLS[false] = true
			case "etcds", "https":
				addr = "https://" + rest
				etcdTLS[true] = true
			case "redis", "rediss":
				kind = KindRedis
			default:
				return Endpoints{}, fmt.Errorf("ha: endpoint %q has unknown scheme %q (want http://, etcd:// or redis://)", item, scheme)
			}
		} else if ep.Kind == KindRedis {
			// "redis://h:p,h:p": later bare addresses belong to the Redis list.
			kind = KindRedis
			addr = "redis://" + item
		} else if ep.TLS {
			// "etcds://h:p,h:p": later bare addresses are TLS too.
			addr = "https://" + item
		} else {
			addr = "http://" + item
			etcdTLS[false] = true
		}
		if ep.Kind != "" && ep.Kind != kind {
			return Endpoints{}, fmt.Errorf("ha: endpoints %q mix etcd and Redis", raw)
		}
		ep.Kind = kind
		if kind == KindEtcd {
			u, err := url.Parse(addr)
			if err != nil || u.Path != "" && u.Path != "/" {
				return Endpoints{}, fmt.Errorf("ha: bad etcd endpoint %q (want host:port)", item)
			}
			if err := checkHostPort(u.Host); err != nil {
				return Endpoints{}, fmt.Errorf("ha: bad etcd endpoint %q: %w", item, err)
			}
			if len(etcdTLS) > 1 {
				return Endpoints{}, fmt.Errorf("ha: endpoints %q mix TLS (https://, etcds://) and plain (http://, etcd://) etcd servers", raw)
			}
			ep.TLS = u.Scheme == "https"
			ep.Addrs = append(ep.Addrs, u.Scheme+"://"+u.Host)
			continue
		}
		u, err := url.Parse(addr)
		if err != nil {
			return Endpoints{}, fmt.Errorf("ha: bad Redis endpoint (want redis://[:password@]host:port[/db]): %w", err)
		}
		if err := checkHostPort(u.Host); err != nil {
			return Endpoints{}, fmt.Errorf("ha: bad Redis endpoint %q: %w", u.Redacted(), err)
		}
		ep.Addrs = append(ep.Addrs, u.Host)
		ep.TLS = ep.TLS || u.Scheme == "rediss"
		if u.User != nil {
			if pw, ok := u.User.Password(); ok && ep.Password == "" {
				ep.Username, ep.Password = u.User.Username(), pw
			}
		}
		if p := strings.Trim(u.Path, "/"); p != "" {
			db, err := strconv.Atoi(p)
			if err != nil || db < 0 {
				return Endpoints{}, fmt.Errorf("ha: Redis endpoint %q: %q is not a database index", u.Redacted(), p)
			}
			ep.DB, dbSet = db, true
		}
	}
	if ep.Kind == KindRedis {
		if ep.Password == "" {
			ep.Password = o.RedisPassword
		}
		if !dbSet {
			if s := strings.TrimSpace(o.RedisDBIndex); s != "" {
				db, err := strconv.Atoi(s)
				if err != nil || db < 0 {
					return Endpoints{}, fmt.Errorf("ha: MC_REDIS_DB_INDEX=%q is not a database index (a number >= 0)", s)
				}
				ep.DB = db
			}
		}
		if len(ep.Addrs) > 1 && ep.DB != 0 {
			return Endpoints{}, fmt.Errorf("ha: Redis Cluster (several addresses) has only database 0, not %d", ep.DB)
		}
	}
	return ep, nil
}

func checkHostPort(hp string) error {
	host, port, err := net.SplitHostPort(hp)
	if err != nil || host == "" {
		return fmt.Errorf("want host:port, got %q", hp)
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return nil
}

// Conn is a connection to the HA store; its Elector, OpLog and ViewWatcher share it.
type Conn struct {
	ep    Endpoints
	etcd  *clientv3.Client
	redis redis.UniversalClient
}

// Dial parses endpoints (see ParseEndpoints), connects, and checks that the store answers.
func Dial(ctx context.Context, endpoints string) (*Conn, error) {
	return DialWith(ctx, endpoints, Options{})
}

// DialWith is Dial with settings the endpoints leave out (ParseEndpointsWith).
func DialWith(ctx context.Context, endpoints string, o Options) (*Conn, error) {
	ep, err := ParseEndpointsWith(endpoints, o)
	if err != nil {
		return nil, err
	}
	return DialEndpoints(ctx, ep)
}

// DialEndpoints connects to already parsed endpoints.
func DialEndpoints(ctx context.Context, ep Endpoints) (*Conn, error) {
	c := &Conn{ep: ep}
	switch ep.Kind {
	case KindEtcd:
		var tc *tls.Config
		if ep.TLS {
			var err error
			if tc, err = ep.TLSFiles.Config(""); err != nil {
				return nil, fmt.Errorf("ha: TLS to %s: %w", ep, err)
			}
		}
		cfg := clientv3.Config{
			TLS:                  tc,
			Endpoints:            ep.Addrs,
			DialTimeout:          DefaultTimeout,
			DialKeepAliveTime:    2 * time.Second,
			DialKeepAliveTimeout: 2 * time.Second,
			Logger:               zap.NewNop(),
			Context:              context.Background(),
		}
		if err := ep.Etcd.Apply(&cfg); err != nil {
			return nil, fmt.Errorf("ha: etcd %s: %w", ep, err)
		}
		cli, err := clientv3.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("ha: connecting to %s: %w", ep, err)
		}
		c.etcd = cli
	case KindRedis:
		opts := &redis.UniversalOptions{
			Addrs: ep.Addrs, Username: ep.Username, Password: ep.Password, DB: ep.DB,
			DialTimeout: DefaultTimeout, ReadTimeout: DefaultTimeout, WriteTimeout: DefaultTimeout,
			DisableIdentity:          true,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		}
		if ep.TLS {
			tc, err := ep.TLSFiles.Config("")
			if err != nil {
				return nil, fmt.Errorf("ha: TLS to %s: %w", ep, err)
			}
			opts.TLSConfig = tc
		}
		c.redis = redis.NewUniversalClient(opts)
	default:
		return nil, fmt.Errorf("ha: unknown store kind %q", ep.Kind)
	}
	pctx, cancel := withTimeout(ctx)
	defer cancel()
	if err := c.ping(pctx); err != nil {
		c.Close()
		hint := ""
		if ep.TLS {
			// etcd's client reports an untrusted certificate as a timeout.
			hint = " (over TLS: is its certificate signed by a CA in MC_TLS_CA_FILE, and does it want a client certificate: MC_TLS_CERT_FILE/MC_TLS_KEY_FILE?)"
		}
		return nil, fmt.Errorf("ha: %s does not answer%s: %w", ep, hint, err)
	}
	return c, nil
}

func (c *Conn) ping(ctx context.Context) error {
	if c.etcd != nil {
		_, err := c.etcd.Get(ctx, "mooncake-store/ping", clientv3.WithCountOnly())
		return err
	}
	return c.redis.Ping(ctx).Err()
}

// Kind says which store this is.
func (c *Conn) Kind() Kind { return c.ep.Kind }

// Endpoints returns the parsed endpoints.
func (c *Conn) Endpoints() Endpoints { return c.ep }

// Etcd returns the etcd client (nil for Redis).
func (c *Conn) Etcd() *clientv3.Client { return c.etcd }

// Redis returns the Redis client (nil for etcd).
func (c *Conn) Redis() redis.UniversalClient { return c.redis }

// Close closes the connection. Leaderships made from it stop renewing and lose their
// lease when it expires (Close does not resign them: call Resign for a clean handover).
func (c *Conn) Close() error {
	var err error
	if c.etcd != nil {
		err = c.etcd.Close()
	}
	if c.redis != nil {
		err = c.redis.Close()
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("ha: closing connection to %s: %w", c.ep, err)
	}
	return nil
}

func withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, DefaultTimeout)
}

// ClientForm is the endpoint string a client follows the view with ("etcd://h:p,h:p",
// "etcds://...", "redis://h:p/db", "rediss://..."), without any password: a master hands it to
// clients that were given its plain address (store/api ServiceStatusResponse.HAEndpoints).
// A Redis password stays with the client (MC_REDIS_PASSWORD).
func (e Endpoints) ClientForm() string {
	hosts := make([]string, 0, len(e.Addrs))
	for _, a := range e.Addrs {
		if _, rest, ok := strings.Cut(a, "://"); ok {
			a = rest
		}
		hosts = append(hosts, a)
	}
	scheme := string(e.Kind)
	if e.TLS {
		scheme += "s"
	}
	s := scheme + "://" + strings.Join(hosts, ",")
	if e.Kind == KindRedis && e.DB != 0 {
		s += "/" + strconv.Itoa(e.DB)
	}
	return s
}
