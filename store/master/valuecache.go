package master

import "slices"

// The value cache: a small value's bytes kept beside its object, so that a get is one round
// trip (GetReplicaList answers with the bytes) instead of a master call and a transfer.
//
// A client that puts a value of at most MC_STORE_SMALL_VALUE_BYTES sends the bytes it has just
// written to every replica with its PutEnd (Entry.Value). putEnd keeps them when they are the
// object's size and at most maxCachedValue, within --small_value_cache_bytes (the least recently
// used values make room for a new one); grantLease answers with them while the object has a
// memory copy. Everything else about the object is
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

// When a new value does not fit, the values of the objects least recently used (lastAccess:
// their last put, get or promotion) make room, as long as they are older than the new one; the
// objects stay, and their gets read a replica again. The order is eviction's (lruOrder:
// lastAccess, then key): every replica of the state has the same one, since lastAccess moves
// only in Apply (gets included: a lease grant is an entry), and a decoded snapshot sorts by it
// (linkValues).

// valueList is the objects holding cached bytes, least recently used first, linked through
// object.valuePrev and valueNext.
type valueList struct{ head, tail *object }

// insert links o at its place, searching from the most recently used end (where a new or
// just-read value goes, so the search is one step but for ties of lastAccess).
func (l *valueList) insert(o *object) {
	p := l.tail
	for p != nil && lruOrder(o, p) < 0 {
		p = p.valuePrev
	}
	o.valuePrev = p
	if p == nil {
		o.valueNext, l.head = l.head, o
	} else {
		o.valueNext, p.valueNext = p.valueNext, o
	}
	if o.valueNext == nil {
		l.tail = o
	} else {
		o.valueNext.valuePrev = o
	}
}

// unlink takes o out of the list.
func (l *valueList) unlink(o *object) {
	if o.valuePrev == nil {
		l.head = o.valueNext
	} else {
		o.valuePrev.valueNext = o.valueNext
	}
	if o.valueNext == nil {
		l.tail = o.valuePrev
	} else {
		o.valueNext.valuePrev = o.valuePrev
	}
	o.valuePrev, o.valueNext = nil, nil
}

// cacheValue keeps v as o's bytes when it may (o complete, v its size, at most maxCachedValue
// and the budget), making room by dropping the bytes of objects used before o.
func (s *State) cacheValue(o *object, v []byte) {
	budget := s.cfg.SmallValueCacheBytes
	if len(v) == 0 || o.value != nil || uint64(len(v)) != o.size || o.size > maxCachedValue ||
		len(o.replicas) == 0 || o.size > budget {
		return
	}
	for s.valueBytes+o.size > budget && s.values.head != nil && lruOrder(s.values.head, o) < 0 {
		s.dropValue(s.values.head)
		s.counters.ValueCacheDrops++
	}
	if s.valueBytes+o.size > budget {
		return
	}
	o.value = v
	s.valueBytes += o.size
	s.values.insert(o)
}

// accessed marks o used at now (a get, a put's end, a promotion), which moves its cached bytes,
// if any, to the most recently used end.
func (s *State) accessed(o *object, now int64) {
	o.lastAccess = now
	if o.value != nil && !o.unconfirmed {
		s.values.unlink(o)
		s.values.insert(o)
	}
}

// dropValue forgets o's cached bytes.
func (s *State) dropValue(o *object) {
	if o.value != nil && o.unconfirmed {
		s.valueBytes -= o.size
		s.pinnedBytes -= o.size
		o.value = nil
	} else if o.value != nil {
		s.values.unlink(o)
		s.valueBytes -= o.size
		o.value = nil
	}
}

// linkValues orders the objects of a decoded state that hold cached bytes (sorted first, so
// that each insert is one step).
func (s *State) linkValues() {
	var held []*object
	for _, o := range s.objects {
		if o.unconfirmed {
			s.unconfirmed[o.key] = o
			s.pinnedBytes += o.size
		} else if o.value != nil {
			held = append(held, o)
		}
	}
	slices.SortFunc(held, lruOrder)
	for _, o := range held {
		s.values.insert(o)
	}
}

// cachedValue is what grantLease answers with: o's bytes while it has a memory copy (a hit,
// counted).
func (s *State) cachedValue(o *object) []byte {
	if o.value == nil || !s.inMemory(o) {
		return nil
	}
	s.counters.ValueCacheHits++
	return o.value
}

// CachedValueBytes is the bytes the value cache holds.
func (s *State) CachedValueBytes() uint64 { return s.valueBytes }
