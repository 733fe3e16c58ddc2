package pg

// The transfer seam's failed transfers (linkfault.go) with every rank in this process: rank 1's
// Options.TransferCheck reports its transfers to rank 0 failed while a flag is set (the role of
// an LD_PRELOADed injector; tests/test_transfer_seam.py runs the real seam under torch).

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/engine"
)

// seamCluster starts two ranks; rank 1's seam fails its transfers to rank 0 while *failing.
func seamCluster(t *testing.T, failing *atomic.Bool, autoSync bool) *cluster {
	t.Helper()
	base := Config{Name: t.Name(), Size: 2, MaxSize: 2, Timeout: 30 * time.Second, AutoDeactivate: true, AutoSync: autoSync}
	c := &cluster{t: t, kv: NewMemStore(), base: base, pgs: make([]*Group, 2), engs: make([]*engine.Engine, 2)}
	t.Cleanup(c.closeAll)
	check := func(ranks []int, n int) ([]int, error) {
		if !failing.Load() || !slices.Contains(ranks, 0) {
			return nil, nil
		}
		return []int{0}, nil
	}
	c.start(func(cfg *Config) {
		if cfg.Rank == 1 {
			cfg.Options.TransferCheck = check
		}
	}, 0, 1)
	return c
}

// rejoin1 has rank 1 join again and rank 0 admit it; the next all_reduce is exact.
func rejoin1(t *testing.T, c *cluster, epoch int64) {
	t.Helper()
	if e := c.groups()[0].CurrentEpoch(); e != epoch-1 { // as upstream's test waits for it
		t.Fatalf("rank 0 before the rejoin: epoch %d, want %d", e, epoch-1)
	}
	if c.groups()[0].peerState([]int{1})[0] {
		t.Fatal("rank 1 can be activated before it asked to join (a join request of its earlier rejoin still stands)")
	}
	joined := make(chan error, 1)
	go func() {
		_, err := c.groups()[1].Membership(Request{Op: "join"})
		joined <- err
	}()
	// as a program waits with get_peer_state before activate_ranks
	for end := time.Now().Add(20 * time.Second); !c.groups()[0].peerState([]int{1})[0]; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("rank 1's join request did not appear")
		}
	}
	if x := calls(t, c, Request{Op: "activate", Ranks: []int{1}}, 0)[0]; x.Status != ProposalApplied || x.NewEpoch != epoch {
		t.Fatalf("activate_ranks([1]): %+v", x)
	}
	if err := <-joined; err != nil {
		t.Fatal(err)
	}
	wantSum(t, allReduce(t, c, 0, 1), 3)
}

// TestSeamFailsCollective: rank 1's all_reduce meets its failed transfers to rank 0 (which
// answers probes): it completes without an error, rank 0 in its hint, after rank 1 left the
// group (fenced, the group's view [0]); rank 0 learns the epoch without an op; rank 1 rejoins.
func TestSeamFailsCollective(t *testing.T) {
	var failing atomic.Bool
	c := seamCluster(t, &failing, true)
	wantSum(t, allReduce(t, c, 0, 1), 3)
	failing.Store(true)
	res := allReduce(t, c, 0, 1)
	failing.Store(false)
	if x := res[1]; x.err != nil || x.got != 3 || !slices.Equal(x.failed, []int{0}) {
		t.Fatalf("rank 1 (its transfers failed): %+v, want sum 3 flagged with [0]", x)
	}
	if x := res[0]; x.err != nil || (x.got != 3 && !slices.Equal(x.failed, []int{1})) {
		t.Fatalf("rank 0: %+v, want 3, or its own value flagged", x)
	}
	g := c.groups()
	if got := active(g[1]); !slices.Equal(got, []int{0}) || g[1].Epoch() != 1 || g[1].fenced.Load() == nil {
		t.Fatalf("rank 1 after its fault: active %v epoch %d fenced %v", got, g[1].Epoch(), g[1].fenced.Load() != nil)
	}
	if e := g[0].CurrentEpoch(); e != 1 || !slices.Equal(active(g[0]), []int{0}) {
		t.Fatalf("rank 0: epoch %d active %v, want 1 and [0]", e, active(g[0]))
	}
	rejoin1(t, c, 2)
	// the same process leaves and rejoins once more
	failing.Store(true)
	res = allReduce(t, c, 0, 1)
	failing.Store(false)
	if x := res[1]; x.err != nil || !slices.Equal(x.failed, []int{0}) || g[1].Epoch() != 3 {
		t.Fatalf("rank 1, second fault: %+v epoch %d", x, g[1].Epoch())
	}
	rejoin1(t, c, 4)
}

// TestSeamFailsSend: rank 1's send to rank 0 meets a failed transfer: it completes flagged
// after rank 1 left; its receive posted from rank 0 completes flagged too (rank 0 sends it
// nothing once it knows), and a send from rank 0 that waits on rank 1 ends when rank 0 reads
// the decision, not at its deadline.
func TestSeamFailsSend(t *testing.T) {
	var failing atomic.Bool
	c := seamCluster(t, &failing, true)
	wantSum(t, allReduce(t, c, 0, 1), 3)
	g := c.groups()
	failing.Store(true)
	rw := must(t)(g[1].Recv(make([]byte, 64), 0, 7))
	sw := must(t)(g[1].Send(make([]byte, 64), 0, 7))
	if err := sw.Wait(20 * time.Second); err != nil || !slices.Equal(sw.FailedRanks(), []int{0}) {
		t.Fatalf("rank 1's send: %v, hint %v", err, sw.FailedRanks())
	}
	failing.Store(false)
	if got := active(g[1]); !slices.Equal(got, []int{0}) || g[1].Epoch() != 1 {
		t.Fatalf("rank 1 after its send: active %v epoch %d", got, g[1].Epoch())
	}
	start := time.Now()
	if err := rw.Wait(20 * time.Second); err != nil || !slices.Equal(rw.FailedRanks(), []int{0}) {
		t.Fatalf("rank 1's receive: %v, hint %v", err, rw.FailedRanks())
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("rank 1's receive took %s to end", d) // its deadline is 30 s
	}
	// rank 0 took rank 1's message; its own exchange completes too
	if err := must(t)(g[0].Recv(make([]byte, 64), 1, 7)).Wait(20 * time.Second); err != nil {
		t.Fatalf("rank 0's receive of the message rank 1 sent: %v", err)
	}
	if e := g[0].CurrentEpoch(); e != 1 {
		t.Fatalf("rank 0: epoch %d, want 1", e)
	}
	rejoin1(t, c, 2)
}

// TestSeamWithoutAutoSync: the op is flagged and membership does not change.
func TestSeamWithoutAutoSync(t *testing.T) {
	var failing atomic.Bool
	c := seamCluster(t, &failing, false)
	failing.Store(true)
	res := allReduce(t, c, 0, 1)
	failing.Store(false)
	if x := res[1]; x.err != nil || !slices.Equal(x.failed, []int{0}) {
		t.Fatalf("rank 1: %+v, want flagged with [0]", x)
	}
	wantSum(t, allReduce(t, c, 0, 1), 3)
	if g := c.groups(); g[1].Epoch() != 0 || g[0].CurrentEpoch() != 0 {
		t.Fatalf("epochs %d %d, want 0", g[1].Epoch(), g[0].Epoch())
	}
}
