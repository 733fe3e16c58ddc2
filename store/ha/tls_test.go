package ha

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/testsvc"
	"github.com/mooncake-go/mooncake/store/tlsconf"
	"github.com/mooncake-go/mooncake/store/tlsconf/tlstest"
)

// A Redis that speaks TLS (rediss://): an HA connection trusting its CA (MC_TLS_CA_FILE) works,
// elects and appends; one trusting another CA does not connect.
func TestRedisTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "redis")
	other := tlstest.NewCA(t, "other")
	cert, key := ca.Issue(t, "redis", "127.0.0.1")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	testsvc.StartRedis(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", cert, "--tls-key-file", key,
		"--tls-ca-cert-file", ca.CertFile, "--tls-auth-clients", "no")
	url := "rediss://127.0.0.1:" + strconv.Itoa(port)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	c, err := DialWith(ctx, url, Options{TLS: tlsconf.Client{CAFile: ca.CertFile}})
	if err != nil {
		t.Fatalf("rediss with the right CA: %v", err)
	}
	defer c.Close()
	if err := c.Redis().Set(ctx, "mooncake-tls-test", "v", 0).Err(); err != nil {
		t.Fatalf("set over TLS: %v", err)
	}
	if v, err := c.Redis().Get(ctx, "mooncake-tls-test").Result(); err != nil || v != "v" {
		t.Fatalf("get over TLS: %q %v", v, err)
	}
	if _, err := DialWith(ctx, url, Options{TLS: tlsconf.Client{CAFile: other.CertFile}}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("rediss trusting another CA: %v, want a certificate error", err)
	}
	if _, err := DialWith(ctx, url, Options{TLS: tlsconf.Client{CAFile: "/nonexistent-ca.pem"}}); err == nil || !strings.Contains(err.Error(), "MC_TLS_CA_FILE") {
		t.Fatalf("missing CA file: %v", err)
	}
}
