package master

import (
	"context"
	"testing"

	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/tlsconf"
	"github.com/mooncake-go/mooncake/store/tlsconf/tlstest"
)

// benchSecurity is the server and client security of each configuration measured.
func benchSecurity(b *testing.B, kind string) (api.ServerSecurity, api.ClientSecurity) {
	switch kind {
	case "open":
		return api.ServerSecurity{}, api.ClientSecurity{}
	case "token":
		return api.ServerSecurity{Token: testToken}, api.ClientSecurity{Token: testToken}
	}
	ca := tlstest.NewCA(b, "bench")
	cert, key := ca.Issue(b, "master", "127.0.0.1")
	stc, err := tlsconf.Server{CertFile: cert, KeyFile: key}.Config()
	if err != nil {
		b.Fatal(err)
	}
	ctc, err := tlsconf.Client{CAFile: ca.CertFile}.Config("")
	if err != nil {
		b.Fatal(err)
	}
	return api.ServerSecurity{TLS: stc, Token: testToken}, api.ClientSecurity{TLS: ctc, Token: testToken}
}

// BenchmarkCall: one framed ExistKey on an established connection (the per-call cost).
func BenchmarkCall(b *testing.B) {
	for _, kind := range []string{"open", "token", "tls+token"} {
		b.Run(kind, func(b *testing.B) {
			ssec, csec := benchSecurity(b, kind)
			_, addr := startSecure(b, ssec)
			f, _ := api.DialFramedSecure(addr, csec)
			defer f.Close()
			c := api.NewMasterClient(f)
			ctx := context.Background()
			for b.Loop() {
				if _, err := c.ExistKey(ctx, &api.KeyRequest{Key: "k"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSetup: a new connection and its first call (the per-connection cost).
func BenchmarkSetup(b *testing.B) {
	for _, kind := range []string{"open", "token", "tls+token"} {
		b.Run(kind, func(b *testing.B) {
			ssec, csec := benchSecurity(b, kind)
			_, addr := startSecure(b, ssec)
			ctx := context.Background()
			for b.Loop() {
				f, _ := api.DialFramedSecure(addr, csec)
				if _, err := api.NewMasterClient(f).ExistKey(ctx, &api.KeyRequest{Key: "k"}); err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
		})
	}
}
