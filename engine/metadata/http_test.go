package metadata

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// storeContract runs the behaviour every Store must have against st.
func storeContract(t *testing.T, st Store) {
	t.Helper()
	ctx := t.Context()
	prefix := fmt.Sprintf("test-%d/", time.Now().UnixNano())

	t.Run("RoundTrip", func(t *testing.T) {
		key := prefix + "mooncake/ram/seg0"
		val := []byte(`{"name":"seg0","protocol":"tcp","buffers":[{"name":"b","addr":4096,"length":8}]}`)
		if err := st.Put(ctx, key, val); err != nil {
			t.Fatal(err)
		}
		got, err := st.Get(ctx, key)
		if err != nil || !bytes.Equal(got, val) {
			t.Fatalf("Get = %q, %v; want %q", got, err, val)
		}
		val2 := []byte(`{"v":2}`)
		if err := st.Put(ctx, key, val2); err != nil {
			t.Fatal(err)
		}
		if got, err := st.Get(ctx, key); err != nil || !bytes.Equal(got, val2) {
			t.Fatalf("Get after overwrite = %q, %v", got, err)
		}
	})
	t.Run("NotFound", func(t *testing.T) {
		_, err := st.Get(ctx, prefix+"missing")
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get(missing) err = %v; want ErrNotFound", err)
		}
		if !strings.Contains(err.Error(), "missing") {
			t.Errorf("error %q does not name the key", err)
		}
	})
	t.Run("Delete", func(t *testing.T) {
		key := prefix + "del"
		if err := st.Put(ctx, key, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := st.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Get(ctx, key); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get after Delete err = %v; want ErrNotFound", err)
		}
		if err := st.Delete(ctx, key); err != nil {
			t.Fatalf("Delete of a missing key: %v; want nil", err)
		}
	})
	t.Run("SpecialKeysAndValues", func(t *testing.T) {
		keys := []string{
			"mooncake/cluster-1/ram/host:15000",
			"a b+c&d=e?f#g%h",
			"ключ/😀",
			"semi;colon,comma/..//slash",
			strings.Repeat("k", 1000),
		}
		for i, k := range keys {
			k = prefix + k
			val := []byte{0, 1, 2, 255, byte(i), '\n', '"'}
			if err := st.Put(ctx, k, val); err != nil {
				t.Fatalf("Put(%q): %v", k, err)
			}
			got, err := st.Get(ctx, k)
			if err != nil || !bytes.Equal(got, val) {
				t.Fatalf("Get(%q) = %v, %v; want %v", k, got, err, val)
			}
		}
		// Keys that differ only where encoding matters stay distinct.
		if got, err := st.Get(ctx, prefix+"a b c&d=e?f#g%h"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("near-miss key found: %q %v", got, err)
		}
		if err := st.Put(ctx, prefix+"empty-value", nil); err != nil {
			t.Fatal(err)
		}
		if got, err := st.Get(ctx, prefix+"empty-value"); err != nil || len(got) != 0 {
			t.Fatalf("empty value: %q %v", got, err)
		}
	})
	t.Run("EmptyKey", func(t *testing.T) {
		if err := st.Put(ctx, "", []byte("x")); err == nil {
			t.Error("Put with an empty key succeeded")
		}
		if _, err := st.Get(ctx, ""); err == nil || errors.Is(err, ErrNotFound) {
			t.Errorf("Get with an empty key: %v", err)
		}
	})
	t.Run("Concurrent", func(t *testing.T) {
		const workers, each = 8, 25
		var wg sync.WaitGroup
		errc := make(chan error, workers)
		for w := range workers {
			wg.Go(func() {
				for i := range each {
					k := fmt.Sprintf("%sc/%d/%d", prefix, w, i)
					if err := st.Put(ctx, k, []byte(k)); err != nil {
						errc <- err
						return
					}
					if err := st.Put(ctx, prefix+"shared", []byte(k)); err != nil {
						errc <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Fatal(err)
		}
		for w := range workers {
			for i := range each {
				k := fmt.Sprintf("%sc/%d/%d", prefix, w, i)
				if got, err := st.Get(ctx, k); err != nil || string(got) != k {
					t.Fatalf("Get(%q) = %q, %v", k, got, err)
				}
			}
		}
		got, err := st.Get(ctx, prefix+"shared")
		if err != nil || !strings.HasPrefix(string(got), prefix+"c/") {
			t.Fatalf("shared = %q, %v", got, err)
		}
	})
}

func newHTTPPair(t *testing.T, cfg HTTPServerConfig) (*HTTPServer, *httptest.Server, Store) {
	t.Helper()
	srv := NewHTTPServer(cfg)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	st, err := Open(ts.URL + srv.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return srv, ts, st
}

func TestHTTPStore(t *testing.T) {
	_, _, st := newHTTPPair(t, HTTPServerConfig{})
	storeContract(t, st)
}

func TestHTTPStoreCustomPath(t *testing.T) {
	srv, ts, st := newHTTPPair(t, HTTPServerConfig{Path: "/custom/meta"})
	if err := st.Put(t.Context(), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if got := srv.Keys(); len(got) != 1 || got[0] != "k" {
		t.Fatalf("Keys = %q", got)
	}
	// The default path is not served.
	other, _ := Open(ts.URL + "/metadata")
	defer other.Close()
	if _, err := other.Get(t.Context(), "k"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get on the wrong path: %v", err)
	}
}

func TestHTTPServerProtocol(t *testing.T) {
	_, ts, _ := newHTTPPair(t, HTTPServerConfig{MaxValueBytes: 16})
	do := func(method, query, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, ts.URL+"/metadata"+query, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	cases := []struct {
		method, query, body string
		code                int
		bodyHas             string
	}{
		{"GET", "", "", 400, "missing key"},
		{"GET", "?key=", "", 400, "missing key"},
		{"PUT", "?other=1", "x", 400, "missing key"},
		{"DELETE", "", "", 400, "missing key"},
		{"GET", "?key=nope", "", 404, "not found"},
		{"DELETE", "?key=nope", "", 404, "not found"},
		{"PUT", "?key=a%20b", `{"x":1}`, 200, "updated"},
		{"GET", "?key=a+b", "", 200, `{"x":1}`}, // '+' and %20 both mean space
		{"HEAD", "?key=a%20b", "", 200, ""},
		{"PUT", "?key=big", strings.Repeat("x", 17), 413, "too large"},
		{"PUT", "?key=fits", strings.Repeat("x", 16), 200, "updated"},
		{"POST", "?key=a", "x", 405, "method not allowed"},
		{"DELETE", "?key=a%20b", "", 200, "deleted"},
		{"GET", "?key=a%20b", "", 404, ""},
	}
	for _, c := range cases {
		code, body := do(c.method, c.query, c.body)
		if code != c.code || !strings.Contains(body, c.bodyHas) {
			t.Errorf("%s %s: %d %q; want %d containing %q", c.method, c.query, code, body, c.code, c.bodyHas)
		}
	}
	resp, err := http.Get(ts.URL + "/elsewhere?key=a")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("other path: %d", resp.StatusCode)
	}
}

// Keys are trimmed of surrounding white space and a blank key is refused, as upstream's
// Python server; every error is a JSON object labelled application/json.
func TestHTTPServerKeysTrimmedAndJSONErrors(t *testing.T) {
	srv, ts, _ := newHTTPPair(t, HTTPServerConfig{MaxValueBytes: 16})
	do := func(method, query, body string) (int, string, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, ts.URL+"/metadata"+query, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
	}
	want := func(method, query, body string, code int, ctype, answer string) {
		t.Helper()
		c, ct, b := do(method, query, body)
		if c != code || ct != ctype || b != answer {
			t.Errorf("%s %s: %d %q %q; want %d %q %q", method, query, c, ct, b, code, ctype, answer)
		}
	}
	const js, text = "application/json", "text/plain; charset=utf-8"
	missing := `{"error":"missing key parameter: use /metadata?key=<url-encoded key>"}` + "\n"
	for _, m := range []string{"GET", "PUT", "DELETE"} {
		want(m, "?key=%20%20%09", "v", 400, js, missing)
		want(m, "", "v", 400, js, missing)
	}
	want("PUT", "?key=%20%20valid%20%20", "value", 200, text, "metadata updated\n")
	want("GET", "?key=valid", "", 200, js, "value")
	want("GET", "?key=+valid+", "", 200, js, "value")
	if got := srv.Keys(); len(got) != 1 || got[0] != "valid" {
		t.Fatalf("Keys = %q, want [valid]", got)
	}
	want("GET", "?key=nope", "", 404, js, `{"error":"metadata not found"}`+"\n")
	want("DELETE", "?key=nope", "", 404, js, `{"error":"metadata not found"}`+"\n")
	want("PUT", "?key=big", strings.Repeat("x", 17), 413, js, `{"error":"value too large: the limit is 16 bytes"}`+"\n")
	want("POST", "?key=valid", "", 405, js, `{"error":"method not allowed: use GET, PUT or DELETE"}`+"\n")
	want("DELETE", "?key=%20valid", "", 200, text, "metadata deleted\n")
	if got := srv.Keys(); len(got) != 0 {
		t.Fatalf("Keys after delete = %q", got)
	}
}

func TestHTTPClientErrors(t *testing.T) {
	// A server that is not there: a prompt, descriptive error.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	st, err := Open("http://" + addr + "/metadata")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, err = st.Get(t.Context(), "k")
	if err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Get from a missing server: %v", err)
	}

	// A server that answers 500: the status and message come through.
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "disk on fire", http.StatusInternalServerError)
	}))
	defer ts.Close()
	st2, _ := Open(ts.URL + "/metadata")
	defer st2.Close()
	if err := st2.Put(t.Context(), "k", []byte("v")); err == nil || !strings.Contains(err.Error(), "500") || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("Put to a failing server: %v", err)
	}

	// A server that never answers: the caller's deadline (or the 3 s default) ends it.
	hang := make(chan struct{})
	ts2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer ts2.Close()
	defer close(hang)
	st3, _ := Open(ts2.URL + "/metadata")
	defer st3.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := st3.Get(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get from a hanging server: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Get took %v", d)
	}
	start = time.Now()
	if _, err := st3.Get(context.Background(), "k"); err == nil {
		t.Fatal("Get from a hanging server without a deadline succeeded")
	}
	if d := time.Since(start); d < DefaultTimeout-100*time.Millisecond || d > DefaultTimeout+2*time.Second {
		t.Fatalf("default timeout took %v; want about %v", d, DefaultTimeout)
	}
}

