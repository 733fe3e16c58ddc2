package master

// The prefix policy's index of chains (evictpolicy.go), kept up as objects enter and leave the
// resident index, so that an eviction pass reads "is this object a cached object's parent?"
// from the object itself instead of rebuilding the set of cached parents.
//
// A chainNode stands for one key name (the part of a key before ParentSep). kids counts the
// resident objects whose key names it as their parent; refs counts the resident objects that
// point at it (as their own name or as their parent), and the node leaves State.chains when
// refs drops to 0 and the G3 index (orphans.go) counts nothing in it either. An object in the resident index under the prefix policy holds both
// pointers; outside it, neither.
//
// The index is derived (never encoded): a restore or a standby rebuilds it through the same
// addResident calls, so it is part of the deterministic state machine's derived state.
type chainNode struct {
	kids int
	refs int
	// G3 under the prefix policy (orphans.go): the objects of State.objects with this name,
	// and the objects with a G3 file whose key names this one as their parent.
	held  int
	files map[*object]struct{}
}

// addResident puts o in the resident index (once) and, under the prefix policy, links it to
// its chain.
func (s *State) addResident(o *object) {
	if _, ok := s.resident[o]; ok {
		return
	}
	s.resident[o] = struct{}{}
	if s.chains == nil {
		return
	}
	o.chainSelf = s.chainRef(keyName(o.key))
	if p, ok := keyParent(o.key); ok {
		o.chainParent = s.chainRef(p)
		o.chainParent.kids++
	}
}

// dropResident takes o out of the resident index and unlinks it from its chain.
func (s *State) dropResident(o *object) {
	if _, ok := s.resident[o]; !ok {
		return
	}
	delete(s.resident, o)
	if s.chains == nil {
		return
	}
	s.chainUnref(keyName(o.key), o.chainSelf)
	if p := o.chainParent; p != nil {
		p.kids--
		name, _ := keyParent(o.key)
		s.chainUnref(name, p)
	}
	o.chainSelf, o.chainParent = nil, nil
}

// chainNodeOf returns name's node, making it.
func (s *State) chainNodeOf(name string) *chainNode {
	n := s.chains[name]
	if n == nil {
		n = &chainNode{}
		s.chains[name] = n
	}
	return n
}

func (s *State) chainRef(name string) *chainNode {
	n := s.chainNodeOf(name)
	n.refs++
	return n
}

func (s *State) chainUnref(name string, n *chainNode) {
	n.refs--
	s.chainTidy(name, n)
}

// chainTidy forgets name's node once nothing counts in it.
func (s *State) chainTidy(name string, n *chainNode) {
	if n.refs == 0 && n.held == 0 && len(n.files) == 0 {
		delete(s.chains, name)
	}
}

// hasCachedChild reports whether a resident object names o (a resident object) as its parent.
func hasCachedChild(o *object) bool { return o.chainSelf.kids > 0 }
