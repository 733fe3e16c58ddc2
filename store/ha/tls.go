package ha

import "crypto/tls"

// tlsConfig is used for rediss:// endpoints: system roots, TLS 1.2 or later.
func tlsConfig() *tls.Config { return &tls.Config{MinVersion: tls.VersionTLS12} }
