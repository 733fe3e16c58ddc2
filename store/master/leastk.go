package master

import (
	"math/bits"
	"slices"
)

// leastK reorders xs so that xs[:k] holds its k least elements by cmp, in cmp's order, and
// returns xs[:k] (all of xs, sorted, when k >= len(xs)). cmp must be a strict total order on xs
// (no two elements compare equal); then the result does not depend on xs's initial order.
//
// It is a quickselect (median-of-three pivots) that sorts what is left of its range once it
// has partitioned more than twice the depth a balanced run needs, so it stays O(n log n) at
// worst and is O(n) on average, against the O(n log n) of sorting all of xs to keep k of them.
func leastK[T any](xs []T, k int, cmp func(a, b T) int) []T {
	if k >= len(xs) {
		slices.SortFunc(xs, cmp)
		return xs
	}
	if k <= 0 {
		return xs[:0]
	}
	// Invariant: every element of xs[:lo] is below every element of xs[lo:], every element of
	// xs[hi:] above every element of xs[:hi], and lo <= k <= hi; done once lo or hi is k.
	lo, hi := 0, len(xs)
	budget := 2 * bits.Len(uint(len(xs)))
	for lo < k && k < hi {
		if budget == 0 || hi-lo <= 12 {
			slices.SortFunc(xs[lo:hi], cmp)
			break
		}
		budget--
		p := lo + partition(xs[lo:hi], cmp)
		if p < k {
			lo = p + 1
		} else {
			hi = p
		}
	}
	slices.SortFunc(xs[:k], cmp)
	return xs[:k]
}

// partition moves the median of xs's first, middle and last elements to its place: what is
// below it before, what is above after. It returns its index. len(xs) >= 3.
func partition[T any](xs []T, cmp func(a, b T) int) int {
	n := len(xs)
	m := n / 2
	if cmp(xs[m], xs[0]) < 0 {
		xs[m], xs[0] = xs[0], xs[m]
	}
	if cmp(xs[n-1], xs[0]) < 0 {
		xs[n-1], xs[0] = xs[0], xs[n-1]
	}
	if cmp(xs[m], xs[n-1]) < 0 {
		xs[m], xs[n-1] = xs[n-1], xs[m]
	}
	pivot := xs[n-1] // the median of the three
	i := 0
	for j := range n - 1 {
		if cmp(xs[j], pivot) < 0 {
			xs[i], xs[j] = xs[j], xs[i]
			i++
		}
	}
	xs[i], xs[n-1] = xs[n-1], xs[i]
	return i
}