// TestForgetEngine: an engine's entries go, under any cluster prefix; other engines' stay,
// including names that merely end alike.
func TestForgetEngine(t *testing.T) {
	s := NewHTTPServer(HTTPServerConfig{})
	put := func(k string) {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest("PUT", "/metadata?key="+url.QueryEscape(k), strings.NewReader("{}")))
		if rec.Code != 200 {
			t.Fatalf("put %s: %d", k, rec.Code)
		}
	}
	for _, k := range []string{"mooncake/ram/h:1", "mooncake/rpc_meta/h:1", "mooncake/c1/ram/h:1", "mooncake/c1/rpc_meta/h:1",
		"mooncake/ram/xh:1", "mooncake/ram/h:10", "mooncake/a/b/ram/h:1", "other/ram/h:1", "mooncake/ram/h:2"} {
		put(k)
	}
	if n := s.ForgetEngine("h:1"); n != 4 {
		t.Fatalf("removed %d entries, want 4", n)
	}
	want := []string{"mooncake/a/b/ram/h:1", "mooncake/ram/h:10", "mooncake/ram/h:2", "mooncake/ram/xh:1", "other/ram/h:1"}
	if got := s.Keys(); !slices.Equal(got, want) {
		t.Fatalf("left %v, want %v", got, want)
	}
	if s.ForgetEngine("") != 0 || s.ForgetEngine("h:1") != 0 {
		t.Fatal("a second forget or an empty name removed something")
	}
}
