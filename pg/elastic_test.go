package pg

// The membership protocol with ranks that die: the scenarios tests/test_elastic.py runs with
// real processes under torch, here with every rank in this process on its own engine
// (cluster_test.go), so they run under the race detector and need no torch.

import (
	"encoding/binary"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/collective/reduce"
	"github.com/mooncake-go/mooncake/worker"
)

// sumOp is one rank's int32 all_reduce of rank+1.
type sumOp struct {
	got    int32
	failed []int
	err    error
}

// allReduce runs an int32 all_reduce of rank+1 (64 elements) on ranks at once and returns
// each rank's result, failed-ranks hint and error.
func allReduce(t *testing.T, c *cluster, ranks ...int) map[int]sumOp {
	t.Helper()
	pgs := c.groups()
	bufs := map[int][]byte{}
	works := map[int]*worker.Work{}
	for _, r := range ranks {
		b := make([]byte, 4*64)
		for i := 0; i < 64; i++ {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(r+1))
		}
		bufs[r], works[r] = b, must(t)(pgs[r].AllReduce(b, reduce.Int32, reduce.Sum))
	}
	return each(ranks, func(r int) sumOp {
		w, b := works[r], bufs[r]
		err := w.Wait(30 * time.Second)
		res := sumOp{failed: w.FailedRanks(), err: err}
		if err == nil {
			// Every element must hold the same sum.
			res.got = int32(binary.LittleEndian.Uint32(b))
			for i := 1; i < 64; i++ {
				if v := int32(binary.LittleEndian.Uint32(b[4*i:])); v != res.got {
					t.Errorf("rank %d: element %d is %d, element 0 is %d", r, i, v, res.got)
				}
			}
		}
		return res
	})
}

// wantSum checks that every rank of ranks completed with sum and the failed-ranks hint failed.
func wantSum(t *testing.T, res map[int]sumOp, sum int32, failed ...int) {
	t.Helper()
	for r, x := range res {
		if x.err != nil {
			t.Fatalf("rank %d: %v", r, x.err)
		}
		if x.got != sum || !slices.Equal(x.failed, failed) {
			t.Fatalf("rank %d: sum %d hint %v, want %d and %v", r, x.got, x.failed, sum, failed)
		}
	}
}

func active(g *Group) []int { return ranksOf(g.ActiveRanks()) }

// TestKilledDuringOp: a rank dies while the others run an all_reduce; the op completes over
// the survivors with the dead rank as its hint, the group moves to a new epoch without it, and
// the next op is clean.
func TestKilledDuringOp(t *testing.T) {
	c := newCluster(t, Config{Size: 3, Timeout: 30 * time.Second, AutoDeactivate: true, AutoSync: true})
	wantSum(t, allReduce(t, c, 0, 1, 2), 6)
	c.kill(2)
	wantSum(t, allReduce(t, c, 0, 1), 3, 2)
	for _, r := range []int{0, 1} {
		g := c.groups()[r]
		if g.Epoch() != 1 || !slices.Equal(active(g), []int{0, 1}) || g.WorldSize() != 2 {
			t.Fatalf("rank %d: epoch %d active %v world size %d", r, g.Epoch(), active(g), g.WorldSize())
		}
	}
	wantSum(t, allReduce(t, c, 0, 1), 3)
}

