package master

import "slices"

// G3 under the prefix policy (--eviction_policy=prefix, --dfs_full_policy=evict_oldest): when
// the tier is full it drops first the files of orphans, blocks whose parent (the key their key
// names after ParentSep) is held by no object at all, in memory or in a file: no request can use
// them until that parent is put again. Then the oldest files, as under lru.
//
// Which copies are orphans follows from the state alone, and they go oldest first (by the
// time their file was written, then by key), so a standby or a restored snapshot drops the
// same ones. The index behind it (derived, never encoded):
//   - chainNode.held: the objects of State.objects whose key's name is the node's;
//   - chainNode.files: the objects with a G3 file whose key names the node as their parent;
//   - State.orphans: G3 copies that were orphans when noted, sorted like a disk queue; an entry
//     is used only while it is still a current G3 copy and still an orphan (else skipped and
//     trimmed), so it may hold stale entries but misses no orphan: a copy is noted when its
//     file is written with no parent held, and every file under a name when its last holder
//     goes.

// holdName notes that o entered State.objects.
func (s *State) holdName(o *object) {
	if !s.orphanIndex {
		return
	}
	s.chainNodeOf(keyName(o.key)).held++
}

// releaseName notes that o left State.objects; its name's G3 children become orphans when it
// was the last holder.
func (s *State) releaseName(o *object) {
	if !s.orphanIndex {
		return
	}
	name := keyName(o.key)
	n := s.chains[name]
	if n.held--; n.held == 0 {
		for c := range n.files {
			s.noteOrphan(c)
		}
	}
	s.chainTidy(name, n)
}

// fileNoted and fileForgot keep chainNode.files as G3 copies come and go (diskorder.go).
func (s *State) fileNoted(o *object) {
	if !s.orphanIndex || tierOf(o.disk) != "" {
		return
	}
	p, ok := keyParent(o.key)
	if !ok {
		return
	}
	n := s.chainNodeOf(p)
	if n.files == nil {
		n.files = map[*object]struct{}{}
	}
	n.files[o] = struct{}{}
	if n.held == 0 {
		s.noteOrphan(o)
	}
}

func (s *State) fileForgot(o *object) {
	if !s.orphanIndex || tierOf(o.disk) != "" {
		return
	}
	p, ok := keyParent(o.key)
	if !ok {
		return
	}
	if n := s.chains[p]; n != nil {
		delete(n.files, o)
		s.chainTidy(p, n)
	}
}

// noteOrphan queues o's G3 copy among the orphans, in disk order (after dropOrphans's walk,
// when it is walking them).
func (s *State) noteOrphan(o *object) {
	it := diskItem{o, o.disk.at}
	if s.orphansBusy {
		s.orphansLater = append(s.orphansLater, it)
		return
	}
	if n := len(s.orphans); n == 0 || itemBefore(s.orphans[n-1], it) < 0 {
		s.orphans = append(s.orphans, it)
	} else {
		i, found := slices.BinarySearchFunc(s.orphans, it, itemBefore)
		if found {
			return
		}
		s.orphans = slices.Insert(s.orphans, i, it)
	}
	if q := s.diskOrder[""]; q != nil && len(s.orphans) > 2*q.live+64 {
		s.orphans = slices.DeleteFunc(s.orphans, func(it diskItem) bool { return !s.orphanCopy(it) })
	}
}

// orphanedNow reports whether o became an orphan during the current dropOrphans walk.
func (s *State) orphanedNow(o *object) bool {
	for _, it := range s.orphansLater {
		if it.o == o {
			return true
		}
	}
	return false
}

// orphanCopy reports whether it is still a G3 copy of an orphan.
func (s *State) orphanCopy(it diskItem) bool {
	if !s.current("", it) {
		return false
	}
	p, ok := keyParent(it.o.key)
	if !ok {
		return false
	}
	n := s.chains[p]
	return n == nil || n.held == 0
}

// dropOrphans drops G3 orphans' files oldest first until done, skipping leased and promoting
// ones, as dropOldest does with every copy (it calls count before each goes).
func (s *State) dropOrphans(now int64, done func() bool, count func(o *object)) {
	if !s.orphanIndex {
		return
	}
	s.orphansBusy = true
	i := 0
	for ; i < len(s.orphans) && !done(); i++ {
		it := s.orphans[i]
		// A copy that became an orphan during this walk waits for the next one, wherever an
		// older entry of it stands, as on a standby whose list holds no such entry.
		if !s.orphanCopy(it) || it.o.leaseUntil > now || it.o.promote != nil || s.orphanedNow(it.o) {
			continue
		}
		count(it.o)
		s.evictFromDisk(it.o)
	}
	// Entries before i are gone or skipped; keep the skipped ones that are still orphans.
	head := s.orphans[:i]
	rest := s.orphans[i:]
	kept := slices.DeleteFunc(slices.Clone(head), func(it diskItem) bool { return !s.orphanCopy(it) })
	s.orphans = append(kept, rest...)
	s.orphansBusy = false
	later := s.orphansLater
	s.orphansLater = nil
	for _, it := range later {
		s.noteOrphan(it.o)
	}
}
