package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/store/api"
)

// TestCoalescerBatchesWaiters: calls arriving while one is in flight wait and go as one batch
// call, led by one of them; each gets its own key's result and error; a lone call after that
// takes the single path again.
func TestCoalescerBatchesWaiters(t *testing.T) {
	var co coalescer[string]
	release := make(chan struct{})
	var mu sync.Mutex
	var batches [][]string
	var singles []string
	one := func(_ context.Context, k string) (string, error) {
		mu.Lock()
		singles = append(singles, k)
		mu.Unlock()
		if k == "first" {
			<-release
		}
		return "one:" + k, nil
	}
	many := func(_ context.Context, ks []string) ([]string, []error) {
		mu.Lock()
		batches = append(batches, slices.Clone(ks))
		mu.Unlock()
		res, errs := make([]string, len(ks)), make([]error, len(ks))
		for i, k := range ks {
			if k == "bad" {
				errs[i] = errors.New("bad key")
				continue
			}
			res[i] = "many:" + k
		}
		return res, errs
	}
	type out struct {
		res string
		err error
	}
	got := map[string]out{}
	var gmu sync.Mutex
	var wg sync.WaitGroup
	call := func(k string) {
		defer wg.Done()
		r, err := co.do(context.Background(), k, one, many)
		gmu.Lock()
		got[k] = out{r, err}
		gmu.Unlock()
	}
	wg.Add(1)
	go call("first")
	for { // the first call is in flight
		mu.Lock()
		n := len(singles)
		mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	keys := []string{"a", "b", "bad", "c"}
	for _, k := range keys {
		wg.Add(1)
		go call(k)
	}
	for { // all four queued behind it
		co.mu.Lock()
		n := len(co.queue)
		co.mu.Unlock()
		if n == len(keys) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if len(batches) != 1 || len(singles) != 1 {
		t.Fatalf("batches %v singles %v", batches, singles)
	}
	b := slices.Clone(batches[0])
	slices.Sort(b)
	if !slices.Equal(b, []string{"a", "b", "bad", "c"}) {
		t.Fatalf("batch %v", batches[0])
	}
	for _, k := range []string{"a", "b", "c"} {
		if got[k] != (out{"many:" + k, nil}) {
			t.Fatalf("%s: %+v", k, got[k])
		}
	}
	if got["first"] != (out{"one:first", nil}) || got["bad"].err == nil || got["bad"].err.Error() != "bad key" {
		t.Fatalf("first %+v bad %+v", got["first"], got["bad"])
	}
	if r, err := co.do(context.Background(), "alone", one, many); r != "one:alone" || err != nil || co.busy {
		t.Fatalf("alone: %q %v busy %v", r, err, co.busy)
	}
}

// TestConcurrentSingleOps: goroutines each putting and getting their own keys at once over tcp
// (their PutEnd and GetReplicaList calls coalesced where they meet), missing keys among the
// gets: every value read back exactly, every missing key OBJECT_NOT_FOUND.
func TestConcurrentSingleOps(t *testing.T) {
	_, addr := startMaster(t)
	tcp := Config{Engine: engine.Config{ForceTCP: true}}
	a := newClientWith(t, addr, 0, tcp)
	newClientWith(t, addr, 32<<20, tcp)
	ctx := context.Background()
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				key := fmt.Sprint("c", g, "/", i)
				val := pattern(1000+i, byte(g))
				if err := a.PutValue(ctx, key, val, PutOptions{}); err != nil {
					errc <- err
					return
				}
				got, err := a.GetValue(ctx, key)
				if err != nil || !bytes.Equal(got, val) {
					errc <- fmt.Errorf("get %s: %v (equal %v)", key, err, bytes.Equal(got, val))
					return
				}
				if _, err := a.GetValue(ctx, key+"-missing"); !api.Is(err, api.OBJECT_NOT_FOUND) {
					errc <- fmt.Errorf("missing %s: %v", key, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}
