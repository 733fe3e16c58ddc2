package metadata

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/mooncake-go/mooncake/auth"
	"github.com/mooncake-go/mooncake/etcdsec"
)

// P2PHandshake is the connection string that selects direct peer-to-peer handshakes
// instead of a central store.
const P2PHandshake = "P2PHANDSHAKE"

// DefaultTimeout bounds every operation whose context carries no deadline, and the HTTP
// client's requests, as Mooncake's metadata clients do.
const DefaultTimeout = 3 * time.Second

// MaxValueSize is the largest value the HTTP client accepts in a response and the default
// limit on request bodies of HTTPServer.
const MaxValueSize = 64 << 20

const connHelp = `use P2PHANDSHAKE, http://host:port/metadata, etcd://host:port[,host:port] or redis://host:port`

// Open connects to the metadata store named by conn (see the package documentation for the
// accepted forms). For P2PHANDSHAKE it returns (nil, nil): there is no store. Open does not
// wait for the store to answer; the first operation reports a store that is unreachable.
func Open(conn string) (Store, error) { return OpenWith(conn, Options{}) }

// Options are the settings of a metadata store that its connection string may leave out. The
// zero value means none. The package reads no environment: capi/ and cmd/ fill them from the
// knobs named below (package config).
type Options struct {
	RedisPassword string          // Redis password when the URL has none (MC_REDIS_PASSWORD)
	RedisDBIndex  string          // Redis database index when the URL names none, a number >= 0 (MC_REDIS_DB_INDEX)
	AuthToken     *auth.Token     // signs requests to an HTTP metadata server that requires it (nil: the engine's own token, MC_AUTH_TOKEN)
	Etcd          etcdsec.Options // etcd credentials and TLS (MC_ETCD_CONF_FILE, MC_ETCD_TLS_*)
}

// OpenWith is Open with settings the connection string leaves out.
func OpenWith(conn string, o Options) (Store, error) {
	conn = strings.TrimSpace(conn)
	if conn == "" {
		return nil, fmt.Errorf("metadata: empty connection string; %s", connHelp)
	}
	if strings.EqualFold(conn, P2PHandshake) {
		return nil, nil
	}
	scheme, rest, hasScheme := strings.Cut(conn, "://")
	if !hasScheme {
		// A bare "host:port[,host:port]" means etcd, as in Mooncake.
		eps, err := parseHostPorts(conn)
		if err != nil {
			return nil, fmt.Errorf("metadata: connection string %q is not a known form (%s): %w", conn, connHelp, err)
		}
		return openEtcd(eps, o.Etcd)
	}
	switch strings.ToLower(scheme) {
	case "http", "https":
		return openHTTP(conn, o)
	case "etcd":
		eps, err := parseHostPorts(rest)
		if err != nil {
			return nil, fmt.Errorf("metadata: bad etcd connection string %q (want etcd://host:port[,host:port]): %w", conn, err)
		}
		return openEtcd(eps, o.Etcd)
	case "redis", "rediss":
		return openRedis(conn, o)
	default:
		return nil, fmt.Errorf("metadata: unknown scheme %q in connection string %q; %s", scheme, conn, connHelp)
	}
}

// parseHostPorts splits "h:p[,h:p]" and checks that every element is a host with a port.
func parseHostPorts(s string) ([]string, error) {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return nil, fmt.Errorf("empty endpoint in %q", s)
		}
		host, port, err := net.SplitHostPort(part)
		if err != nil {
			return nil, fmt.Errorf("endpoint %q is not host:port: %w", part, err)
		}
		if host == "" {
			return nil, fmt.Errorf("endpoint %q has no host", part)
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			return nil, fmt.Errorf("endpoint %q has an invalid port %q", part, port)
		}
		out = append(out, part)
	}
	return out, nil
}
