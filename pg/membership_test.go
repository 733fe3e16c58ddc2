package pg

import (
	"encoding/binary"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/collective/reduce"
)

// sumInt32 runs an int32 all_reduce of rank+1 on the given ranks and returns each result.
func sumInt32(t *testing.T, pgs []*Group, ranks ...int) map[int]int32 {
	t.Helper()
	out := map[int]int32{}
	bufs := map[int][]byte{}
	for _, r := range ranks {
		b := make([]byte, 4*64)
		for i := 0; i < 64; i++ {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(r+1))
		}
		bufs[r] = b
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := must(t)(pgs[r].AllReduce(bufs[r], reduce.Int32, reduce.Sum))
			if err := w.Wait(20 * time.Second); err != nil {
				t.Errorf("rank %d: %v", r, err)
				return
			}
			mu.Lock()
			out[r] = int32(binary.LittleEndian.Uint32(bufs[r][4*63:]))
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// call runs one membership call on each of ranks at once.
func call(t *testing.T, pgs []*Group, req Request, ranks ...int) map[int]Result {
	t.Helper()
	out := map[int]Result{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := pgs[r].Membership(req)
			if err != nil {
				t.Errorf("rank %d %s: %v", r, req.Op, err)
			}
			mu.Lock()
			out[r] = res
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// TestMembershipLog drives the decision log with live ranks in one process: concurrent
// identical proposals all get Applied with one decision, the group runs without the
// deactivated rank, a rank that skipped a membership call gets a mismatch (and catches up),
// and a deactivated rank comes back through join + activate.
func TestMembershipLog(t *testing.T) {
	pgs := groups(t, 3, 20*time.Second)
	if got := sumInt32(t, pgs, 0, 1, 2); got[0] != 6 || got[2] != 6 {
		t.Fatalf("before: %v", got)
	}
	res := call(t, pgs, Request{Op: "deactivate", Ranks: []int{2}}, 0, 1)
	for r, x := range res {
		if x.Status != ProposalApplied || x.NewEpoch != 1 || x.NumSynced != 2 {
			t.Fatalf("rank %d deactivate: %+v", r, x)
		}
	}
	if ok, _ := pgs[0].st.Check(pgs[0].key("dec", 2)); ok {
		t.Fatal("identical proposals wrote a second decision")
	}
	if got := sumInt32(t, pgs, 0, 1); got[0] != 3 || got[1] != 3 {
		t.Fatalf("without rank 2: %v", got)
	}
	// Deactivating an inactive rank again is a no-op that still answers Applied.
	if x := call(t, pgs, Request{Op: "deactivate", Ranks: []int{2}}, 0)[0]; x.Status != ProposalApplied || x.NewEpoch != 1 {
		t.Fatalf("again: %+v", x)
	}
	if x := call(t, pgs, Request{Op: "deactivate", Ranks: []int{0}}, 0)[0]; x.Status != ProposalRejected || !strings.Contains(x.RejectReason, "itself") {
		t.Fatalf("self: %+v", x)
	}
	// Rank 2 learns it was dropped and waits to be admitted; 0 and 1 admit it.
	var joined Result
	var jerr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		joined, jerr = pgs[2].Membership(Request{Op: "join"})
	}()
	time.Sleep(200 * time.Millisecond)
	res = call(t, pgs, Request{Op: "activate", Ranks: []int{2}}, 0, 1)
	<-done
	if jerr != nil || joined.Status != ProposalApplied || joined.NewEpoch != 2 {
		t.Fatalf("join: %+v %v", joined, jerr)
	}
	for r, x := range res {
		if x.Status != ProposalApplied || x.NewEpoch != 2 {
			t.Fatalf("rank %d activate: %+v", r, x)
		}
	}
	if got := sumInt32(t, pgs, 0, 1, 2); got[0] != 6 || got[1] != 6 || got[2] != 6 {
		t.Fatalf("after rejoin: %v", got)
	}
	// Rank 1 skips a membership call that 0 makes: both fail the next op with a membership
	// mismatch, rank 1 catches up, and the op after that works.
	x := call(t, pgs, Request{Op: "deactivate", Ranks: []int{2}}, 0)[0]
	if x.Status != ProposalApplied {
		t.Fatalf("%+v", x)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = must(t)(pgs[r].AllReduce(make([]byte, 16), reduce.Int32, reduce.Sum)).Wait(20 * time.Second)
		}()
	}
	// Rank 2 (deactivated, not told) would wait for rank 0 and 1 in the same op: run it too.
	w2 := must(t)(pgs[2].AllReduce(make([]byte, 16), reduce.Int32, reduce.Sum))
	wg.Wait()
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "membership mismatch") {
			t.Fatalf("rank %d: want a membership mismatch, got %v", r, err)
		}
	}
	// It hears of the mismatch through rank 1's abort instead of waiting for its timeout.
	if err := w2.Wait(5 * time.Second); err == nil || !strings.Contains(err.Error(), "membership mismatch") {
		t.Fatalf("rank 2: want the membership mismatch, got %v", err)
	}
	if got := sumInt32(t, pgs, 0, 1); got[0] != 3 || got[1] != 3 {
		t.Fatalf("after catching up: %v", got)
	}
}
