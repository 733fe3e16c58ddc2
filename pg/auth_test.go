package pg

import (
	"strings"
	"testing"
	"time"
)

// TestGroupToken: rank 0 draws the token and leaves it in the store; the others (joiners
// too) read it; a new rank 0 keeps the one already there; a bad one in the store is an error.
func TestGroupToken(t *testing.T) {
	st := NewMemStore()
	cfg := Config{Name: "g", Rank: 1, Timeout: time.Second}
	done := make(chan error, 1)
	var got1 string
	go func(cfg Config) {
		tok, err := groupToken(cfg, st)
		if err == nil {
			got1 = tok.Secret()
		}
		done <- err
	}(cfg)
	cfg.Rank = 0
	t0, err := groupToken(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil || got1 != t0.Secret() || len(got1) != 64 {
		t.Fatalf("rank 1 got %q, %v; rank 0 drew %q", got1, err, t0.Secret())
	}
	again, err := groupToken(cfg, st)
	if err != nil || !again.Equal(t0) {
		t.Fatalf("a replacement rank 0 drew a new token: %v, %v", again, err)
	}
	st.Set(tokenKey("bad"), []byte("short"))
	if _, err := groupToken(Config{Name: "bad", Rank: 2, Timeout: time.Second}, st); err == nil || !strings.Contains(err.Error(), "MOONCAKE_PG_AUTH=0") {
		t.Fatalf("bad token in the store: %v", err)
	}
	if _, err := groupToken(Config{Name: "none", Rank: 1, Timeout: 10 * time.Millisecond}, st); err == nil || !strings.Contains(err.Error(), "waiting for rank 0's token") {
		t.Fatalf("no token in the store: %v", err)
	}
}
