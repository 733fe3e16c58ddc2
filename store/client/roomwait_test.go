package client

import (
	"context"
	"testing"
	"time"
)

// TestRoomWaitPacing: after a request the master held for its wait, the put asks again at once;
// after one answered at once (a master that does not hold puts, or a request with no wait left)
// it sleeps first, so a put never spins on Retry answers; past the deadline it stops.
func TestRoomWaitPacing(t *testing.T) {
	c := &Client{cfg: Config{RPCTimeout: 400 * time.Millisecond}}
	ctx := context.Background()
	deadline := time.Now().Add(c.cfg.RPCTimeout)
	var w roomWait
	if ms := w.ms(c, deadline); ms < 100 || ms > 300 {
		t.Fatalf("wait %d ms for a 400 ms timeout, want the time left less a quarter of the timeout", ms)
	}
	w.sent = time.Now().Add(-time.Duration(w.waitMs) * time.Millisecond) // held for all of it
	t0 := time.Now()
	if !w.again(ctx, deadline) || w.backoff != 0 {
		t.Fatal("a request held for its wait: ask again at once")
	}
	for i := range 4 {
		w.ms(c, time.Now()) // no wait left: answered at once
		t0 = time.Now()
		if !w.again(ctx, deadline) {
			t.Fatalf("round %d: gave up before the deadline", i)
		}
		if slept := time.Since(t0); slept < w.backoff || w.backoff < time.Millisecond {
			t.Fatalf("round %d: asked again after %v (backoff %v): a Retry answered at once must be polled with a sleep", i, slept, w.backoff)
		}
	}
	if w.again(ctx, time.Now().Add(-time.Millisecond)) {
		t.Fatal("asked again past the deadline")
	}
}
