package master

// The value cache: a small value's bytes kept beside its object, so that a get is one round
// trip (GetReplicaList answers with the bytes) instead of a master call and a transfer.
//
// A client that puts a value of at most MC_STORE_SMALL_VALUE_BYTES sends the bytes it has just
// written to every replica with its PutEnd (Entry.Value). putEnd keeps them when they are the
// object's size, at most maxCachedValue, and fit in --small_value_cache_bytes; grantLease
// answers with them while the object has a memory copy. Everything else about the object is
// unchanged: its replicas are allocated and written as for any put, so capacity, eviction (both
// policies), the storage tiers, replica tasks, ranges, sessions and get_replica_desc see what
// they always saw, and the cached bytes are only a second copy of a replica's. They go with the
// object (removed, evicted, replaced by an upsert, its last memory copy dropped).
//
// The bytes are part of the state: the PutEnd entry carries them, so the HA operation log and
// the snapshots do, and a standby or a restored master answers gets with the same bytes; the
// decisions (keep, drop) are made in Apply from the entry and the state alone, so every
// replica of the state holds the same cache.

// maxCachedValue is the largest value the cache keeps, whatever a client sends.
const maxCachedValue = 64 << 10

// cacheValue keeps v as o's bytes when it may (o complete, v its size, room in the budget).
func (s *State) cacheValue(o *object, v []byte) {
	if len(v) == 0 || o.value != nil || uint64(len(v)) != o.size || o.size > maxCachedValue ||
		len(o.replicas) == 0 || s.valueBytes+o.size > s.cfg.SmallValueCacheBytes {
		return
	}
	o.value = v
	s.valueBytes += o.size
}

// dropValue forgets o's cached bytes.
func (s *State) dropValue(o *object) {
	if o.value != nil {
		s.valueBytes -= o.size
		o.value = nil
	}
}

// cachedValue is what grantLease answers with: o's bytes while it has a memory copy.
func (s *State) cachedValue(o *object) []byte {
	if o.value == nil || !s.inMemory(o) {
		return nil
	}
	return o.value
}

// CachedValueBytes is the bytes the value cache holds.
func (s *State) CachedValueBytes() uint64 { return s.valueBytes }
