package metadata

import (
	"context"
	"github.com/mooncake-go/mooncake/auth"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A metadata server with a token answers only signed requests; a client with the token works
// against it, one without or with another token is refused and changes nothing.
func TestHTTPMetadataServerWithToken(t *testing.T) {
	token, _ := auth.NewToken("0123456789abcdef-metadata-token")
	other, _ := auth.NewToken("another-token-of-enough-length")
	srv := NewHTTPServer(HTTPServerConfig{AuthToken: token})
	hs := httptest.NewServer(srv)
	defer hs.Close()
	ctx := context.Background()

	good, err := OpenWith(hs.URL+"/metadata", Options{AuthToken: token})
	if err != nil {
		t.Fatal(err)
	}
	if err := good.Put(ctx, "seg/a", []byte(`{"v":1}`)); err != nil {
		t.Fatalf("signed put: %v", err)
	}
	if v, err := good.Get(ctx, "seg/a"); err != nil || string(v) != `{"v":1}` {
		t.Fatalf("signed get: %q %v", v, err)
	}
	for what, o := range map[string]Options{"no token": {}, "another token": {AuthToken: other}} {
		bad, err := OpenWith(hs.URL+"/metadata", o)
		if err != nil {
			t.Fatal(err)
		}
		if err := bad.Put(ctx, "seg/a", []byte(`{"v":2}`)); err == nil || !strings.Contains(err.Error(), "401") {
			t.Errorf("put with %s: %v, want 401", what, err)
		}
		if err := bad.Delete(ctx, "seg/a"); err == nil {
			t.Errorf("delete with %s accepted", what)
		}
		if _, err := bad.Get(ctx, "seg/a"); err == nil {
			t.Errorf("get with %s accepted", what)
		}
		if what == "no token" {
			_, err := bad.Get(ctx, "seg/a")
			if err == nil || !strings.Contains(err.Error(), "MC_AUTH_TOKEN") {
				t.Errorf("the refusal does not name MC_AUTH_TOKEN: %v", err)
			}
		}
	}
	// Plain HTTP, as curl would send it.
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		req, _ := http.NewRequest(m, hs.URL+"/metadata?key=seg/a", strings.NewReader("x"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("unsigned %s: %d, want 401", m, resp.StatusCode)
		}
	}
	if v, err := good.Get(ctx, "seg/a"); err != nil || string(v) != `{"v":1}` {
		t.Fatalf("value changed by refused requests: %q %v", v, err)
	}
	if err := good.Delete(ctx, "seg/a"); err != nil {
		t.Fatalf("signed delete: %v", err)
	}
	if keys := srv.Keys(); len(keys) != 0 {
		t.Errorf("keys after delete: %v", keys)
	}
}
