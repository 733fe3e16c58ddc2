package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// Server is the master's TLS files. The zero value means no TLS.
type Server struct {
	CertFile string // --tls_cert_file: the master's certificate (chain), PEM
	KeyFile  string // --tls_key_file: its private key, PEM
	CAFile   string // --tls_ca_file: when set, clients must present a certificate signed by one of these CAs
}

// Enabled reports whether any file is set.
func (s Server) Enabled() bool { return s.CertFile != "" || s.KeyFile != "" || s.CAFile != "" }

// Config loads the files: nil, nil when none is set. The configuration offers ALPN "h2" so
// that standard gRPC TLS clients accept it.
func (s Server) Config() (*tls.Config, error) {
	if !s.Enabled() {
		return nil, nil
	}
	if s.CertFile == "" || s.KeyFile == "" {
		return nil, fmt.Errorf("TLS needs both --tls_cert_file and --tls_key_file (got cert %q, key %q)", s.CertFile, s.KeyFile)
	}
	cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls_cert_file=%s / --tls_key_file=%s: %w", s.CertFile, s.KeyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	if s.CAFile != "" {
		pool, err := loadPool(s.CAFile, "--tls_ca_file")
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// Client is a client's TLS files. The zero value means none.
type Client struct {
	CAFile   string // MC_TLS_CA_FILE: CAs trusted for the servers' certificates
	CertFile string // MC_TLS_CERT_FILE: a client certificate for servers that require one
	KeyFile  string // MC_TLS_KEY_FILE: its private key
}

// Config loads the files into a client configuration: the CAs (or, without MC_TLS_CA_FILE,
// the system's roots) and the client certificate when one is set. serverName may be "" (the
// dialled host is used).
func (c Client) Config(serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if c.CAFile != "" {
		pool, err := loadPool(c.CAFile, "MC_TLS_CA_FILE")
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if c.CertFile != "" || c.KeyFile != "" {
		if c.CertFile == "" || c.KeyFile == "" {
			return nil, fmt.Errorf("a client certificate needs both MC_TLS_CERT_FILE and MC_TLS_KEY_FILE (got cert %q, key %q)", c.CertFile, c.KeyFile)
		}
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("MC_TLS_CERT_FILE=%s / MC_TLS_KEY_FILE=%s: %w", c.CertFile, c.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

func loadPool(file, what string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s=%s holds no PEM certificate", what, file)
	}
	return pool, nil
}
