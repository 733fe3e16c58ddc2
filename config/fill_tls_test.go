package config

import (
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
	if got.AuthToken.Secret() != "0123456789abcdef-knob" || got.AuthTokenError != nil {
		t.Errorf("token: %v %v", got.AuthToken, got.AuthTokenError)
	}
	if o := HA(ha.Options{}); o.TLS.CAFile != "/ca.pem" {
		t.Errorf("HA TLS: %+v", o.TLS)
	}
	t.Setenv("MC_AUTH_TOKEN", "short")
	if got := StoreClient(client.Config{}); got.AuthToken != nil || got.AuthTokenError == nil {
		t.Errorf("a bad token is not reported: %v %v", got.AuthToken, got.AuthTokenError)
	}
}
