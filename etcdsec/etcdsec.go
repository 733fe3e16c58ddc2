package etcdsec

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// Options are the MC_ETCD_* settings (package doc); the zero value changes nothing.
type Options struct {
	ConfFile           string // MC_ETCD_CONF_FILE: username= / password= lines
	CACert             string // MC_ETCD_TLS_CA_CERT: PEM CA of the etcd servers
	ServerName         string // MC_ETCD_TLS_SERVER_NAME: certificate name to verify
	InsecureSkipVerify bool   // MC_ETCD_TLS_INSECURE_SKIP_VERIFY
}

// TLS reports whether the options turn TLS on for every endpoint.
func (o Options) TLS() bool { return o.CACert != "" || o.InsecureSkipVerify }

// Apply sets cfg's credentials and TLS from o. cfg.TLS may already hold the configuration an
// https:// endpoint asked for; o's CA, server name and verification switch then refine it.
func (o Options) Apply(cfg *clientv3.Config) error {
	if o.ConfFile != "" {
		user, pass, err := readConf(o.ConfFile)
		if err != nil {
			return err
		}
		cfg.Username, cfg.Password = user, pass
	}
	if !o.TLS() {
		if o.ServerName != "" && cfg.TLS == nil {
			return fmt.Errorf("MC_ETCD_TLS_SERVER_NAME=%s needs TLS: set MC_ETCD_TLS_CA_CERT (or MC_ETCD_TLS_INSECURE_SKIP_VERIFY=true)", o.ServerName)
		}
		if o.ServerName != "" {
			cfg.TLS = cfg.TLS.Clone()
			cfg.TLS.ServerName = o.ServerName
			cfg.DialOptions = append(cfg.DialOptions, grpc.WithAuthority(o.ServerName))
		}
		return nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.TLS != nil {
		tc = cfg.TLS.Clone()
	}
	if o.CACert != "" {
		pem, err := os.ReadFile(o.CACert)
		if err != nil {
			return fmt.Errorf("MC_ETCD_TLS_CA_CERT: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("MC_ETCD_TLS_CA_CERT=%s holds no PEM certificate", o.CACert)
		}
		tc.RootCAs = pool
	}
	tc.InsecureSkipVerify = o.InsecureSkipVerify
	if o.ServerName != "" {
		tc.ServerName = o.ServerName
		// gRPC's TLS handshake verifies the connection's authority, not tls.Config.ServerName:
		// the override has to be the authority.
		cfg.DialOptions = append(cfg.DialOptions, grpc.WithAuthority(o.ServerName))
	}
	cfg.TLS = tc
	// The client dials an http:// endpoint in plain text whatever its TLS settings: with TLS on,
	// every endpoint is https://.
	eps := make([]string, len(cfg.Endpoints))
	for i, ep := range cfg.Endpoints {
		if rest, ok := strings.CutPrefix(ep, "http://"); ok {
			ep = "https://" + rest
		}
		eps[i] = ep
	}
	cfg.Endpoints = eps
	return nil
}

// readConf reads an MC_ETCD_CONF_FILE: "username=..." and "password=..." lines, '#' lines and
// blank lines ignored; both keys are required and no other key is accepted.
func readConf(file string) (user, pass string, err error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", "", fmt.Errorf("MC_ETCD_CONF_FILE: %w", err)
	}
	var haveUser, havePass bool
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		switch k = strings.TrimSpace(k); {
		case !ok:
			return "", "", fmt.Errorf("MC_ETCD_CONF_FILE=%s line %d: want key=value, got %q", file, n, line)
		case k == "username":
			user, haveUser = strings.TrimSpace(v), true
		case k == "password":
			pass, havePass = strings.TrimSpace(v), true
		default:
			return "", "", fmt.Errorf("MC_ETCD_CONF_FILE=%s line %d: unknown key %q (want username or password)", file, n, k)
		}
	}
	if !haveUser || !havePass || user == "" {
		return "", "", fmt.Errorf("MC_ETCD_CONF_FILE=%s: needs both a username= and a password= line", file)
	}
	return user, pass, nil
}