// TestReplaceAndRecover: a killed rank's replacement process starts outside the group (it
// finds that the old process completed set-up and is gone), joins through join_group while
// the survivors call recover_ranks, and the three run collectives and p2p again.
func TestReplaceAndRecover(t *testing.T) {
	c := newCluster(t, Config{Size: 3, Timeout: 30 * time.Second, AutoDeactivate: true, AutoSync: true})
	wantSum(t, allReduce(t, c, 0, 1, 2), 6)
	c.kill(1)
	wantSum(t, allReduce(t, c, 0, 2), 4, 1)
	c.start(func(*Config) {}, 1)
	pgs := c.groups()
	if pgs[1].joined.Load() {
		t.Fatal("the replacement joined the group by itself")
	}
	// Before join_group its ops run over itself alone, and it reports the size it was
	// started with.
	wantSum(t, allReduce(t, c, 1), 2)
	if pgs[1].WorldSize() != 3 || !slices.Equal(active(pgs[1]), []int{1}) {
		t.Fatalf("replacement before join_group: world size %d, active %v", pgs[1].WorldSize(), active(pgs[1]))
	}
	joined := make(chan Result, 1)
	go func() {
		res, err := pgs[1].Membership(Request{Op: "join"})
		if err != nil {
			t.Errorf("join: %v", err)
		}
		joined <- res
	}()
	for r, x := range calls(t, c, Request{Op: "activate", Ranks: []int{1}}, 0, 2) {
		if x.Status != ProposalApplied || x.NewEpoch != 2 || x.NumSynced != 3 {
			t.Fatalf("rank %d recover_ranks: %+v", r, x)
		}
	}
	if x := <-joined; x.Status != ProposalApplied || x.NewEpoch != 2 {
		t.Fatalf("join: %+v", x)
	}
	wantSum(t, allReduce(t, c, 0, 1, 2), 6)
	// p2p with the replacement both ways.
	buf := make([]byte, 100)
	rw := must(t)(pgs[1].Recv(buf, 0, 7))
	waitAll(t, must(t)(pgs[0].Send(make([]byte, 100), 1, 7)), rw)
	rw = must(t)(pgs[0].Recv(buf, 1, 8))
	waitAll(t, must(t)(pgs[1].Send(make([]byte, 100), 0, 8)), rw)
}

// TestCoordinatorKilled: rank 0 (the lowest rank, and the one that proposed the last
// membership change) dies; the others still agree on the failure and go on.
func TestCoordinatorKilled(t *testing.T) {
	c := newCluster(t, Config{Size: 4, Timeout: 30 * time.Second, AutoDeactivate: true, AutoSync: true})
	// Rank 0 proposes a change alone first, so the log's last writer is rank 0.
	if x := calls(t, c, Request{Op: "deactivate", Ranks: []int{3}}, 0, 1, 2)[0]; x.Status != ProposalApplied {
		t.Fatalf("deactivate: %+v", x)
	}
	c.kill(3)
	wantSum(t, allReduce(t, c, 0, 1, 2), 6)
	c.kill(0)
	wantSum(t, allReduce(t, c, 1, 2), 5, 0)
	for _, r := range []int{1, 2} {
		if g := c.groups()[r]; !slices.Equal(active(g), []int{1, 2}) || g.Epoch() != 2 {
			t.Fatalf("rank %d: active %v epoch %d", r, active(g), g.Epoch())
		}
	}
	wantSum(t, allReduce(t, c, 1, 2), 5)
}

// TestManualMode: with auto_deactivate and auto_sync off, a dead rank stays active but out of
// the ops, and every op names it in its hint, until the program calls deactivate_ranks; then
// recover_ranks admits a replacement.
func TestManualMode(t *testing.T) {
	c := newCluster(t, Config{Size: 3, Timeout: 30 * time.Second})
	wantSum(t, allReduce(t, c, 0, 1, 2), 6)
	c.kill(2)
	wantSum(t, allReduce(t, c, 0, 1), 3, 2)
	g0 := c.groups()[0]
	if g0.Epoch() != 0 || !slices.Equal(active(g0), []int{0, 1, 2}) {
		t.Fatalf("after the failure: epoch %d active %v (the dead rank stays active)", g0.Epoch(), active(g0))
	}
	wantSum(t, allReduce(t, c, 0, 1), 3, 2) // still excluded, still in the hint
	// sync_after_failure in manual mode takes the agreed view and reports the outstanding
	// failure; membership stays as it is.
	if x := calls(t, c, Request{Op: "sync"}, 0)[0]; x.Status != SyncReconciled || x.NewEpoch != 0 {
		t.Fatalf("sync_after_failure in manual mode: %+v", x)
	}
	for r, x := range calls(t, c, Request{Op: "deactivate", Ranks: []int{2}}, 0, 1) {
		if x.Status != ProposalApplied || x.NewEpoch != 1 {
			t.Fatalf("rank %d deactivate_ranks: %+v", r, x)
		}
	}
	wantSum(t, allReduce(t, c, 0, 1), 3)
	c.start(func(*Config) {}, 2)
	joined := make(chan error, 1)
	go func() {
		_, err := c.groups()[2].Membership(Request{Op: "join"})
		joined <- err
	}()
	for r, x := range calls(t, c, Request{Op: "activate", Ranks: []int{2}}, 0, 1) {
		if x.Status != ProposalApplied {
			t.Fatalf("rank %d recover_ranks: %+v", r, x)
		}
	}
	if err := <-joined; err != nil {
		t.Fatal(err)
	}
	wantSum(t, allReduce(t, c, 0, 1, 2), 6)
}

