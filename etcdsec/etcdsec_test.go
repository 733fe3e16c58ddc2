package etcdsec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfFile(t *testing.T) {
	var cfg clientv3.Config
	f := write(t, "# credentials\n\nusername = mooncake\npassword=s3cr=t\n")
	if err := (Options{ConfFile: f}).Apply(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Username != "mooncake" || cfg.Password != "s3cr=t" || cfg.TLS != nil {
		t.Fatalf("got user %q password %q tls %v", cfg.Username, cfg.Password, cfg.TLS)
	}
	for body, want := range map[string]string{
		"username=a\n":              "needs both",
		"password=b\n":              "needs both",
		"username=a\npassword=b\nx": "want key=value",
		"user=a\npassword=b\n":      `unknown key "user"`,
	} {
		err := (Options{ConfFile: write(t, body)}).Apply(&clientv3.Config{})
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "MC_ETCD_CONF_FILE") {
			t.Errorf("%q: got %v, want an error with %q", body, err, want)
		}
	}
	if err := (Options{ConfFile: "/nonexistent/creds"}).Apply(&clientv3.Config{}); err == nil || !strings.Contains(err.Error(), "MC_ETCD_CONF_FILE") {
		t.Errorf("missing file: %v", err)
	}
}

func TestTLSCombinations(t *testing.T) {
	var cfg clientv3.Config
	if err := (Options{}).Apply(&cfg); err != nil || cfg.TLS != nil {
		t.Fatalf("zero options changed the config: %v %v", err, cfg.TLS)
	}
	err := (Options{ServerName: "etcd.test"}).Apply(&clientv3.Config{})
	if err == nil || !strings.Contains(err.Error(), "MC_ETCD_TLS_SERVER_NAME=etcd.test needs TLS") {
		t.Errorf("server name without TLS: %v", err)
	}
	err = (Options{CACert: write(t, "not a certificate")}).Apply(&clientv3.Config{})
	if err == nil || !strings.Contains(err.Error(), "holds no PEM certificate") {
		t.Errorf("bad CA: %v", err)
	}
	cfg = clientv3.Config{}
	if err := (Options{InsecureSkipVerify: true, ServerName: "etcd.test"}).Apply(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.TLS == nil || !cfg.TLS.InsecureSkipVerify || cfg.TLS.ServerName != "etcd.test" {
		t.Fatalf("insecure TLS: %+v", cfg.TLS)
	}
}
