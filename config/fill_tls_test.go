package config

import (
	"strings"
	"testing"

	"github.com/mooncake-go/mooncake/store/client"
	"github.com/mooncake-go/mooncake/store/ha"
)

func TestStoreClientSecurityKnobs(t *testing.T) {
	t.Setenv("MC_TLS_CA_FILE", "/ca.pem")
	t.Setenv("MC_TLS_CERT_FILE", "/c.pem")
	t.Setenv("MC_TLS_KEY_FILE", "/k.pem")
	t.Setenv("MC_AUTH_TOKEN", "0123456789abcdef-knob")
	t.Setenv("MC_AUTH_TOKEN_FILE", "")
	got := StoreClient(client.Config{})
	if got.TLS.CAFile != "/ca.pem" || got.TLS.CertFile != "/c.pem" || got.TLS.KeyFile != "/k.pem" || got.HA.TLS != got.TLS {
		t.Errorf("TLS files: %+v / %+v", got.TLS, got.HA.TLS)
	}
	if !got.MasterTLS {
		t.Errorf("MC_STORE_TLS=auto with a CA: no TLS to the master")
	}
	t.Setenv("MC_STORE_TLS", "0")
	if got := StoreClient(client.Config{}); got.MasterTLS || got.TLS.CAFile != "/ca.pem" || got.SecurityError != nil {
		t.Errorf("MC_STORE_TLS=0: %+v", got)
	}
	t.Setenv("MC_STORE_TLS", "maybe")
	if got := StoreClient(client.Config{}); got.SecurityError == nil || !strings.Contains(got.SecurityError.Error(), "MC_STORE_TLS") {
		t.Errorf("MC_STORE_TLS=maybe: %v", got.SecurityError)
	}
	t.Setenv("MC_STORE_TLS", "")
	if got.AuthToken.Secret() != "0123456789abcdef-knob" || got.SecurityError != nil {
		t.Errorf("token: %v %v", got.AuthToken, got.SecurityError)
	}
	if o := HA(ha.Options{}); o.TLS.CAFile != "/ca.pem" {
		t.Errorf("HA TLS: %+v", o.TLS)
	}
	t.Setenv("MC_AUTH_TOKEN", "short")
	if got := StoreClient(client.Config{}); got.AuthToken != nil || got.SecurityError == nil {
		t.Errorf("a bad token is not reported: %v %v", got.AuthToken, got.SecurityError)
	}
}
