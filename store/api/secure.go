package api

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/auth"
)

// Connection security of the master's RPC port (docs/security-store.md).
//
// Both protocols (gRPC and the framed RPC) share one connection set-up, done before either
// speaks, so that what protects one protects the other:
//
//  1. TLS, when the master has a certificate (--tls_cert_file): the client verifies it against
//     its CA bundle (MC_TLS_CA_FILE); with --tls_ca_file the master also requires a client
//     certificate signed by that CA (MC_TLS_CERT_FILE, MC_TLS_KEY_FILE).
//  2. Token authentication, when the master has MC_AUTH_TOKEN: the client sends authMagic and
//     then both sides run the challenge-response of package auth (an HMAC over a nonce from
//     each side; the token never crosses the wire, and the client learns the master has it too).
//     It runs inside TLS when TLS is on.
//  3. The protocol: framedMagic and frames, or gRPC's HTTP/2 preface.
//
// A master with a token refuses a connection that skips step 2: a framed client gets one error
// reply (codes.Unauthenticated, naming MC_AUTH_TOKEN) and is disconnected; a gRPC client's
// calls all fail with that status before any handler runs (gRPC needs its HTTP/2 session to say
// so). A master without a token answers authMagic by closing the connection: a client with a
// token never talks to a master that cannot prove it has the same one.
const authMagic = "MCAUTH1\n"

// setupTimeout bounds a new connection's TLS and authentication handshakes (and its first bytes).
const setupTimeout = framedSniffTimeout

// NeedTokenMessage is what a client without the master's token is told.
const NeedTokenMessage = "mooncake_master requires authentication: set MC_AUTH_TOKEN (or MC_AUTH_TOKEN_FILE) to the master's token in the client's environment"

// ServerSecurity is what the master asks of a new RPC connection. The zero value asks nothing
// (plain TCP, no token): the behaviour of a master without security flags.
type ServerSecurity struct {
	TLS   *tls.Config // nil: plain TCP
	Token *auth.Token // nil: no authentication
	// Refused is told about each connection refused (who, and why); nil: not told. The master
	// logs them, rate-limited.
	Refused func(remote net.Addr, why error)
}

// ClientSecurity is what a client brings to a master connection. The zero value: plain TCP,
// no token.
type ClientSecurity struct {
	TLS   *tls.Config // nil: plain TCP; else ServerName defaults to the address's host
	Token *auth.Token // nil: no authentication
	Self  string      // how the client announces itself in the handshake (for the master's logs)
}

// ConnInfo describes a master connection's security; it is the gRPC peer's AuthInfo on the
// master (peer.FromContext), for gRPC and framed calls alike.
type ConnInfo struct {
	credentials.CommonAuthInfo
	TLS           bool // the connection runs over TLS
	Authenticated bool // the peer proved the token
}

// AuthType implements credentials.AuthInfo.
func (ConnInfo) AuthType() string { return "mooncake" }

// Authenticated reports whether the call in ctx came over a connection that proved the token.
func Authenticated(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	ci, ok := p.AuthInfo.(ConnInfo)
	return ok && ci.Authenticated
}

// RequireAuthenticated is the master's check before a handler: codes.Unauthenticated with
// NeedTokenMessage unless the call's connection proved the token.
func RequireAuthenticated(ctx context.Context) error {
	if Authenticated(ctx) {
		return nil
	}
	return status.Error(codes.Unauthenticated, NeedTokenMessage)
}

// ---- server side ----

// setupServer runs steps 1 and 2 on an accepted connection and reads the protocol's first
// len(framedMagic) bytes. It returns the connection to go on with, those bytes (fewer at EOF),
// and its ConnInfo; an error means the connection must be dropped.
func (sec ServerSecurity) setupServer(c net.Conn) (net.Conn, []byte, ConnInfo, error) {
	var info ConnInfo
	info.SecurityLevel = credentials.NoSecurity
	deadline := time.Now().Add(setupTimeout)
	c.SetDeadline(deadline)
	if sec.TLS != nil {
		tc := tls.Server(c, sec.TLS)
		if err := tc.Handshake(); err != nil {
			return nil, nil, info, fmt.Errorf("TLS handshake: %w", err)
		}
		c, info.TLS, info.SecurityLevel = tc, true, credentials.PrivacyAndIntegrity
	}
	head := make([]byte, len(framedMagic))
	n, err := io.ReadFull(c, head)
	if err == nil && string(head) == authMagic {
		if sec.Token == nil {
			return nil, nil, info, errors.New("the client has an MC_AUTH_TOKEN but this master has none")
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		_, err := auth.Server(ctx, c, []*auth.Token{sec.Token}, "mooncake_master")
		cancel()
		if err != nil {
			return nil, nil, info, err
		}
		info.Authenticated = true
		c.SetDeadline(deadline) // auth.Server cleared it
		n, err = io.ReadFull(c, head)
	}
	c.SetDeadline(time.Time{})
	if n == 0 {
		if err == nil {
			err = io.EOF
		}
		return nil, nil, info, err
	}
	if sec.Token == nil {
		info.Authenticated = true // nothing to prove
	}
	return c, head[:n], info, nil
}

// serverCreds hands gRPC the ConnInfo the listener established (the connection is already
// secured: see FramedListener).
type serverCreds struct{}

func (serverCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("mooncake server credentials cannot dial")
}

func (serverCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if pc, ok := c.(*prefixConn); ok {
		return c, pc.info, nil
	}
	// Not from a FramedListener: nothing was checked.
	return c, ConnInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
}

func (serverCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "mooncake"}
}
func (c serverCreds) Clone() credentials.TransportCredentials { return c }
func (serverCreds) OverrideServerName(string) error           { return nil }

