package pg

import (
	"slices"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/collective/reduce"
	"github.com/mooncake-go/mooncake/worker"
)

// TestP2PWithDeadPeerAppliesTheViewFirst: rank 2 dies. Rank 0's send to it and rank 1's receive
// from it complete without an error, with rank 2 in the hint; with auto_deactivate+auto_sync the
// group agreed on the failure before each completed (epoch 1, rank 2 inactive, on both ranks:
// the second finds the first's decision). p2p between the survivors is unaffected, and so is
// their next collective.
func TestP2PWithDeadPeerAppliesTheViewFirst(t *testing.T) {
	c := newCluster(t, Config{Size: 3, Timeout: 20 * time.Second, AutoDeactivate: true, AutoSync: true})
	wantSum(t, allReduce(t, c, 0, 1, 2), 6)
	c.kill(2)
	pgs := c.groups()
	check := func(r int, w *worker.Work) {
		t.Helper()
		if err := w.Wait(30 * time.Second); err != nil {
			t.Fatalf("rank %d: %s with the dead rank failed: %v", r, w.Op(), err)
		}
		if got := w.FailedRanks(); !slices.Equal(got, []int{2}) {
			t.Fatalf("rank %d: %s hint %v, want [2]", r, w.Op(), got)
		}
		if got := pgs[r].g.ActiveRanks(); !slices.Equal(got, []bool{true, true, false}) || pgs[r].Epoch() != 1 {
			t.Fatalf("rank %d after its %s completed: active %v epoch %d, want [true true false] epoch 1", r, w.Op(), got, pgs[r].Epoch())
		}
	}
	// A same-host peer's mailbox takes the write whatever the peer's state: the send finds the
	// peer dead because it never takes the message.
	check(0, must(t)(pgs[0].Send([]byte{7}, 2, 5)))
	check(1, must(t)(pgs[1].Recv(make([]byte, 1), 2, 5)))
	// Now that rank 2 is out of the view, a receive from it completes the same way at once.
	check(0, must(t)(pgs[0].Recv(make([]byte, 1), 2, 6)))

	buf := make([]byte, 1)
	ws := must(t)(pgs[0].Send([]byte{42}, 1, 9))
	wr := must(t)(pgs[1].Recv(buf, 0, 9))
	waitAll(t, ws, wr)
	if buf[0] != 42 || len(ws.FailedRanks())+len(wr.FailedRanks()) != 0 {
		t.Fatalf("survivors' p2p: got %d, hints %v %v", buf[0], ws.FailedRanks(), wr.FailedRanks())
	}
	wantSum(t, allReduce(t, c, 0, 1), 3)
}

// TestP2PWithDeadPeerManualModeKeepsTheView: without auto_deactivate_on_failure the send
// completes with the hint and membership does not change.
func TestP2PWithDeadPeerManualModeKeepsTheView(t *testing.T) {
	c := newCluster(t, Config{Size: 2, Timeout: 20 * time.Second})
	wantSum(t, allReduce(t, c, 0, 1), 3)
	c.kill(1)
	pg0 := c.groups()[0]
	w := must(t)(pg0.Send([]byte{7}, 1, 5))
	if err := w.Wait(30 * time.Second); err != nil || !slices.Equal(w.FailedRanks(), []int{1}) {
		t.Fatalf("send to the dead rank: %v, hint %v", err, w.FailedRanks())
	}
	if got := pg0.g.ActiveRanks(); !slices.Equal(got, []bool{true, true}) || pg0.Epoch() != 0 {
		t.Fatalf("manual mode: active %v epoch %d, want both active at epoch 0", got, pg0.Epoch())
	}
}

// TestBuffersSizedForTheSurvivors: rank 3 of 4 dies and the survivors' next ops are sized for
// the 3 of them (upstream's layout after a failure) before any op of theirs met the failure:
// each probes the group when its op runs, they agree on the failure (one decision) and the ops
// complete over the survivors with the compact layout.
func TestBuffersSizedForTheSurvivors(t *testing.T) {
	c := newCluster(t, Config{Size: 4, Timeout: 20 * time.Second, AutoDeactivate: true, AutoSync: true})
	wantSum(t, allReduce(t, c, 0, 1, 2, 3), 10)
	c.kill(3)
	pgs := c.groups()
	live := []int{0, 1, 2}
	outs := map[int][][]byte{}
	var ws []*worker.Work
	for _, r := range live {
		outs[r] = [][]byte{{0}, {0}, {0}}
		ws = append(ws, must(t)(pgs[r].AllGather([]byte{byte(r + 1)}, outs[r])))
	}
	waitAll(t, ws...)
	for _, r := range live {
		if want := [][]byte{{1}, {2}, {3}}; !slices.EqualFunc(outs[r], want, slices.Equal) {
			t.Fatalf("rank %d all_gather %v, want %v", r, outs[r], want)
		}
		if pgs[r].Epoch() != 1 || !slices.Equal(active(pgs[r]), live) {
			t.Fatalf("rank %d: epoch %d active %v", r, pgs[r].Epoch(), active(pgs[r]))
		}
	}
	rs := map[int][]byte{}
	ws = nil
	for _, r := range live {
		rs[r] = []byte{0}
		ws = append(ws, must(t)(pgs[r].ReduceScatter([][]byte{{1}, {2}, {3}}, rs[r], reduce.Uint8, reduce.Sum)))
	}
	waitAll(t, ws...)
	for i, r := range live {
		if want := byte((i + 1) * 3); rs[r][0] != want {
			t.Fatalf("rank %d reduce_scatter %d, want %d", r, rs[r][0], want)
		}
	}
}

