package master

import (
	"context"
	"crypto/tls"
	"github.com/mooncake-go/mooncake/auth"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/auth/httpauth"
	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/tlsconf"
	"github.com/mooncake-go/mooncake/store/tlsconf/tlstest"
)

var testToken = mustToken("0123456789abcdef-master-token")

func mustToken(s string) *auth.Token {
	t, err := auth.NewToken(s)
	if err != nil {
		panic(err)
	}
	return t
}

// startSecure serves a master with sec on a real socket and returns it and its address.
func startSecure(t testing.TB, sec api.ServerSecurity) (*Server, string) {
	t.Helper()
	srv := NewServer(DefaultConfig(), WithSecurity(sec))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(ctx, lis); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return srv, lis.Addr().String()
}

// clients returns a framed and a gRPC client of addr with sec.
func clients(t *testing.T, addr string, sec api.ClientSecurity) map[string]*api.MasterClient {
	t.Helper()
	f, err := api.DialFramedSecure(addr, sec)
	if err != nil {
		t.Fatal(err)
	}
	g, err := api.DialSecure(addr, sec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(); g.Close() })
	return map[string]*api.MasterClient{"framed": api.NewMasterClient(f), "grpc": api.NewMasterClient(g)}
}

func ctx5(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// putKey mounts a segment for client id and puts key (size 10) through c.
func putKey(t *testing.T, c *api.MasterClient, id, key string) {
	t.Helper()
	ctx := ctx5(t)
	if st, err := c.MountSegment(ctx, &api.MountSegmentRequest{ClientID: id, Segment: api.Segment{ID: id + "/0", Name: id + ":1", Base: 4096, Size: 1 << 20}}); err != nil || st.Code != api.OK {
		t.Fatalf("mount: %v %+v", err, st)
	}
	if ps, err := c.PutStart(ctx, &api.PutStartRequest{ClientID: id, Key: key, Size: 10, Config: api.ReplicateConfig{ReplicaNum: 1}}); err != nil || ps.Code != api.OK {
		t.Fatalf("put start: %v %+v", err, ps)
	}
	if st, err := c.PutEnd(ctx, &api.KeyRequest{ClientID: id, Key: key}); err != nil || st.Code != api.OK {
		t.Fatalf("put end: %v %+v", err, st)
	}
}

func TestTokenMasterRefusesClientsWithoutItServesClientsWithIt(t *testing.T) {
	var refused []string
	var mu = make(chan struct{}, 1)
	mu <- struct{}{}
	srv, addr := startSecure(t, api.ServerSecurity{Token: testToken, Refused: func(a net.Addr, err error) {
		<-mu
		refused = append(refused, err.Error())
		mu <- struct{}{}
	}})
	good := clients(t, addr, api.ClientSecurity{Token: testToken})
	putKey(t, good["framed"], "c1", "k1")
	putKey(t, good["grpc"], "c2", "k2")

	for name, c := range clients(t, addr, api.ClientSecurity{}) {
		_, err := c.ExistKey(ctx5(t), &api.KeyRequest{Key: "k1"})
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "MC_AUTH_TOKEN") {
			t.Errorf("%s client without a token: %v, want Unauthenticated naming MC_AUTH_TOKEN", name, err)
		}
		_, err = c.RemoveAll(ctx5(t), &api.RemoveAllRequest{ClientID: "x"})
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s client without a token removed keys: %v", name, err)
		}
	}
	for name, c := range clients(t, addr, api.ClientSecurity{Token: mustToken("a-wrong-token-of-enough-length")}) {
		_, err := c.RemoveAll(ctx5(t), &api.RemoveAllRequest{ClientID: "x"})
		if !api.IsSetupRefusal(err) || !strings.Contains(err.Error(), "MC_AUTH_TOKEN") {
			t.Errorf("%s client with a wrong token: %v, want a set-up refusal naming MC_AUTH_TOKEN", name, err)
		}
	}
	// Nothing the refused clients sent reached the state.
	var keys []string
	srv.View(func(st *State) { keys = st.Keys() })
	if strings.Join(keys, ",") != "k1,k2" {
		t.Errorf("keys after refused clients = %v, want [k1 k2]", keys)
	}
	<-mu
	if len(refused) == 0 {
		t.Errorf("no refusal was reported")
	}
	mu <- struct{}{}
	// The admin routes that reveal keys need a signed request; /metrics and /health do not.
	h := srv.AdminHandler()
	for _, p := range []string{"/get_all_keys", "/query_key?key=k1", "/get_all_segments"} {
		if code, _ := do(h, p, nil); code != http.StatusUnauthorized {
			t.Errorf("unsigned %s: %d, want 401", p, code)
		}
		if code, _ := do(h, p, mustToken("a-wrong-token-of-enough-length")); code != http.StatusUnauthorized {
			t.Errorf("%s signed with a wrong token: %d, want 401", p, code)
		}
	}
	if code, body := do(h, "/get_all_keys", testToken); code != 200 || body != "k1\nk2\n" {
		t.Errorf("signed /get_all_keys: %d %q", code, body)
	}
	for _, p := range []string{"/metrics", "/health", "/metrics/summary"} {
		if code, _ := do(h, p, nil); code != 200 {
			t.Errorf("open route %s: %d", p, code)
		}
	}
}

