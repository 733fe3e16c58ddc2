package httpauth

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/auth"
)

// Scheme is the Authorization scheme name.
const Scheme = "MC-HMAC-SHA256"

// Skew is how far a request's time may be from the verifier's clock.
const Skew = 5 * time.Minute

// MaxBody is the largest body Require reads to check its hash (the metadata server checks
// bigger ones itself).
const MaxBody = 1 << 20

// Signature is a parsed Authorization header.
type Signature struct {
	Time  int64  // t: unix seconds
	Nonce string // n: 32 lower-case hex digits
	MAC   []byte // s: 32 bytes
}

// ErrNoSignature: the request carries no MC-HMAC-SHA256 Authorization header.
var ErrNoSignature = errors.New("the request is not signed: this server requires MC_AUTH_TOKEN (set the same token in the client's environment, see docs/security-store.md)")

// Parse decodes an Authorization header value. It accepts exactly the three fields, in any
// order, each once.
func Parse(h string) (Signature, error) {
	var sig Signature
	scheme, rest, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, Scheme) {
		return sig, ErrNoSignature
	}
	seen := map[string]bool{}
	for _, f := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(f), "=")
		if !ok || seen[k] {
			return sig, fmt.Errorf("bad %s header: field %q", Scheme, f)
		}
		seen[k] = true
		switch k {
		case "t":
			t, err := strconv.ParseInt(v, 10, 64)
			if err != nil || t < 0 {
				return sig, fmt.Errorf("bad %s header: time %q", Scheme, v)
			}
			sig.Time = t
		case "n":
			if b, err := hex.DecodeString(v); err != nil || len(b) != 16 || strings.ToLower(v) != v {
				return sig, fmt.Errorf("bad %s header: nonce %q (want 32 lower-case hex digits)", Scheme, v)
			}
			sig.Nonce = v
		case "s":
			b, err := hex.DecodeString(v)
			if err != nil || len(b) != sha256.Size {
				return sig, fmt.Errorf("bad %s header: signature %q (want 64 hex digits)", Scheme, v)
			}
			sig.MAC = b
		default:
			return sig, fmt.Errorf("bad %s header: unknown field %q", Scheme, k)
		}
	}
	if len(seen) != 3 {
		return sig, fmt.Errorf("bad %s header: want t=, n= and s=", Scheme)
	}
	return sig, nil
}

// String formats the header value.
func (s Signature) String() string {
	return fmt.Sprintf("%s t=%d, n=%s, s=%s", Scheme, s.Time, s.Nonce, hex.EncodeToString(s.MAC))
}

// mac computes the signature of one request.
func mac(token []byte, method, uri string, t int64, nonce string, body []byte) []byte {
	bh := sha256.Sum256(body)
	m := hmac.New(sha256.New, token)
	fmt.Fprintf(m, "mooncake-http-v1\n%s\n%s\n%d\n%s\n%s", method, uri, t, nonce, hex.EncodeToString(bh[:]))
	return m.Sum(nil)
}

// Sign adds the Authorization header to req, whose body is body (nil for none). The request's
// URL must be final (the signature covers its path and query).
func Sign(req *http.Request, t *auth.Token, body []byte) {
	token := []byte(t.Secret())
	var nb [16]byte
	rand.Read(nb[:])
	sig := Signature{Time: time.Now().Unix(), Nonce: hex.EncodeToString(nb[:])}
	sig.MAC = mac(token, req.Method, req.URL.RequestURI(), sig.Time, sig.Nonce, body)
	req.Header.Set("Authorization", sig.String())
}

// Verifier checks signed requests against a token and remembers the nonces it accepted (for
// 2*Skew) so that none is accepted twice. Safe for concurrent use.
type Verifier struct {
	token []byte
	now   func() time.Time

	mu     sync.Mutex
	nonces map[string]int64 // nonce -> unix time after which it can be forgotten
	pruned int64
}

// NewVerifier returns a verifier of t; nil for a nil token (Require then lets everything through).
func NewVerifier(t *auth.Token) *Verifier {
	if t == nil {
		return nil
	}
	return &Verifier{token: []byte(t.Secret()), now: time.Now, nonces: map[string]int64{}}
}

// Check verifies r's signature over body (the request's complete body, nil for none).
func (v *Verifier) Check(r *http.Request, body []byte) error {
	sig, err := Parse(r.Header.Get("Authorization"))
	if err != nil {
		return err
	}
	now := v.now().Unix()
	if d := now - sig.Time; d > int64(Skew/time.Second) || -d > int64(Skew/time.Second) {
		return fmt.Errorf("the request's time is %d s from this server's clock (more than %v): check the clocks", d, Skew)
	}
	uri := r.RequestURI
	if uri == "" {
		uri = r.URL.RequestURI()
	}
	if !hmac.Equal(sig.MAC, mac(v.token, r.Method, uri, sig.Time, sig.Nonce, body)) {
		return errors.New("bad signature: the client's MC_AUTH_TOKEN is not this server's")
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if now-v.pruned > int64(Skew/time.Second) {
		for n, exp := range v.nonces {
			if exp < now {
				delete(v.nonces, n)
			}
		}
		v.pruned = now
	}
	if _, dup := v.nonces[sig.Nonce]; dup {
		return errors.New("replayed request: this signature was already used")
	}
	v.nonces[sig.Nonce] = sig.Time + 2*int64(Skew/time.Second)
	return nil
}

// Refuse writes the 401 answer for err.
func Refuse(w http.ResponseWriter, err error) {
	w.Header().Set("WWW-Authenticate", Scheme)
	http.Error(w, "unauthorized: "+err.Error(), http.StatusUnauthorized)
}

// Require wraps h: requests must be signed (their body, up to MaxBody, is read to check it and
// handed on to h). A nil verifier lets everything through.
func Require(v *Verifier, h http.Handler) http.Handler {
	if v == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
		if err != nil {
			http.Error(w, "reading request body: "+err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		if err := v.Check(r, body); err != nil {
			Refuse(w, err)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, r)
	})
}
