package pg

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/collective/reduce"
)

// calls runs one membership call on each of ranks at once.
func calls(t *testing.T, c *cluster, req Request, ranks ...int) map[int]Result {
	t.Helper()
	pgs := c.groups()
	return each(ranks, func(r int) Result {
		res, err := pgs[r].Membership(req)
		if err != nil {
			t.Errorf("rank %d %s: %v", r, req.Op, err)
		}
		return res
	})
}

// TestMembershipLog drives the decision log with live ranks in one process: concurrent
// identical proposals all get Applied with one decision, the group runs without the
// deactivated rank, a rank that skipped a membership call gets a mismatch (and catches up),
// and a deactivated rank comes back through join + activate.
func TestMembershipLog(t *testing.T) {
	c := newCluster(t, Config{Size: 3, Timeout: 20 * time.Second})
	pgs := c.groups()
	wantSum(t, allReduce(t, c, 0, 1, 2), 6)
	res := calls(t, c, Request{Op: "deactivate", Ranks: []int{2}}, 0, 1)
	for r, x := range res {
		if x.Status != ProposalApplied || x.NewEpoch != 1 || x.NumSynced != 2 {
			t.Fatalf("rank %d deactivate: %+v", r, x)
		}
	}
	if ok, _ := pgs[0].st.Check(pgs[0].key("dec", 2)); ok {
		t.Fatal("identical proposals wrote a second decision")
	}
	wantSum(t, allReduce(t, c, 0, 1), 3)
	// Deactivating an inactive rank again is a no-op that still answers Applied.
	if x := calls(t, c, Request{Op: "deactivate", Ranks: []int{2}}, 0)[0]; x.Status != ProposalApplied || x.NewEpoch != 1 {
		t.Fatalf("again: %+v", x)
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
	res = calls(t, c, Request{Op: "activate", Ranks: []int{2}}, 0, 1)
	<-done
	if jerr != nil || joined.Status != ProposalApplied || joined.NewEpoch != 2 {
		t.Fatalf("join: %+v %v", joined, jerr)
	}
	for r, x := range res {
		if x.Status != ProposalApplied || x.NewEpoch != 2 {
			t.Fatalf("rank %d activate: %+v", r, x)
		}
	}
	wantSum(t, allReduce(t, c, 0, 1, 2), 6)
	// Rank 1 skips a membership call that 0 makes: both meet a membership mismatch at the next
	// op, rank 1 catches up from the log, and both run the op again over the agreed view
	// (upstream: one rank's call commits for all).
	x := calls(t, c, Request{Op: "deactivate", Ranks: []int{2}}, 0)[0]
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
		if err != nil {
			t.Fatalf("rank %d: the op after the mismatch: %v", r, err)
		}
	}
	if pgs[1].Epoch() != pgs[0].Epoch() || !slices.Equal(active(pgs[1]), []int{0, 1}) {
		t.Fatalf("rank 1 after catching up: epoch %d (rank 0: %d), active %v", pgs[1].Epoch(), pgs[0].Epoch(), active(pgs[1]))
	}
	// Rank 2, out of the group, hears of the mismatch through the others' aborts instead of
	// waiting for its timeout.
	if err := w2.Wait(5 * time.Second); err == nil || !strings.Contains(err.Error(), "membership mismatch") {
		t.Fatalf("rank 2: want the membership mismatch, got %v", err)
	}
	wantSum(t, allReduce(t, c, 0, 1), 3)
}
