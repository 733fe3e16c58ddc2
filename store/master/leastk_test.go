package master

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestLeastK: for inputs in random, sorted, reversed and organ-pipe order, with many equal
// access times (ties broken by key), leastK returns exactly the first k of a full sort.
func TestLeastK(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	shapes := map[string]func([]*object){
		"random":     func(xs []*object) { rng.Shuffle(len(xs), func(i, j int) { xs[i], xs[j] = xs[j], xs[i] }) },
		"sorted":     func(xs []*object) { slices.SortFunc(xs, lruOrder) },
		"reversed":   func(xs []*object) { slices.SortFunc(xs, func(a, b *object) int { return lruOrder(b, a) }) },
		"organ pipe": func(xs []*object) { slices.SortFunc(xs, lruOrder); slices.Reverse(xs[len(xs)/2:]) },
	}
	for _, n := range []int{0, 1, 2, 3, 5, 13, 64, 257, 4000} {
		objs := make([]*object, n)
		for i := range objs {
			objs[i] = &object{key: fmt.Sprintf("k%05d", rng.IntN(1_000_000)*10+i%10) + fmt.Sprint(i), lastAccess: int64(rng.IntN(max(1, n/8)))}
		}
		want := slices.Clone(objs)
		slices.SortFunc(want, lruOrder)
		for name, shape := range shapes {
			for _, k := range []int{0, 1, n / 10, n / 2, n - 1, n, n + 3} {
				xs := slices.Clone(objs)
				shape(xs)
				got := leastK(xs, k, lruOrder)
				if w := want[:max(0, min(k, n))]; !slices.Equal(got, w) {
					t.Fatalf("n=%d %s k=%d: got %d objects, not the first %d of the sorted order", n, name, k, len(got), len(w))
				}
			}
		}
	}
	// Plain integers too, the comparator being the only thing leastK knows of its elements.
	xs := rng.Perm(100_000)
	got := leastK(xs, 500, cmp.Compare[int])
	for i, v := range got {
		if v != i || len(got) != 500 {
			t.Fatalf("leastK of a permutation of 0..99999 gave %d at %d (of %d), want 0..499", v, i, len(got))
		}
	}
}
