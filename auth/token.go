package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// MinTokenLen is the shortest token accepted: a short token could be guessed offline from a
// captured handshake.
const MinTokenLen = 16

// maxTokenFile bounds what is read from MC_AUTH_TOKEN_FILE.
const maxTokenFile = 4096

// ErrWeakToken is returned for a token shorter than MinTokenLen.
var ErrWeakToken = errors.New("authentication token is too short")

// Token is a shared secret (nil: no token); make one with NewToken, Generate or Load. It never
// prints its secret.
type Token struct {
	secret []byte
	fp     string // Fingerprint, computed once
}

func newToken(secret []byte) *Token {
	h := sha256.New()
	h.Write([]byte("mooncake-auth/fingerprint\x00"))
	h.Write(secret)
	return &Token{secret: secret, fp: hex.EncodeToString(h.Sum(nil)[:8])}
}

// NewToken returns a token for secret, which must be at least MinTokenLen bytes.
func NewToken(secret string) (*Token, error) {
	if len(secret) < MinTokenLen {
		return nil, fmt.Errorf("%w: %d bytes, want at least %d (generate one with `openssl rand -hex 32`)", ErrWeakToken, len(secret), MinTokenLen)
	}
	return newToken([]byte(secret)), nil
}

// Generate returns a new random token (32 random bytes, hex): what a process group's rank 0
// shares with the others.
func Generate() (*Token, error) {
	var b [32]byte
	if _, err := io.ReadFull(rand.Reader, b[:]); err != nil {
		return nil, fmt.Errorf("cannot draw a random token: %w", err)
	}
	return newToken([]byte(hex.EncodeToString(b[:]))), nil
}

// Secret is the token's text, for handing it to a peer over a trusted channel (the c10d store).
func (t *Token) Secret() string {
	if t == nil {
		return ""
	}
	return string(t.secret)
}

// Fingerprint is a short, non-secret name of the token for logs and for telling tokens apart
// (the first 8 bytes of SHA-256 over a fixed label and the token, hex).
func (t *Token) Fingerprint() string {
	if t == nil {
		return "none"
	}
	return t.fp
}

// String hides the secret.
func (t *Token) String() string { return "auth.Token(" + t.Fingerprint() + ")" }

// Equal reports whether t and u hold the same secret (nil equals nil).
func (t *Token) Equal(u *Token) bool {
	if t == nil || u == nil {
		return t == u
	}
	return string(t.secret) == string(u.secret)
}

// Load returns the token configured by MC_AUTH_TOKEN (value) and MC_AUTH_TOKEN_FILE (file):
//
//   - neither set (empty): nil, nil — no authentication;
//   - both set: an error (say which one you mean);
//   - value: the token as given (not trimmed: a secret is used as is);
//   - file: the file's contents without surrounding blanks (a trailing newline is normal).
//     The file must be a regular file that only its owner can read or write (mode 0600 or
//     0400): one that group or others can read is an error, as ssh does for keys.
//
// The token must be at least MinTokenLen bytes.
func Load(value, file string) (*Token, error) {
	switch {
	case value == "" && file == "":
		return nil, nil
	case value != "" && file != "":
		return nil, errors.New("both MC_AUTH_TOKEN and MC_AUTH_TOKEN_FILE are set: set only one")
	case value != "":
		t, err := NewToken(value)
		if err != nil {
			return nil, fmt.Errorf("MC_AUTH_TOKEN: %w", err)
		}
		return t, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("MC_AUTH_TOKEN_FILE: cannot read the token: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("MC_AUTH_TOKEN_FILE: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("MC_AUTH_TOKEN_FILE %s is not a regular file", file)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("MC_AUTH_TOKEN_FILE %s can be accessed by other users (mode %04o): run `chmod 600 %s`", file, perm, file)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return nil, fmt.Errorf("MC_AUTH_TOKEN_FILE %s: %w", file, err)
	}
	if len(b) > maxTokenFile {
		return nil, fmt.Errorf("MC_AUTH_TOKEN_FILE %s is larger than %d bytes: is it the right file?", file, maxTokenFile)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil, fmt.Errorf("MC_AUTH_TOKEN_FILE %s is empty", file)
	}
	t, err := NewToken(s)
	if err != nil {
		return nil, fmt.Errorf("MC_AUTH_TOKEN_FILE %s: %w", file, err)
	}
	return t, nil
}