// do runs GET path on h, signed with token when it is set.
func do(h http.Handler, path string, token *auth.Token) (int, string) {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	if token != nil {
		httpauth.Sign(req, token, nil)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	b, _ := io.ReadAll(w.Result().Body)
	return w.Code, string(b)
}

func TestClientWithTokenRefusesMasterWithoutIt(t *testing.T) {
	_, addr := startSecure(t, api.ServerSecurity{})
	for name, c := range clients(t, addr, api.ClientSecurity{Token: testToken}) {
		_, err := c.ServiceStatus(ctx5(t), &api.ServiceStatusRequest{})
		if !api.IsSetupRefusal(err) {
			t.Errorf("%s client with a token against a master without one: %v, want a set-up refusal", name, err)
		}
	}
}

func TestTLSMaster(t *testing.T) {
	ca := tlstest.NewCA(t, "store")
	other := tlstest.NewCA(t, "other")
	cert, key := ca.Issue(t, "master", "127.0.0.1")
	clientCert, clientKey := ca.Issue(t, "client")
	strangerCert, strangerKey := other.Issue(t, "stranger")
	clientTLS := func(cf tlsconf.Client) *tls.Config {
		c, err := cf.Config("")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	t.Run("server-only", func(t *testing.T) {
		stc, err := tlsconf.Server{CertFile: cert, KeyFile: key}.Config()
		if err != nil {
			t.Fatal(err)
		}
		_, addr := startSecure(t, api.ServerSecurity{TLS: stc, Token: testToken})
		for name, c := range clients(t, addr, api.ClientSecurity{TLS: clientTLS(tlsconf.Client{CAFile: ca.CertFile}), Token: testToken}) {
			putKey(t, c, "c-"+name, "k-"+name)
		}
		for name, c := range clients(t, addr, api.ClientSecurity{TLS: clientTLS(tlsconf.Client{CAFile: other.CertFile}), Token: testToken}) {
			_, err := c.ServiceStatus(ctx5(t), &api.ServiceStatusRequest{})
			if !api.IsSetupRefusal(err) || !strings.Contains(err.Error(), "MC_TLS_CA_FILE") {
				t.Errorf("%s client trusting another CA: %v, want a set-up refusal naming MC_TLS_CA_FILE", name, err)
			}
		}
		// A plain-TCP client gets nothing from a TLS master.
		f, _ := api.DialFramedSecure(addr, api.ClientSecurity{Token: testToken})
		defer f.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := api.NewMasterClient(f).ServiceStatus(ctx, &api.ServiceStatusRequest{}); err == nil {
			t.Errorf("plain client served by a TLS master")
		}
	})

	t.Run("client-certificates", func(t *testing.T) {
		stc, err := tlsconf.Server{CertFile: cert, KeyFile: key, CAFile: ca.CertFile}.Config()
		if err != nil {
			t.Fatal(err)
		}
		_, addr := startSecure(t, api.ServerSecurity{TLS: stc})
		for name, c := range clients(t, addr, api.ClientSecurity{TLS: clientTLS(tlsconf.Client{CAFile: ca.CertFile, CertFile: clientCert, KeyFile: clientKey})}) {
			putKey(t, c, "c-"+name, "k-"+name)
		}
		for what, cf := range map[string]tlsconf.Client{
			"no certificate":           {CAFile: ca.CertFile},
			"another CA's certificate": {CAFile: ca.CertFile, CertFile: strangerCert, KeyFile: strangerKey},
		} {
			for name, c := range clients(t, addr, api.ClientSecurity{TLS: clientTLS(cf)}) {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				_, err := c.ServiceStatus(ctx, &api.ServiceStatusRequest{})
				cancel()
				if err == nil {
					t.Errorf("%s client with %s served by a master requiring client certificates", name, what)
				}
			}
		}
	})
}

func TestServerTLSFileErrors(t *testing.T) {
	if _, err := (tlsconf.Server{CertFile: "/nonexistent.pem", KeyFile: "/nonexistent-key.pem"}).Config(); err == nil || !strings.Contains(err.Error(), "--tls_cert_file") {
		t.Errorf("missing files: %v", err)
	}
	if _, err := (tlsconf.Server{CertFile: "a"}).Config(); err == nil || !strings.Contains(err.Error(), "--tls_key_file") {
		t.Errorf("cert without key: %v", err)
	}
	if _, err := (tlsconf.Client{CAFile: "/nonexistent.pem"}).Config(""); err == nil || !strings.Contains(err.Error(), "MC_TLS_CA_FILE") {
		t.Errorf("missing CA: %v", err)
	}
	cfg := DefaultConfig()
	cfg.TLSCAFile = "ca.pem"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--tls_ca_file") {
		t.Errorf("--tls_ca_file alone: %v", err)
	}
}
