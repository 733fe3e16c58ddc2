package etcdsec_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/mooncake-go/mooncake/engine/metadata"
	"github.com/mooncake-go/mooncake/etcdsec"
	"github.com/mooncake-go/mooncake/store/ha"
	"github.com/mooncake-go/mooncake/store/tlsconf/tlstest"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// tlsEtcd starts an etcd that serves clients over TLS only (a certificate for etcd.test and
// 127.0.0.1 from a fresh CA) with RBAC on: user root, password "rootpw". It returns the
// client address (host:port, no scheme) and the CA file.
func tlsEtcd(t *testing.T) (addr, caFile string) {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatalf("etcd is not installed (the Debian package etcd-server; make setup installs it): %v", err)
	}
	ca := tlstest.NewCA(t, "etcd-test-ca")
	cert, key := ca.Issue(t, "etcd.test", "etcd.test", "127.0.0.1")
	cport, pport := freePort(t), freePort(t)
	addr = fmt.Sprintf("127.0.0.1:%d", cport)
	dir := t.TempDir()
	cmd := exec.Command(bin, "--name", "tls0", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", "https://"+addr, "--advertise-client-urls", "https://"+addr,
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", pport),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", pport),
		"--initial-cluster", fmt.Sprintf("tls0=http://127.0.0.1:%d", pport),
		"--cert-file", cert, "--key-file", key)
	log, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); log.Close() })
	// Root over TLS (no auth yet): create the user and turn RBAC on.
	cfg := clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if err := (etcdsec.Options{CACert: ca.CertFile}).Apply(&cfg); err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = cli.UserAdd(ctx, "root", "rootpw")
		cancel()
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		out, _ := os.ReadFile(log.Name())
		t.Fatalf("etcd over TLS did not come up: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	return addr, ca.CertFile
}

// TestEtcdTLSAndRBAC runs upstream's MC_ETCD_* settings against a real etcd with TLS and RBAC,
// through both etcd clients of the project: the engine's metadata store (etcd://h:p, a plain
// scheme that the CA alone turns into TLS) and the store's HA backend.
func TestEtcdTLSAndRBAC(t *testing.T) {
	addr, ca := tlsEtcd(t)
	creds := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(creds, []byte("# etcd RBAC\nusername=root\npassword=rootpw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := etcdsec.Options{ConfFile: creds, CACert: ca}
	roundTrip := func(o etcdsec.Options) error {
		st, err := metadata.OpenWith("etcd://"+addr, metadata.Options{Etcd: o})
		if err != nil {
			return err
		}
		defer st.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		defer cancel()
		if err := st.Put(ctx, "mooncake/etcdsec/k", []byte("v1")); err != nil {
			return err
		}
		got, err := st.Get(ctx, "mooncake/etcdsec/k")
		if err != nil {
			return err
		}
		if string(got) != "v1" {
			return fmt.Errorf("got %q", got)
		}
		return nil
	}
	if err := roundTrip(good); err != nil {
		t.Fatalf("TLS + credentials: %v", err)
	}
	if err := roundTrip(etcdsec.Options{ConfFile: creds, CACert: ca, ServerName: "etcd.test"}); err != nil {
		t.Fatalf("TLS + server name etcd.test: %v", err)
	}
	for name, o := range map[string]etcdsec.Options{
		"no credentials":    {CACert: ca},
		"wrong server name": {ConfFile: creds, CACert: ca, ServerName: "other.test"},
		"plain text":        {ConfFile: creds},
	} {
		if err := roundTrip(o); err == nil {
			t.Errorf("%s: the round trip worked; want a refusal", name)
		}
	}
	// The HA backend: a bare host:port endpoint, dialled over TLS with credentials.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := ha.DialWith(ctx, addr, ha.Options{Etcd: good})
	if err != nil {
		t.Fatalf("ha over TLS + RBAC: %v", err)
	}
	defer conn.Close()
	resp, err := conn.Etcd().Get(ctx, "mooncake/etcdsec/k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v1" {
		t.Fatalf("ha read: %v %v", resp, err)
	}
	if _, err := ha.DialWith(ctx, addr, ha.Options{Etcd: etcdsec.Options{ServerName: "etcd.test"}}); err == nil ||
		!strings.Contains(err.Error(), "needs TLS") {
		t.Fatalf("server name without TLS: %v", err)
	}
}
