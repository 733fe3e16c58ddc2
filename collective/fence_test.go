package collective

import (
	"errors"
	"sync"
	"testing"
)

// twoArenas returns rank 0's and rank 1's outcome words over two arenas, as each maps them.
func twoArenas() (*fences, *fences) {
	views := [][]byte{make([]byte, offHeaders), make([]byte, offHeaders)}
	return newFences(0, views), newFences(1, views)
}

func TestFenceOutcomes(t *testing.T) {
	f0, f1 := twoArenas()
	// Committed first: the peer's fence finds it arrived.
	if err := f1.commit("all_reduce", 5, 0); err != nil {
		t.Fatal(err)
	}
	if f0.fence(1, 5, 0) {
		t.Fatal("fence of a rank that committed the op succeeded")
	}
	// Fenced first: the rank's commit of that op fails, naming the fencer and the op.
	if !f0.fence(1, 6, 0) {
		t.Fatal("fence failed")
	}
	err := f1.commit("all_reduce", 6, 0)
	var fe *FencedError
	if !errors.As(err, &fe) || fe.By != 0 || fe.Seq != 6 || fe.Rank != 1 {
		t.Fatalf("commit after a fence: %v", err)
	}
	// The failed op consumes the fence: the next op commits (the group kept the rank).
	f1.failed(6)
	if err := f1.commit("all_reduce", 7, 0); err != nil {
		t.Fatal(err)
	}
	// A fence from a rank at another view (a stale one) does not stop ranks that moved on.
	f0.fence(1, 8, 0)
	if err := f1.commit("all_reduce", 8, 1); err != nil {
		t.Fatalf("a stale view's fence failed the op: %v", err)
	}
	// A fence for a later op stays while the rank finishes an earlier one.
	f0.fence(1, 10, 1)
	if err := f1.commit("all_reduce", 9, 1); err != nil {
		t.Fatal(err)
	}
	if err := f1.commit("all_reduce", 10, 1); err == nil {
		t.Fatal("the op a peer fenced committed")
	}
	// Re-admission forgets the fence.
	f1.reset()
	if err := f1.commit("all_reduce", 11, 2); err != nil {
		t.Fatal(err)
	}
}

// TestFenceRace: a commit and a fence of the same op race; exactly one wins, every time.
func TestFenceRace(t *testing.T) {
	f0, f1 := twoArenas()
	for seq := uint64(1); seq <= 20000; seq++ {
		var committed error
		var fenced bool
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); committed = f1.commit("barrier", seq, 0) }()
		go func() { defer wg.Done(); fenced = f0.fence(1, seq, 0) }()
		wg.Wait()
		if (committed == nil) == fenced {
			t.Fatalf("op %d: commit error %v, fence won %v: both or neither won", seq, committed, fenced)
		}
		if committed != nil {
			f1.failed(seq)
		}
	}
}
