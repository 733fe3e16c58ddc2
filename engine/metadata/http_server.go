package metadata

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/mooncake-go/mooncake/auth"
	"github.com/mooncake-go/mooncake/auth/httpauth"
)

// DefaultHTTPPath is where HTTPServer answers when HTTPServerConfig.Path is empty.
const DefaultHTTPPath = "/metadata"

// HTTPServerConfig configures an HTTPServer. The zero value serves DefaultHTTPPath with
// values up to MaxValueSize bytes.
type HTTPServerConfig struct {
	Path          string // URL path to answer on; "" means DefaultHTTPPath
	MaxValueBytes int64  // largest PUT body accepted (413 beyond it); <= 0 means MaxValueSize
	// AuthToken, when set (MC_AUTH_TOKEN), is required of every request: GET, PUT and DELETE
	// must carry its signature (package auth/httpauth), else 401. Reads are covered too: the
	// values are segment descriptors, the map of every engine's registered memory.
	AuthToken *auth.Token
}

// HTTPServer is an in-memory HTTP metadata server (GET|PUT|DELETE <path>?key=<key>).
// It is an http.Handler, safe for concurrent use; mount it on any mux or serve it alone.
// Requests for other paths get 404. The key is trimmed of surrounding ASCII white space and a
// blank one gets 400, as upstream's Python server; errors are JSON objects {"error": "..."}
// (application/json, as upstream's error answers are labelled).
type HTTPServer struct {
	path     string
	maxBody  int64
	verifier *httpauth.Verifier // nil: no token

	mu sync.RWMutex
	kv map[string][]byte
}

// NewHTTPServer returns an empty server.
func NewHTTPServer(cfg HTTPServerConfig) *HTTPServer {
	if cfg.Path == "" {
		cfg.Path = DefaultHTTPPath
	}
	if cfg.MaxValueBytes <= 0 {
		cfg.MaxValueBytes = MaxValueSize
	}
	s := &HTTPServer{path: cfg.Path, maxBody: cfg.MaxValueBytes, kv: make(map[string][]byte)}
	s.verifier = httpauth.NewVerifier(cfg.AuthToken)
	return s
}

// Path is the URL path the server answers on.
func (s *HTTPServer) Path() string { return s.path }

// Keys returns the stored keys, sorted (for diagnostics and tests).
func (s *HTTPServer) Keys() []string {
	s.mu.RLock()
	keys := make([]string, 0, len(s.kv))
	for k := range s.kv {
		keys = append(keys, k)
	}
	s.mu.RUnlock()
	sort.Strings(keys)
	return keys
}

func (s *HTTPServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != s.path {
		writeError(w, http.StatusNotFound, fmt.Sprintf("not found: the metadata server answers on %s", s.path))
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete:
	default:
		w.Header().Set("Allow", "GET, HEAD, PUT, DELETE")
		writeError(w, http.StatusMethodNotAllowed, "method not allowed: use GET, PUT or DELETE")
		return
	}
	if s.verifier != nil && r.Method != http.MethodPut {
		if err := s.verifier.Check(r, nil); err != nil {
			httpauth.Refuse(w, err)
			return
		}
	}
	key := strings.Trim(r.URL.Query().Get("key"), keySpace)
	if key == "" {
		writeError(w, http.StatusBadRequest, "missing key parameter: use "+s.path+"?key=<url-encoded key>")
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		s.mu.RLock()
		v, ok := s.kv[key]
		s.mu.RUnlock()
		if !ok {
			writeError(w, http.StatusNotFound, "metadata not found")
			return
		}
		// Values are never changed in place (PUT stores a fresh slice), so v may be
		// written without the lock.
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(v)))
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			_, _ = w.Write(v)
		}
	case http.MethodPut:
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("value too large: the limit is %d bytes", s.maxBody))
				return
			}
			writeError(w, http.StatusBadRequest, "reading request body: "+err.Error())
			return
		}
		if s.verifier != nil {
			// The signature covers the body: check it before anything is stored.
			if err := s.verifier.Check(r, body); err != nil {
				httpauth.Refuse(w, err)
				return
			}
		}
		s.mu.Lock()
		s.kv[key] = body
		s.mu.Unlock()
		writeText(w, "metadata updated")
	case http.MethodDelete:
		s.mu.Lock()
		_, ok := s.kv[key]
		delete(s.kv, key)
		s.mu.Unlock()
		if !ok {
			writeError(w, http.StatusNotFound, "metadata not found")
			return
		}
		writeText(w, "metadata deleted")
	}
}

// ForgetEngine removes the entries a transfer engine named name registered: its segment
// descriptor (mooncake/[cluster/]ram/<name>) and RPC endpoint (mooncake/[cluster/]rpc_meta/<name>),
// under any cluster prefix. It returns how many it removed. The master calls it for a client
// that timed out (--enable_metadata_cleanup_on_timeout), whose engine can no longer do it.
func (s *HTTPServer) ForgetEngine(name string) int {
	if name == "" {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k := range s.kv {
		rest, ok := strings.CutPrefix(k, "mooncake/")
		if !ok {
			continue
		}
		for _, kind := range []string{"ram/", "rpc_meta/"} {
			// <kind><name> directly, or <cluster>/<kind><name>
			if rest == kind+name || (strings.HasSuffix(rest, "/"+kind+name) && !strings.Contains(strings.TrimSuffix(rest, "/"+kind+name), "/")) {
				delete(s.kv, k)
				n++
				break
			}
		}
	}
	return n
}

// keySpace is the white space trimmed off a request's key (ASCII's; the Python server's too).
const keySpace = " \t\n\r\v\f"

// writeError answers status with {"error": msg} (and a newline), as application/json.
func writeError(w http.ResponseWriter, status int, msg string) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b) // compact, a newline after, '<' and '>' as they are
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]string{"error": msg})
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

func writeText(w http.ResponseWriter, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, msg+"\n")
}
