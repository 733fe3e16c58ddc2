package worker

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

type hintErr struct{}

func (hintErr) Error() string      { return "peer 3 died" }
func (hintErr) FailedRanks() []int { return []int{3} }

func TestOrderAndResults(t *testing.T) {
	q := NewQueue("rank 0", time.Second)
	defer q.Close()
	var mu sync.Mutex
	var order []int
	var ws []*Work
	for i := 0; i < 50; i++ {
		ws = append(ws, q.Submit("op", func(ctx context.Context) error {
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if i == 7 {
				return hintErr{}
			}
			return nil
		}))
	}
	for i, w := range ws {
		err := w.Wait(-1)
		if (i == 7) != (err != nil) {
			t.Fatalf("op %d: %v", i, err)
		}
	}
	for i, v := range order {
		if v != i {
			t.Fatalf("order %v", order)
		}
	}
	if fr := ws[7].FailedRanks(); len(fr) != 1 || fr[0] != 3 {
		t.Fatalf("hint %v", fr)
	}
}

func TestTimeouts(t *testing.T) {
	q := NewQueue("rank 1", 50*time.Millisecond)
	w := q.Submit("all_reduce", func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})
	err := w.Wait(5 * time.Second)
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "all_reduce timed out after 50ms") {
		t.Fatalf("got %v", err)
	}
	// Wait's own timeout.
	block := make(chan struct{})
	w2 := q.Submit("barrier", func(ctx context.Context) error { <-block; return nil })
	if err := w2.Wait(10 * time.Millisecond); !errors.Is(err, ErrRunning) {
		t.Fatalf("got %v", err)
	}
	// Watchdog: the op ignores its context; the waiter is released anyway.
	start := time.Now()
	if err := w2.Wait(-1); !errors.Is(err, ErrTimeout) || time.Since(start) > 4*time.Second {
		t.Fatalf("got %v after %v", err, time.Since(start))
	}
	close(block)
	q.Close()
	if w := q.Submit("x", func(context.Context) error { return nil }); !errors.Is(w.Wait(-1), ErrClosed) {
		t.Fatal("submit after close")
	}
}

func TestPanicBecomesError(t *testing.T) {
	q := NewQueue("r", 0)
	defer q.Close()
	w := q.Submit("bad", func(context.Context) error { panic("boom") })
	if err := w.Wait(-1); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatal(err)
	}
	if err := q.Submit("ok", func(context.Context) error { return nil }).Wait(-1); err != nil {
		t.Fatal(err)
	}
}

// TestRunHere: a caller runs the next op itself; an op behind another, or already running,
// is left to the queue; order is kept either way.
func TestRunHere(t *testing.T) {
	q := NewQueue("test", time.Second)
	defer q.Close()
	var order []int
	var mu sync.Mutex
	note := func(i int) {
		mu.Lock()
		order = append(order, i)
		mu.Unlock()
	}
	gate := make(chan struct{})
	started := make(chan struct{})
	w1 := q.Submit("one", func(context.Context) error { close(started); <-gate; note(1); return nil })
	<-started
	w2 := q.Submit("two", func(context.Context) error { note(2); return nil })
	if w1.RunHere() {
		t.Fatal("ran an op that was already running")
	}
	if w2.RunHere() {
		t.Fatal("ran an op that is not next in line")
	}
	close(gate)
	if err := w2.Wait(time.Second); err != nil {
		t.Fatal(err)
	}
	// The queue is idle: submit and run on this goroutine (the queue's goroutine may win the
	// race for some; every op runs exactly once either way).
	ran := 0
	for i := 3; i < 203; i++ {
		w := q.Submit("op", func(context.Context) error { note(i); return nil })
		if w.RunHere() {
			ran++
			if !w.Completed() {
				t.Fatal("RunHere returned before the op finished")
			}
		}
		if err := w.Wait(time.Second); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, v := range order {
		if v != i+1 {
			t.Fatalf("order %v", order)
		}
	}
	if len(order) != 202 {
		t.Fatalf("%d ops ran", len(order))
	}
	t.Logf("%d of 200 ran on the caller", ran)
	werr := q.Submit("fail", func(context.Context) error { return errors.New("boom") })
	werr.RunHere()
	if err := werr.Wait(time.Second); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("error not kept: %v", err)
	}
}

// TestSubmitHeld: a held op waits for Start (or RunHere); OnFinish fires for ops the queue ran,
// not for ops RunHere ran, and at once for ops already finished.
func TestSubmitHeld(t *testing.T) {
	q := NewQueue("test", time.Second)
	defer q.Close()
	if err := q.Submit("warm-up", func(context.Context) error { return nil }).Wait(time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // the queue's goroutine is asleep again
	ran := make(chan struct{}, 1)
	w := q.SubmitHeld("held", func(context.Context) error { ran <- struct{}{}; return nil })
	notified := make(chan struct{}, 2)
	w.OnFinish(func() { notified <- struct{}{} })
	select {
	case <-ran:
		t.Fatal("a held op ran before Start")
	case <-time.After(50 * time.Millisecond):
	}
	w.Start()
	if err := w.Wait(time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-notified:
	case <-time.After(time.Second):
		t.Fatal("OnFinish not called for an op the queue ran")
	}

	for q.Pending() > 0 { // the queue's goroutine is done with w
		time.Sleep(time.Millisecond)
	}
	w2 := q.SubmitHeld("here", func(context.Context) error { return nil })
	w2.OnFinish(func() { notified <- struct{}{} })
	if !w2.RunHere() {
		t.Fatal("RunHere did not run an idle queue's held op")
	}
	w2.OnFinish(func() { notified <- struct{}{} })
	select {
	case <-notified:
		t.Fatal("OnFinish called for an op RunHere ran")
	case <-time.After(50 * time.Millisecond):
	}

	// Behind a running op, a held op runs in its turn without Start.
	gate := make(chan struct{})
	w3 := q.Submit("first", func(context.Context) error { <-gate; return nil })
	w4 := q.SubmitHeld("second", func(context.Context) error { return nil })
	close(gate)
	if err := w4.Wait(time.Second); err != nil {
		t.Fatalf("held op behind another did not run: %v", err)
	}
	w3.Wait(time.Second)
	w4.OnFinish(func() { notified <- struct{}{} })
	select {
	case <-notified:
	case <-time.After(time.Second):
		t.Fatal("OnFinish on a finished op did not call at once")
	}
}
