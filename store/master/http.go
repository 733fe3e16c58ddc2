package master

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/mooncake-go/mooncake/auth/httpauth"
	"github.com/mooncake-go/mooncake/store/api"
)

// AdminHandler serves the master's admin HTTP API (the --metrics_port listener):
//
//	/metrics            Prometheus text exposition (mooncake_master_*)
//	/metrics/summary    a short plain-text summary
//	/health             JSON {"status":"ok","role":...,"leader":...,"cluster_id":...}
//	/get_all_keys       complete keys, one per line
//	/query_key?key=K    JSON description of K (404 when unknown)
//	/get_all_segments   mounted segments, one engine segment name per line (?format=json for details)
//
// With a token (WithSecurity), the routes that reveal keys or segments (/get_all_keys,
// /query_key, /get_all_segments) answer only requests signed with it (package auth/httpauth);
// /metrics, /metrics/summary, /health and / stay open for scrapers and probes (counts and
// the role, no keys: docs/security-store.md).
func (s *Server) AdminHandler() http.Handler {
	mux := &adminMux{ServeMux: http.NewServeMux()}
	mux.verifier = httpauth.NewVerifier(s.sec.Token)
	mux.Handle("/metrics", s.metrics.Handler())
	mux.HandleFunc("/metrics/summary", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, s.metrics.Summary())
	})
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		body := map[string]any{"status": "ok", "role": s.role, "leader": s.advertise(), "cluster_id": s.cfg.ClusterID,
			"serving": s.servingLocked(), "applied_seq_id": s.state.Applied()}
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, body)
	})
	mux.private("/get_all_keys", s.leaderOnly(func(w http.ResponseWriter, r *http.Request) {
		var keys []string
		s.View(func(st *State) { keys = st.Keys() })
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		for _, k := range keys {
			fmt.Fprintln(w, k)
		}
	}))
	mux.private("/query_key", s.leaderOnly(func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Query().Get("key")
		if key == "" {
			http.Error(w, "missing key parameter: use /query_key?key=<url-encoded key>", http.StatusBadRequest)
			return
		}
		var info ObjectInfo
		var ok bool
		s.View(func(st *State) { info, ok = st.Query(key) })
		if !ok {
			http.Error(w, fmt.Sprintf("key %q not found", key), http.StatusNotFound)
			return
		}
		writeJSON(w, http.StatusOK, info)
	}))
	mux.private("/get_all_segments", s.leaderOnly(func(w http.ResponseWriter, r *http.Request) {
		var segs []SegmentInfo
		s.View(func(st *State) { segs = st.Segments() })
		if r.URL.Query().Get("format") == "json" {
			writeJSON(w, http.StatusOK, segs)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		seen := map[string]bool{}
		for _, sg := range segs {
			if !seen[sg.Name] {
				seen[sg.Name] = true
				fmt.Fprintln(w, sg.Name)
			}
		}
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, strings.TrimSpace(`mooncake_master admin API:
  /metrics /metrics/summary /health /get_all_keys /query_key?key= /get_all_segments`))
	})
	return mux
}

// adminMux is a ServeMux whose private routes need a signed request when verifier is set.
type adminMux struct {
	*http.ServeMux
	verifier *httpauth.Verifier
}

func (m *adminMux) private(pattern string, h http.HandlerFunc) {
	m.Handle(pattern, httpauth.Require(m.verifier, h))
}

// leaderOnly answers 503 when this master is not the serving leader (HA standby).
func (s *Server) leaderOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.Serving() {
			http.Error(w, fmt.Sprintf("UNAVAILABLE_IN_CURRENT_STATUS (%d): this master is a %s, not the serving leader", int32(api.UNAVAILABLE_IN_CURRENT_STATUS), s.Role()), http.StatusServiceUnavailable)
			return
		}
		h(w, r)
	}
}

// AdvertiseAddress is the "ip:port" clients dial this master at (the HA leader key's value).
func (s *Server) AdvertiseAddress() string { return s.advertise() }

func (s *Server) advertise() string {
	host := s.cfg.RPCAddress
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return fmt.Sprintf("%s:%d", host, s.cfg.RPCPort)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