// TestAdmissionAlreadyInLog: one survivor admits the replacement before the replacement calls
// join_group, so it finds the decision in the log at once (a catch-up, not a wait); it must
// still wait for the other survivor's acknowledgement before it sends anything: that survivor
// resets what it receives from rank 2 when it points its link at the new process, and a
// message that arrived before would be thrown away (the CI flake of test_elastic_parity's
// manual mode, where the survivor then counted ranks that had finished as failed).
func TestAdmissionAlreadyInLog(t *testing.T) {
	c := newCluster(t, Config{Size: 3, Timeout: 30 * time.Second})
	wantSum(t, allReduce(t, c, 0, 1, 2), 6)
	c.kill(2)
	wantSum(t, allReduce(t, c, 0, 1), 3, 2)
	calls(t, c, Request{Op: "deactivate", Ranks: []int{2}}, 0, 1)
	c.start(func(*Config) {}, 2)
	if x := calls(t, c, Request{Op: "activate", Ranks: []int{2}}, 1)[1]; x.Status != ProposalApplied {
		t.Fatalf("rank 1 recover_ranks: %+v", x)
	}
	joined := make(chan error, 1)
	go func() {
		_, err := c.groups()[2].Membership(Request{Op: "join"})
		joined <- err
	}()
	select {
	case err := <-joined:
		t.Fatalf("join_group returned (%v) before rank 0 acknowledged the admission", err)
	case <-time.After(300 * time.Millisecond):
	}
	if x := calls(t, c, Request{Op: "activate", Ranks: []int{2}}, 0)[0]; x.Status != ProposalApplied {
		t.Fatalf("rank 0 recover_ranks: %+v", x)
	}
	if err := <-joined; err != nil {
		t.Fatal(err)
	}
	wantSum(t, allReduce(t, c, 0, 1, 2), 6)
}

// TestExtendWithSubgroup: a group of 2 with 4 slots grows to 4 with two is_extension ranks;
// then a subgroup of an original rank and a joiner, made on the same engines, runs its own
// collectives beside the big group.
func TestExtendWithSubgroup(t *testing.T) {
	c := newCluster(t, Config{Size: 2, MaxSize: 4, Timeout: 30 * time.Second, AutoDeactivate: true, AutoSync: true})
	wantSum(t, allReduce(t, c, 0, 1), 3)
	c.start(func(cfg *Config) { cfg.IsExtension = true }, 2, 3)
	pgs := c.groups()
	var wg sync.WaitGroup
	for _, r := range []int{2, 3} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if x, err := pgs[r].Membership(Request{Op: "join"}); err != nil || x.Status != ProposalApplied {
				t.Errorf("rank %d join: %+v %v", r, x, err)
			}
		}()
	}
	for r, x := range calls(t, c, Request{Op: "extend", Size: 4}, 0, 1) {
		if x.Status != ProposalApplied || x.NumSynced != 4 {
			t.Fatalf("rank %d extend_group_size_to: %+v", r, x)
		}
	}
	wg.Wait()
	for r, g := range pgs {
		if g.WorldSize() != 4 {
			t.Fatalf("rank %d: world size %d after the extension", r, g.WorldSize())
		}
	}
	wantSum(t, allReduce(t, c, 0, 1, 2, 3), 10)

	// The subgroup [0, 2]: its own name, sizes and ranks, on the ranks' engines.
	sub := make([]*Group, 2)
	errs := make([]error, 2)
	for i, r := range []int{0, 2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub[i], errs[i] = c.newOn(r, Config{Rank: i, Size: 2, Timeout: 30 * time.Second, Name: t.Name() + "/sub"})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("subgroup rank %d: %v", i, err)
		}
	}
	bufs := [][]byte{{1, 0, 0, 0}, {5, 0, 0, 0}}
	var ws []*worker.Work
	for i, g := range sub {
		ws = append(ws, must(t)(g.AllReduce(bufs[i], reduce.Int32, reduce.Sum)))
	}
	waitAll(t, ws...)
	if bufs[0][0] != 6 || bufs[1][0] != 6 {
		t.Fatalf("subgroup all_reduce: %v", bufs)
	}
	wantSum(t, allReduce(t, c, 0, 1, 2, 3), 10)
}

