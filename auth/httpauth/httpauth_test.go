package httpauth

import (
	"bytes"
	"github.com/mooncake-go/mooncake/auth"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

var token = mustToken("0123456789abcdef-http-token")

func mustToken(s string) *auth.Token {
	t, err := auth.NewToken(s)
	if err != nil {
		panic(err)
	}
	return t
}

func signed(method, target string, body []byte, tok *auth.Token) *http.Request {
	req := httptest.NewRequest(method, target, bytes.NewReader(body))
	Sign(req, tok, body)
	return req
}

func TestSignVerify(t *testing.T) {
	v := NewVerifier(token)
	req := signed(http.MethodPut, "/metadata?key=a%20b", []byte("value"), token)
	if err := v.Check(req, []byte("value")); err != nil {
		t.Fatalf("good request refused: %v", err)
	}
	if err := v.Check(req, []byte("value")); err == nil || !strings.Contains(err.Error(), "replayed") {
		t.Errorf("replayed request: %v", err)
	}
	for what, tc := range map[string]struct {
		req  *http.Request
		body []byte
	}{
		"wrong token": {signed(http.MethodPut, "/metadata?key=a", []byte("v"), mustToken("another-token-of-enough-length")), []byte("v")},
		"other body":  {signed(http.MethodPut, "/metadata?key=a", []byte("v"), token), []byte("w")},
		"unsigned":    {httptest.NewRequest(http.MethodGet, "/metadata?key=a", nil), nil},
		"garbage header": {func() *http.Request {
			r := httptest.NewRequest("GET", "/x", nil)
			r.Header.Set("Authorization", "MC-HMAC-SHA256 t=1")
			return r
		}(), nil},
	} {
		if err := v.Check(tc.req, tc.body); err == nil {
			t.Errorf("%s accepted", what)
		}
	}
	// The signature covers the method and the key.
	r := signed(http.MethodGet, "/metadata?key=a", nil, token)
	moved := httptest.NewRequest(http.MethodGet, "/metadata?key=b", nil)
	moved.Header.Set("Authorization", r.Header.Get("Authorization"))
	if err := v.Check(moved, nil); err == nil {
		t.Errorf("signature moved to another key accepted")
	}
	del := httptest.NewRequest(http.MethodDelete, "/metadata?key=a", nil)
	del.Header.Set("Authorization", r.Header.Get("Authorization"))
	if err := v.Check(del, nil); err == nil {
		t.Errorf("signature moved to another method accepted")
	}
	// Times beyond Skew are refused.
	old := NewVerifier(token)
	old.now = func() time.Time { return time.Now().Add(Skew + time.Minute) }
	if err := old.Check(signed(http.MethodGet, "/x", nil, token), nil); err == nil || !strings.Contains(err.Error(), "clock") {
		t.Errorf("stale request: %v", err)
	}
}

func TestRequire(t *testing.T) {
	h := Require(NewVerifier(token), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, signed(http.MethodPost, "/x", []byte("body"), token))
	if w.Code != 200 || w.Body.String() != "body" {
		t.Errorf("signed: %d %q", w.Code, w.Body.String())
	}
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/x", strings.NewReader("body")))
	if w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), "MC_AUTH_TOKEN") || w.Header().Get("WWW-Authenticate") != Scheme {
		t.Errorf("unsigned: %d %q", w.Code, w.Body.String())
	}
	w = httptest.NewRecorder()
	Require(nil, h).ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/x", strings.NewReader("body")))
	if w.Code != http.StatusUnauthorized {
		t.Errorf("Require(nil, h) is not h: %d", w.Code)
	}
}

func TestParse(t *testing.T) {
	sig := Signature{Time: 1700000000, Nonce: strings.Repeat("ab", 16), MAC: bytes.Repeat([]byte{7}, 32)}
	got, err := Parse(sig.String())
	if err != nil || got.Time != sig.Time || got.Nonce != sig.Nonce || !bytes.Equal(got.MAC, sig.MAC) {
		t.Fatalf("Parse(String()) = %+v, %v", got, err)
	}
	for _, bad := range []string{"", "Bearer x", "MC-HMAC-SHA256", "MC-HMAC-SHA256 t=1, n=ab, s=cd",
		"MC-HMAC-SHA256 t=1, t=2, n=" + sig.Nonce + ", s=" + strings.Repeat("00", 32),
		"MC-HMAC-SHA256 t=-1, n=" + sig.Nonce + ", s=" + strings.Repeat("00", 32),
		"MC-HMAC-SHA256 t=1, n=" + strings.ToUpper(sig.Nonce) + ", s=" + strings.Repeat("00", 32),
		"MC-HMAC-SHA256 t=1, n=" + sig.Nonce + ", s=" + strings.Repeat("00", 32) + ", x=1"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

// FuzzParse: any header either fails to parse or parses into a signature that formats back
// into a header parsing to the same signature; nothing panics.
func FuzzParse(f *testing.F) {
	f.Add(Signature{Time: 1, Nonce: strings.Repeat("0f", 16), MAC: make([]byte, 32)}.String())
	f.Add("MC-HMAC-SHA256 t=1, n=, s=")
	f.Add("Bearer abc")
	f.Fuzz(func(t *testing.T, h string) {
		sig, err := Parse(h)
		if err != nil {
			return
		}
		again, err := Parse(sig.String())
		if err != nil || again.Time != sig.Time || again.Nonce != sig.Nonce || !bytes.Equal(again.MAC, sig.MAC) {
			t.Fatalf("%q parsed to %+v, which formats to %q: %+v, %v", h, sig, sig.String(), again, err)
		}
	})
}
