package master

import (
	"cmp"
	"fmt"
	"strings"
)

// Eviction policies (--eviction_policy): the order in which evictPass takes its victims.
// Each is a strict total order over objects (ties broken by key), computed from the replicated
// state alone, so a standby applying the oplog with the same flags evicts the same objects.
//
//   - lru: least recently used first (the default, upstream's).
//   - prefix: chain tails first. A key of the form "NAME|PARENT" names a block whose value
//     extends the block stored under the key whose NAME part is PARENT (a KV-cache block and
//     the block before it); a key without "|" is a chain of its own. A block with a child in
//     memory is worth more than one without: only a cached prefix of a chain is usable, so
//     evicting a block whose successors are cached makes them useless too. The prefix policy
//     takes objects that are no resident object's parent first, least recently used first
//     among them, then the rest least recently used first. With the G3 file tier a victim
//     moves to G3 and stays usable, and the policy is least recently used first, chain tails
//     first among objects used at the same time (prefixTierOrder).
const (
	EvictionLRU    = "lru"
	EvictionPrefix = "prefix"
)

// ParentSep separates a key's own name from its parent's name under the prefix policy.
const ParentSep = "|"

func validEvictionPolicy(p string) error {
	switch p {
	case EvictionLRU, EvictionPrefix:
		return nil
	}
	return fmt.Errorf("--eviction_policy=%q: want %s or %s", p, EvictionLRU, EvictionPrefix)
}

// keyName is the part of key before ParentSep (all of it without one).
func keyName(key string) string {
	if i := strings.Index(key, ParentSep); i >= 0 {
		return key[:i]
	}
	return key
}

// keyParent is the part of key after ParentSep, and whether it has one.
func keyParent(key string) (string, bool) {
	if i := strings.Index(key, ParentSep); i >= 0 {
		return key[i+len(ParentSep):], true
	}
	return "", false
}

// victimOrder returns the comparison evictPass selects its victims by under the configured
// policy. The prefix policy's read each object's chain node (chains.go), kept up as objects
// come and go, so they cost a pass no more than lru's: every object compared is resident.
func (s *State) victimOrder() func(a, b *object) int {
	switch {
	case s.cfg.EvictionPolicy != EvictionPrefix:
		return lruOrder
	case s.cfg.RootFSDir != "":
		return prefixTierOrder
	}
	return prefixOrder
}

// prefixOrder, the prefix policy without a file tier: objects that are no resident object's
// parent first, then by lruOrder. An evicted parent is lost, and its cached successors with it.
func prefixOrder(a, b *object) int {
	if c := tailsFirst(a, b); c != 0 {
		return c
	}
	return lruOrder(a, b)
}

// prefixTierOrder, the prefix policy with the G3 file tier: least recently used first, chain
// tails first among objects used at the same time (a chain read in one batch), then by key.
// Here a victim moves to G3, where it stays usable, so an evicted parent does not cost its
// successors; what costs hits is sending recently used tails to G3 ahead of older parents,
// where --dfs_full_policy=evict_oldest drops them first (docs/performance.md, "Serving trace").
func prefixTierOrder(a, b *object) int {
	if a.lastAccess != b.lastAccess {
		return cmp.Compare(a.lastAccess, b.lastAccess)
	}
	if c := tailsFirst(a, b); c != 0 {
		return c
	}
	return strings.Compare(a.key, b.key)
}

// tailsFirst orders an object with no resident child before one with.
func tailsFirst(a, b *object) int {
	ca, cb := hasCachedChild(a), hasCachedChild(b)
	switch {
	case ca == cb:
		return 0
	case ca:
		return 1
	}
	return -1
}