// TestLeaveAndRejoin: a rank deactivates itself before closing its group; the survivor sees
// it inactive, goes on alone, and admits it again when the same process re-initialises the
// group (it finds itself out of the group in the decision log and joins).
func TestLeaveAndRejoin(t *testing.T) {
	c := newCluster(t, Config{Size: 2, Timeout: 30 * time.Second, AutoDeactivate: true, AutoSync: true})
	wantSum(t, allReduce(t, c, 0, 1), 3)
	if x := calls(t, c, Request{Op: "deactivate", Ranks: []int{1}}, 1)[1]; x.Status != ProposalApplied || x.NewEpoch != 1 {
		t.Fatalf("deactivate_ranks(own rank): %+v", x)
	}
	c.reinit(1, func() {
		g0 := c.groups()[0]
		if got := g0.ActiveRanks(); !slices.Equal(got, []bool{true, false}) || g0.WorldSize() != 1 {
			t.Fatalf("survivor after the leave: active %v world size %d", got, g0.WorldSize())
		}
		wantSum(t, allReduce(t, c, 0), 1) // alone, and no failure: the rank left
	})
	joined := make(chan error, 1)
	go func() {
		_, err := c.groups()[1].Membership(Request{Op: "join"})
		joined <- err
	}()
	if x := calls(t, c, Request{Op: "activate", Ranks: []int{1}}, 0)[0]; x.Status != ProposalApplied || x.NewEpoch != 2 {
		t.Fatalf("recover_ranks: %+v", x)
	}
	if err := <-joined; err != nil {
		t.Fatal(err)
	}
	wantSum(t, allReduce(t, c, 0, 1), 3)
	pgs := c.groups()
	buf := make([]byte, 64)
	rw := must(t)(pgs[0].Recv(buf, 1, 5))
	waitAll(t, must(t)(pgs[1].Send(make([]byte, 64), 0, 5)), rw)
}

// TestSendToDeadRank: a send to a rank whose process is gone completes without error, with
// that rank in the hint.
func TestSendToDeadRank(t *testing.T) {
	c := newCluster(t, Config{Size: 3, Timeout: 30 * time.Second, AutoDeactivate: true, AutoSync: true})
	wantSum(t, allReduce(t, c, 0, 1, 2), 6)
	c.kill(2)
	// A rank that has exited, as a process would some time before the send: the check after a
	// send into shared memory probes a peer silent for deadPeerCheck.
	time.Sleep(2 * deadPeerCheck)
	w := must(t)(c.groups()[0].Send(make([]byte, 1000), 2, 1))
	if err := w.Wait(20 * time.Second); err != nil || !slices.Equal(w.FailedRanks(), []int{2}) {
		t.Fatalf("send to a dead rank: %v, hint %v", err, w.FailedRanks())
	}
	// A live peer's send is clean.
	pgs := c.groups()
	rw := must(t)(pgs[1].Recv(make([]byte, 8), 0, 1))
	sw := must(t)(pgs[0].Send(make([]byte, 8), 1, 1))
	waitAll(t, sw, rw)
	if len(sw.FailedRanks()) != 0 {
		t.Fatalf("send to a live rank: hint %v", sw.FailedRanks())
	}
}