// TestFaultWindowGathersFailures: with a fault reconciliation window, ranks that fail while the
// survivors wait it out are agreed on in the same decision. Rank 2 dies; ranks 0 and 1 meet it
// in an all_reduce and open their windows; rank 3 (which never joined the op) dies while they
// wait; the one decision names both, at epoch 1, and the op completes over ranks 0 and 1.
func TestFaultWindowGathersFailures(t *testing.T) {
	c := newCluster(t, Config{Size: 4, Timeout: 30 * time.Second, AutoDeactivate: true, AutoSync: true})
	wantSum(t, allReduce(t, c, 0, 1, 2, 3), 10)
	pgs := c.groups()
	for _, r := range []int{0, 1} {
		if _, err := pgs[r].Membership(Request{Op: "configure_fault_window", FaultWindowUS: 5_000_000}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pgs[0].Membership(Request{Op: "configure_fault_window", FaultWindowUS: -1}); err == nil {
		t.Fatal("a negative window was accepted")
	}
	c.kill(2)
	res := make(chan map[int]sumOp, 1)
	go func() { res <- allReduce(t, c, 0, 1) }()
	deadline := time.Now().Add(60 * time.Second)
	for !pgs[0].reconciling.Load() || !pgs[1].reconciling.Load() {
		if time.Now().After(deadline) {
			t.Fatal("ranks 0 and 1 never opened their reconciliation windows")
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.kill(3)
	wantSum(t, <-res, 3, 2, 3)
	for _, r := range []int{0, 1} {
		d, err := pgs[r].readDecision(1, time.Second)
		if err != nil || d.Kind != "fault" || !slices.Equal(d.Ranks, []int{2, 3}) || d.Epoch != 1 {
			t.Fatalf("rank %d: decision #1 %+v (%v), want fault [2 3] at epoch 1", r, d, err)
		}
		if pgs[r].Epoch() != 1 || !slices.Equal(active(pgs[r]), []int{0, 1}) {
			t.Fatalf("rank %d: epoch %d active %v", r, pgs[r].Epoch(), active(pgs[r]))
		}
	}
}

// TestSurvivorBehindOnAP2PFault: rank 0 alone met the dead rank 2 (a send) and the group
// agreed on it; rank 1 did no p2p with rank 2 and never looked at the log. Their next
// all_reduce meets different views: both run it again over the agreed view and get the
// survivors' sum, and the group is consistent afterwards.
func TestSurvivorBehindOnAP2PFault(t *testing.T) {
	c := newCluster(t, Config{Size: 3, Timeout: 20 * time.Second, AutoDeactivate: true, AutoSync: true})
	wantSum(t, allReduce(t, c, 0, 1, 2), 6)
	c.kill(2)
	pgs := c.groups()
	w := must(t)(pgs[0].Send([]byte{7}, 2, 5))
	if err := w.Wait(30 * time.Second); err != nil || !slices.Equal(w.FailedRanks(), []int{2}) || pgs[0].Epoch() != 1 {
		t.Fatalf("send to the dead rank: %v, hint %v, epoch %d", err, w.FailedRanks(), pgs[0].Epoch())
	}
	if pgs[1].Epoch() != 0 {
		t.Fatalf("rank 1 applied the decision before its op: epoch %d", pgs[1].Epoch())
	}
	res := allReduce(t, c, 0, 1)
	for r, x := range res {
		if x.err != nil || x.got != 3 {
			t.Fatalf("rank %d: sum %d err %v, want 3", r, x.got, x.err)
		}
	}
	for _, r := range []int{0, 1} {
		if pgs[r].Epoch() != 1 || !slices.Equal(active(pgs[r]), []int{0, 1}) {
			t.Fatalf("rank %d: epoch %d active %v", r, pgs[r].Epoch(), active(pgs[r]))
		}
	}
	wantSum(t, allReduce(t, c, 0, 1), 3)
}
