package pg

import (
	"fmt"
	"time"
)

// Store is the rendezvous store every rank of a group shares: torch's c10d store (reached
// through the shim's callbacks) in production, an in-memory map in tests. It holds the
// published endpoints and the membership decision log.
type Store interface {
	Set(key string, val []byte) error
	// Get waits up to timeout for key.
	Get(key string, timeout time.Duration) ([]byte, error)
	// Check reports whether key exists, without waiting.
	Check(key string) (bool, error)
	// Add adds delta to the integer under key (0 when missing) and returns the new value.
	Add(key string, delta int64) (int64, error)
}

// groupKey is a key of group's own namespace: "<group>/mooncake/<parts...>".
func groupKey(group string, parts ...any) string {
	k := group + "/mooncake"
	for _, p := range parts {
		k += "/" + fmt.Sprint(p)
	}
	return k
}

// endpointKey is where rank publishes its p2p endpoint.
func endpointKey(group string, rank int) string { return groupKey(group, "ep", rank) }

// key is a key of this group's namespace.
func (pg *Group) key(parts ...any) string { return groupKey(pg.cfg.Name, parts...) }