// TestOutputsByActiveRanks: after a failure, the lists of size-dependent collectives may have
// one entry per active rank (upstream's layout, in rank order of the active mask) or one per
// rank below the world size (the dead rank's entry untouched); anything else is a clear error.
func TestOutputsByActiveRanks(t *testing.T) {
	c := newCluster(t, Config{Size: 4, Timeout: 30 * time.Second, AutoDeactivate: true, AutoSync: true})
	wantSum(t, allReduce(t, c, 0, 1, 2, 3), 10)
	c.kill(1)
	wantSum(t, allReduce(t, c, 0, 2, 3), 8, 1)
	live := []int{0, 2, 3}
	pgs := c.groups()
	for _, compact := range []bool{true, false} {
		n := 4
		if compact {
			n = 3
		}
		outs := map[int][][]byte{}
		var ws []*worker.Work
		for _, r := range live {
			o := make([][]byte, n)
			for i := range o {
				o[i] = []byte{0xee}
			}
			outs[r] = o
			ws = append(ws, must(t)(pgs[r].AllGather([]byte{byte(r + 1)}, o)))
		}
		waitAll(t, ws...)
		for _, r := range live {
			want := [][]byte{{1}, {3}, {4}}
			if !compact {
				want = [][]byte{{1}, {0xee}, {3}, {4}}
			}
			if !slices.EqualFunc(outs[r], want, slices.Equal) {
				t.Fatalf("compact %v: rank %d all_gather %v, want %v", compact, r, outs[r], want)
			}
		}
	}
	// reduce_scatter with one input per active rank: rank r receives the sum of the entries
	// for its position among the active ranks.
	outs := map[int][]byte{}
	var ws []*worker.Work
	for _, r := range live {
		ins := [][]byte{{byte(r)}, {byte(10 + r)}, {byte(20 + r)}}
		outs[r] = []byte{0}
		ws = append(ws, must(t)(pgs[r].ReduceScatter(ins, outs[r], reduce.Uint8, reduce.Sum)))
	}
	waitAll(t, ws...)
	for i, r := range live {
		if want := byte(10*i*3 + 0 + 2 + 3); outs[r][0] != want {
			t.Fatalf("rank %d reduce_scatter %d, want %d", r, outs[r][0], want)
		}
	}
	// Fewer outputs than active ranks: the op probes the group when it runs (its peers may have
	// met a failure this rank has not); nobody is dead, so it fails with the layout error.
	w, err := pgs[0].AllGather([]byte{1}, make([][]byte, 2))
	if err == nil {
		err = w.Wait(-1)
	}
	if err == nil || !strings.Contains(err.Error(), "give one per rank or one per active rank") {
		t.Fatalf("a list of 2 outputs: %v", err)
	}
}

// TestLateRankTakesTheRerun: rank 2 dies; rank 1 meets it in an all_reduce, the group decides
// (epoch 1) and rank 1 runs the op again over the survivors. Rank 0 reaches that op late, after
// the decision is in the log, and applies it first (get_active_ranks between ops): its op must
// be the rerun, not the aborted first attempt, so both complete with the survivors' sum
// (tests/test_elastic.py's send_recv case: the rank that spent time on a dead peer waited at the
// aborted op while the others waited for it at the rerun, until both timed out).
func TestLateRankTakesTheRerun(t *testing.T) {
	c := newCluster(t, Config{Size: 3, Timeout: 10 * time.Second, AutoDeactivate: true, AutoSync: true})
	wantSum(t, allReduce(t, c, 0, 1, 2), 6)
	c.kill(2)
	pgs := c.groups()
	b1 := make([]byte, 4)
	binary.LittleEndian.PutUint32(b1, 2)
	w1 := must(t)(pgs[1].AllReduce(b1, reduce.Int32, reduce.Sum))
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ok, err := pgs[1].st.Check(pgs[1].key("dec", 1)); err == nil && ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("rank 1 never recorded the failure")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := active(pgs[0]); !slices.Equal(got, []int{0, 1}) || pgs[0].Epoch() != 1 {
		t.Fatalf("rank 0 after its catch-up: active %v epoch %d", got, pgs[0].Epoch())
	}
	b0 := make([]byte, 4)
	binary.LittleEndian.PutUint32(b0, 1)
	w0 := must(t)(pgs[0].AllReduce(b0, reduce.Int32, reduce.Sum))
	for r, w := range map[int]*worker.Work{0: w0, 1: w1} {
		if err := w.Wait(30 * time.Second); err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if s0, s1 := binary.LittleEndian.Uint32(b0), binary.LittleEndian.Uint32(b1); s0 != 3 || s1 != 3 {
		t.Fatalf("sums %d (rank 0), %d (rank 1), want 3", s0, s1)
	}
	wantSum(t, allReduce(t, c, 0, 1), 3)
}
