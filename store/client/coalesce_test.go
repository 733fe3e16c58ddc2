package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/master"
)

// TestCoalescerBatchesWaiters: with parallel calls in flight (1, and 2 as a client allows
// more), calls arriving meanwhile wait and go as one batch call, led by one of them; each gets
// its own key's result and error, computed from its own argument; a lone call after that takes
// the single path again.
func TestCoalescerBatchesWaiters(t *testing.T) {
	for _, parallel := range []int{0, 2} {
		t.Run(fmt.Sprint("parallel=", parallel), func(t *testing.T) { coalescerBatchesWaiters(t, parallel) })
	}
}

func coalescerBatchesWaiters(t *testing.T, parallel int) {
	co := coalescer[string, string]{parallel: parallel}
	release := make(chan struct{})
	var mu sync.Mutex
	var batches [][]string
	var singles []string
	one := func(_ context.Context, k, arg string) (string, error) {
		if arg != "arg:"+k {
			return "", fmt.Errorf("%s came with the argument %q", k, arg)
		}
		mu.Lock()
		singles = append(singles, k)
		mu.Unlock()
		if strings.HasPrefix(k, "first") {
			<-release
		}
		return "one:" + k, nil
	}
	many := func(_ context.Context, ks, args []string) ([]string, []error) {
		mu.Lock()
		batches = append(batches, slices.Clone(ks))
		mu.Unlock()
		res, errs := make([]string, len(ks)), make([]error, len(ks))
		for i, k := range ks {
			if k == "bad" {
				errs[i] = errors.New("bad key")
				continue
			}
			if args[i] != "arg:"+k {
				errs[i] = fmt.Errorf("%s came with the argument %q", k, args[i])
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
		r, err := co.do(context.Background(), k, "arg:"+k, one, many)
		gmu.Lock()
		got[k] = out{r, err}
		gmu.Unlock()
	}
	inFlight := max(parallel, 1)
	for i := 0; i < inFlight; i++ {
		wg.Add(1)
		go call(fmt.Sprint("first", i))
	}
	for { // the first calls are in flight
		mu.Lock()
		n := len(singles)
		mu.Unlock()
		if n == inFlight {
			break
		}
		time.Sleep(time.Millisecond)
	}
	keys := []string{"a", "b", "bad", "c"}
	for _, k := range keys {
		wg.Add(1)
		go call(k)
	}
	for { // all four queued behind them
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
	if len(batches) != 1 || len(singles) != inFlight {
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
	if got["first0"] != (out{"one:first0", nil}) || got["bad"].err == nil || got["bad"].err.Error() != "bad key" {
		t.Fatalf("first %+v bad %+v", got["first0"], got["bad"])
	}
	if r, err := co.do(context.Background(), "alone", "arg:alone", one, many); r != "one:alone" || err != nil || co.flying != 0 {
		t.Fatalf("alone: %q %v in flight %d", r, err, co.flying)
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

// endCounter counts the BatchPutEnd calls of more than one key that carried values.
type endCounter struct {
	*master.Server
	batches atomic.Int32
}

func (m *endCounter) BatchPutEnd(ctx context.Context, r *api.BatchKeysRequest) (*api.BatchStatusResponse, error) {
	if len(r.Keys) > 1 && len(r.Values) == len(r.Keys) {
		m.batches.Add(1)
	}
	return m.Server.BatchPutEnd(ctx, r)
}

// TestCoalescedPutEndsCarryValues: plain single puts of small values from many goroutines
// (no reservations), whose PutEnds go together as BatchPutEnd calls, each with its key's bytes:
// every value is then answered from the master's cache, exact, reading no replica.
func TestCoalescedPutEndsCarryValues(t *testing.T) {
	var m *endCounter
	_, addr := serveAs(t, func(s *master.Server) api.MasterServer { m = &endCounter{Server: s}; return m })
	newClient(t, addr, 64<<20)
	w := newClientWith(t, addr, 0, Config{PutReservations: -1})
	reader := newClient(t, addr, 0)
	ctx := context.Background()
	want := map[string][]byte{}
	// Rounds until ends have met in a batch (the first round nearly always).
	for round := 0; m.batches.Load() == 0; round++ {
		if round == 20 {
			t.Fatal("20 rounds of 16 goroutines' puts and no PutEnd was batched")
		}
		maps.Copy(want, putConcurrently(t, w, 16, 10, func(g, i int) (string, []byte) {
			return fmt.Sprintf("r%d/g%d/%d", round, g, i), pattern(100+37*i, byte(g*10+i))
		}))
	}
	before := reader.CachedReads()
	for key, v := range want {
		got, err := reader.GetValue(ctx, key)
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("get %s: %d bytes (want %d), %v", key, len(got), len(v), err)
		}
	}
	if n := reader.CachedReads() - before; n != uint64(len(want)) {
		t.Fatalf("%d of %d gets answered from the master's cache, want all (%d batched ends)", n, len(want), m.batches.Load())
	}
}
