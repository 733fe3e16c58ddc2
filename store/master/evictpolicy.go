package master

import (
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
//     among them, then the rest least recently used first.
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
// policy. The prefix policy's reads each object's chain node (chains.go), kept up as objects
// come and go, so it costs a pass no more than lru's: every object it compares is resident.
func (s *State) victimOrder() func(a, b *object) int {
	if s.cfg.EvictionPolicy != EvictionPrefix {
		return lruOrder
	}
	return prefixOrder
}

// prefixOrder: objects that are no resident object's parent first, then by lruOrder.
func prefixOrder(a, b *object) int {
	ca, cb := hasCachedChild(a), hasCachedChild(b)
	if ca != cb {
		if ca {
			return 1
		}
		return -1
	}
	return lruOrder(a, b)
}