// ServerCreds is the gRPC server option a master serving through a FramedListener needs so
// that calls carry their connection's ConnInfo (see Authenticated).
func ServerCreds() grpc.ServerOption { return grpc.Creds(serverCreds{}) }

// ---- client side ----

// enabled reports whether the client does anything beyond plain TCP.
func (sec ClientSecurity) enabled() bool { return sec.TLS != nil || sec.Token != nil }

// errSetupRefused marks a connection the master's security refused (or that failed ours): a
// token or certificate mismatch, which retrying does not heal.
var errSetupRefused = errors.New("connection set-up refused")

// IsSetupRefusal reports whether err (from a call or a dial, framed or gRPC) is a master
// connection refused by the TLS or token set-up: a configuration mismatch to report, not a
// failure to retry.
func IsSetupRefusal(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, errSetupRefused) || status.Code(err) == codes.Unauthenticated {
		return true
	}
	return strings.Contains(err.Error(), errSetupRefused.Error())
}

// isAuthRefusal reports whether a handshake error is a token mismatch (ours, the master's, or
// a master without a token) rather than a broken connection.
func isAuthRefusal(err error) bool {
	return errors.Is(err, auth.ErrRefused) || errors.Is(err, auth.ErrBadProof) || errors.Is(err, auth.ErrNoHandshake)
}

// tlsRefusal reports whether a TLS handshake error is a mismatch (untrusted certificate, a
// server not speaking TLS, a refused client certificate) rather than a broken connection.
func tlsRefusal(err error) bool {
	var cv *tls.CertificateVerificationError
	var rh tls.RecordHeaderError
	var alert tls.AlertError
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	return errors.As(err, &cv) || errors.As(err, &rh) || errors.As(err, &alert) || errors.As(err, &ua) ||
		errors.As(err, &hn) || errors.As(err, &ci) || strings.Contains(err.Error(), "remote error: tls")
}

// setupClient runs steps 1 and 2 on a connection dialled to addr. On error c is closed.
func (sec ClientSecurity) setupClient(ctx context.Context, c net.Conn, addr string) (net.Conn, error) {
	if !sec.enabled() {
		return c, nil
	}
	d, ok := ctx.Deadline()
	if !ok || time.Until(d) > setupTimeout {
		d = time.Now().Add(setupTimeout)
	}
	c.SetDeadline(d)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if sec.TLS != nil {
		cfg := sec.TLS
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				host = addr
			}
			cfg.ServerName = host
		}
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			if tlsRefusal(err) && ctx.Err() == nil {
				return nil, fmt.Errorf("master %s: %w: TLS: %v (does MC_TLS_CA_FILE hold the CA that signed the master's --tls_cert_file, and does the master want a client certificate: MC_TLS_CERT_FILE?)", addr, errSetupRefused, err)
			}
			return nil, fmt.Errorf("TLS handshake with master %s: %w", addr, err)
		}
		c = tc
	}
	if sec.Token != nil {
		if _, err := io.WriteString(c, authMagic); err != nil {
			c.Close()
			return nil, fmt.Errorf("authenticate to master %s: %w", addr, err)
		}
		hctx, cancel := context.WithDeadline(ctx, d)
		self := sec.Self
		if self == "" {
			self = "store client"
		}
		_, err := auth.Client(hctx, c, sec.Token, self)
		cancel()
		if err != nil {
			c.Close()
			if isAuthRefusal(err) && ctx.Err() == nil {
				hint := ""
				if !strings.Contains(err.Error(), "MC_AUTH_TOKEN") {
					hint = "; set the same MC_AUTH_TOKEN on the master and its clients"
				}
				return nil, fmt.Errorf("master %s refused: %w: %v%s", addr, errSetupRefused, err, hint)
			}
			return nil, fmt.Errorf("authenticate to master %s: %w", addr, err)
		}
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// clientCreds runs the client's set-up inside gRPC's dial, so that gRPC re-runs it on every
// (re)connection.
type clientCreds struct{ sec ClientSecurity }

func (cc clientCreds) ClientHandshake(ctx context.Context, authority string, c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	sc, err := cc.sec.setupClient(ctx, c, authority)
	if err != nil {
		return nil, nil, err
	}
	info := ConnInfo{TLS: cc.sec.TLS != nil, Authenticated: cc.sec.Token != nil}
	info.SecurityLevel = credentials.NoSecurity
	if info.TLS {
		info.SecurityLevel = credentials.PrivacyAndIntegrity
	}
	return sc, info, nil
}

func (clientCreds) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("mooncake client credentials cannot serve")
}

func (cc clientCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "mooncake"}
}
func (cc clientCreds) Clone() credentials.TransportCredentials { return cc }
func (clientCreds) OverrideServerName(string) error            { return nil }

// DialSecure is Dial over a connection secured as sec says (TLS, token; see ClientSecurity).
func DialSecure(addr string, sec ClientSecurity, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	if !sec.enabled() {
		return Dial(addr, extra...)
	}
	return Dial(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(clientCreds{sec})}, extra...)...)
}
