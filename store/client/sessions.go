package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/internal/memview"
	"github.com/mooncake-go/mooncake/store/api"
)

// Transfer sessions (upstream's batch_get_session_* and batch_put_session_* calls, with
// batch_get_into_multi_buffer_ranges and batch_put_from_multi_buffer_ranges): the master is
// asked once per object, then any number of ranged transfers (a model's layers, one after the
// other) go straight to the replicas, with no master call.
//
// Get sessions. GetSessionStart queries the keys' replicas once; the master's read lease that
// comes with them keeps those memory copies where they are (see ranges_snapshot.go). Ranged
// reads of the session use them until the lease ends; a read that starts or ends after it fails
// with LEASE_EXPIRED and ends the key's session (start a new one: unlike a RangedReadSnapshot, a
// session never re-queries behind the caller's back, so every read of one session sees one
// version of the value). A key needs a memory copy (INVALID_REPLICA otherwise).
//
// Put sessions. PutSessionStart reserves each object (the master's PutStart, with the object's
// full size) and keeps its replica descriptors; ranged writes fill it, any number of them, each
// written to every replica; PutSessionEnd makes the objects readable (PutEnd) and
// PutSessionRevoke drops them (PutRevoke). Until its end the object is being written: gets see
// REPLICA_IS_NOT_READY. End and revoke first seal the session (later writes fail) and wait for
// the writes in flight. A session the caller never ends is reclaimed by the master
// (put_start_discard_timeout, or when the client goes away). Sessions are per client and by
// key: one get and one put session per key at a time.
//
// Ranges are checked against the object's size (INVALID_PARAMS past its end); a range of 0
// bytes is allowed and moves nothing. Local memory may be anywhere: ranges in buffers registered
// with RegisterBuffer go to the replicas directly, others through a same-host mapping or the
// staging buffer.

// Span is one range of a session transfer: Size bytes at offset Off of the object, and local
// memory at Addr (the destination of a read, the source of a write).
type Span struct {
	Off  uint64
	Addr uintptr
	Size uint64
}

// SpanGroup is the spans of one key in a batch of ranged session transfers.
type SpanGroup struct {
	Key   string
	Spans []Span
}

// sessions are a client's open transfer sessions, by the caller's key.
type sessions struct {
	mu   sync.Mutex
	idle *sync.Cond // a put session's writes in flight reached 0 (on mu)
	get  map[string]*getSession
	put  map[string]*putSession
}

type getSession struct {
	view  *snapView // the query (its lease deadline)
	entry *snapEntry
}

type putSession struct {
	ikey     string
	size     uint64
	replicas []api.Replica
	ready    bool // PutStart answered (false: being started)
	sealed   bool // end or revoke began: no more writes
	inflight int  // writes running
}

// sessionsLocked returns the client's sessions locked, their maps made.
func (c *Client) sessionsLocked() *sessions {
	s := &c.sess
	s.mu.Lock()
	if s.get == nil {
		s.get = map[string]*getSession{}
		s.put = map[string]*putSession{}
		s.idle = sync.NewCond(&s.mu)
	}
	return s
}

// GetSessionStart queries the replicas of keys once and opens a get session for each key that
// has a memory copy (replacing the key's session, if any); errs[i] is key i's error.
func (c *Client) GetSessionStart(ctx context.Context, keys []string) []error {
	errs := make([]error, len(keys))
	if len(keys) == 0 {
		return errs
	}
	q := &Snapshot{c: c, index: make(map[string]int, len(keys))}
	for _, k := range keys {
		if _, ok := q.index[k]; !ok {
			q.index[k] = len(q.keys)
			q.keys = append(q.keys, k)
		}
	}
	v := q.query(ctx)
	s := c.sessionsLocked()
	defer s.mu.Unlock()
	now := time.Now()
	for i, k := range keys {
		e := &v.entries[q.index[k]]
		delete(s.get, k)
		switch {
		case e.err != nil:
			errs[i] = e.err
		case len(e.mem) == 0:
			errs[i] = api.Errorf(api.INVALID_REPLICA, "get session %s: the object has no memory copy (its copies are on disk); read it with get", quote(k))
		case !now.Before(v.deadline):
			errs[i] = api.Errorf(api.LEASE_EXPIRED, "get session %s: the read lease ended before the session opened", quote(k))
		default:
			s.get[k] = &getSession{view: v, entry: e}
		}
	}
	return errs
}

// GetSessionEnd closes the get sessions of keys (keys without one are ignored).
func (c *Client) GetSessionEnd(keys []string) {
	s := c.sessionsLocked()
	defer s.mu.Unlock()
	for _, k := range keys {
		delete(s.get, k)
	}
}

// GetSessionRanges reads every group's spans through the key's get session: per group the
// bytes read, or its error (no session: INVALID_PARAMS; the lease ended: LEASE_EXPIRED, and the
// session is closed).
func (c *Client) GetSessionRanges(ctx context.Context, groups []SpanGroup) ([]uint64, []error) {
	got := make([]uint64, len(groups))
	errs := make([]error, len(groups))
	sess := make([]*getSession, len(groups))
	s := c.sessionsLocked()
	now := time.Now()
	for i, g := range groups {
		gs := s.get[g.Key]
		switch {
		case gs == nil:
			errs[i] = api.Errorf(api.INVALID_PARAMS, "get %s: no get session for the key (batch_get_session_start first)", quote(g.Key))
		case !now.Before(gs.view.deadline):
			delete(s.get, g.Key)
			errs[i] = leaseEnded(g.Key)
		default:
			errs[i] = checkSpans("get", g.Key, gs.entry.size, g.Spans)
			sess[i] = gs
		}
	}
	s.mu.Unlock()
	regs := c.regionTable()
	parallel(len(groups), batchReadParallel, func(i int) {
		if errs[i] == nil {
			got[i], errs[i] = c.readSpans(ctx, sess[i], groups[i].Spans, regs)
		}
	})
	s = c.sessionsLocked()
	defer s.mu.Unlock()
	for i, g := range groups {
		if api.CodeOf(errs[i]) == api.LEASE_EXPIRED && s.get[g.Key] == sess[i] {
			delete(s.get, g.Key)
		}
	}
	return got, errs
}

func leaseEnded(key string) error {
	return api.Errorf(api.LEASE_EXPIRED, "get %s: the get session's read lease ended; the data may have been replaced (start a new session)", quote(key))
}

// checkSpans checks that spans lie inside an object of size bytes.
func checkSpans(op, key string, size uint64, spans []Span) error {
	for _, sp := range spans {
		if sp.Off > size || sp.Size > size-sp.Off {
			return api.Errorf(api.INVALID_PARAMS, "%s %s: bytes [%d, %d) are outside the %d-byte object", op, quote(key), sp.Off, sp.Off+sp.Size, size)
		}
		if sp.Size > 0 && sp.Addr == 0 {
			return api.Errorf(api.INVALID_PARAMS, "%s %s: a range's local address is NULL", op, quote(key))
		}
	}
	return nil
}

// spanTotal is the bytes of spans.
func spanTotal(spans []Span) uint64 {
	var n uint64
	for _, sp := range spans {
		n += sp.Size
	}
	return n
}

// readSpans reads spans of a get session's object: in one batch from a memory copy when every
// destination is registered (or the copy can be mapped), else range by range.
func (c *Client) readSpans(ctx context.Context, gs *getSession, spans []Span, regs regionTable) (uint64, error) {
	e := gs.entry
	frags := make([]Range, 0, len(spans))
	todo := make([]int, 0, len(spans))
	direct := true
	for _, sp := range spans {
		if sp.Size == 0 {
			continue
		}
		todo = append(todo, len(frags))
		frags = append(frags, Range{Src: sp.Off, Dst: sp.Addr, Size: sp.Size})
		direct = direct && regs.check(e.ikey, sp.Addr, sp.Size) == nil
	}
	if len(frags) == 0 {
		return 0, nil
	}
	var err error
	for _, r := range e.mem {
		if direct {
			err = c.readFrags(ctx, r, frags, todo)
		} else {
			err = c.spansOneByOne(ctx, false, r, spans)
		}
		if err == nil {
			break
		}
	}
	switch {
	case err != nil:
		return 0, fmt.Errorf("get %s: %w", quote(e.ikey), err)
	case time.Now().After(gs.view.deadline):
		return 0, leaseEnded(e.ikey)
	}
	return spanTotal(spans), nil
}

// spansOneByOne moves each span between local memory and replica r (write: to r), through
// Client.transfer (a mapping, a direct transfer, or the staging buffer).
func (c *Client) spansOneByOne(ctx context.Context, write bool, r api.Replica, spans []Span) error {
	for _, sp := range spans {
		if sp.Size == 0 {
			continue
		}
		rr := r
		rr.Addr += sp.Off
		rr.Size = sp.Size
		local := buf{b: memview.Bytes(sp.Addr, int(sp.Size)), registered: c.registered(sp.Addr, sp.Size)}
		if err := c.transfer(ctx, write, local, rr); err != nil {
			return err
		}
	}
	return nil
}

// PutSessionStart reserves an object of sizes[i] bytes for each keys[i] with cfg's placement
// and opens a put session for it; errs[i] is key i's error (a key with a put session open,
// in this call or before: INVALID_PARAMS; a key that exists: OBJECT_ALREADY_EXISTS).
func (c *Client) PutSessionStart(ctx context.Context, keys []string, sizes []uint64, cfg api.ReplicateConfig) []error {
	errs := make([]error, len(keys))
	if len(sizes) != len(keys) {
		return fill(len(keys), api.Errorf(api.INVALID_PARAMS, "put session: %d keys and %d sizes", len(keys), len(sizes)))
	}
	var idx []int
	var ikeys []string
	var isizes []uint64
	s := c.sessionsLocked()
	for i, k := range keys {
		ik, err := c.tkey(k)
		switch {
		case err != nil:
			errs[i] = err
		case sizes[i] == 0:
			errs[i] = api.Errorf(api.INVALID_PARAMS, "put session %s: an object of 0 bytes", quote(k))
		case s.put[k] != nil:
			errs[i] = api.Errorf(api.INVALID_PARAMS, "put session %s: a put session for the key is already open (end or revoke it first)", quote(k))
		default:
			s.put[k] = &putSession{ikey: ik, size: sizes[i]} // reserved: not ready
			idx = append(idx, i)
			ikeys = append(ikeys, ik)
			isizes = append(isizes, sizes[i])
		}
	}
	s.mu.Unlock()
	if len(idx) == 0 {
		return errs
	}
	results, err := c.startPuts(ctx, ikeys, isizes, cfg)
	var revoke []string
	s = c.sessionsLocked()
	for j, i := range idx {
		k := keys[i]
		var r *api.PutStartResponse
		switch {
		case err != nil:
			errs[i] = err
		default:
			r = &results[j]
			if r.Code != api.OK {
				errs[i] = fmt.Errorf("put session %s: %w", quote(k), r.Err())
			} else if len(r.Replicas) == 0 {
				errs[i] = api.Errorf(api.INVALID_REPLICA, "put session %s: the master gave no replica", quote(k))
				revoke = append(revoke, ikeys[j])
			}
		}
		if errs[i] != nil {
			delete(s.put, k)
			continue
		}
		ps := s.put[k]
		ps.replicas, ps.ready = r.Replicas, true
	}
	s.mu.Unlock()
	if len(revoke) > 0 {
		rctx, cancel := c.rpcCtx(context.Background())
		c.master.BatchPutRevoke(rctx, &api.BatchKeysRequest{ClientID: c.id, Keys: revoke})
		cancel()
	}
	return errs
}

// startPuts is the master's PutStart of keys (internal) with sizes: one batch call, then, for
// keys answered Retry (memory full while objects move to a disk tier), one waiting call each.
func (c *Client) startPuts(ctx context.Context, keys []string, sizes []uint64, cfg api.ReplicateConfig) ([]api.PutStartResponse, error) {
	if len(keys) == 1 {
		ps, err := c.putStart(ctx, keys[0], sizes[0], cfg, false)
		if err != nil {
			return nil, err
		}
		return []api.PutStartResponse{*ps}, nil
	}
	rctx, cancel := c.rpcCtx(ctx)
	resp, err := c.master.BatchPutStart(rctx, &api.BatchPutStartRequest{ClientID: c.id, Keys: keys, Sizes: sizes, Config: c.placement(cfg)})
	cancel()
	if err == nil {
		err = resp.Err()
	}
	if err == nil && len(resp.Results) != len(keys) {
		err = api.Errorf(api.INTERNAL_ERROR, "the master answered %d of %d keys", len(resp.Results), len(keys))
	}
	if err != nil {
		return nil, c.rpcErr("put session", err)
	}
	for j := range resp.Results {
		if resp.Results[j].Retry {
			ps, err := c.putStart(ctx, keys[j], sizes[j], cfg, false)
			if err != nil {
				resp.Results[j] = api.PutStartResponse{Status: api.StatusOf(err)}
				continue
			}
			resp.Results[j] = *ps
		}
	}
	return resp.Results, nil
}

// PutSessionRanges writes every group's spans into the key's put session, to each of its
// replicas: per group the bytes written, or its error (no open session: INVALID_PARAMS).
func (c *Client) PutSessionRanges(ctx context.Context, groups []SpanGroup) ([]uint64, []error) {
	got := make([]uint64, len(groups))
	errs := make([]error, len(groups))
	sess := make([]*putSession, len(groups))
	s := c.sessionsLocked()
	for i, g := range groups {
		ps := s.put[g.Key]
		switch {
		case ps == nil || !ps.ready || ps.sealed:
			errs[i] = api.Errorf(api.INVALID_PARAMS, "put %s: no open put session for the key (batch_put_session_start first; end and revoke close it)", quote(g.Key))
		default:
			if errs[i] = checkSpans("put", g.Key, ps.size, g.Spans); errs[i] == nil {
				ps.inflight++
				sess[i] = ps
			}
		}
	}
	s.mu.Unlock()
	regs := c.regionTable()
	parallel(len(groups), batchReadParallel, func(i int) {
		if sess[i] == nil {
			return
		}
		got[i], errs[i] = c.writeSpans(ctx, sess[i], groups[i].Spans, regs)
	})
	s = c.sessionsLocked()
	for _, ps := range sess {
		if ps != nil {
			ps.inflight--
		}
	}
	s.idle.Broadcast()
	s.mu.Unlock()
	return got, errs
}

// writeSpans writes spans to every replica of a put session: one engine batch per replica
// when every source is registered, else range by range.
func (c *Client) writeSpans(ctx context.Context, ps *putSession, spans []Span, regs regionTable) (uint64, error) {
	direct := true
	for _, sp := range spans {
		direct = direct && (sp.Size == 0 || regs.check(ps.ikey, sp.Addr, sp.Size) == nil)
	}
	for _, r := range ps.replicas {
		var err error
		if direct {
			err = c.writeBatch(ctx, r, spans)
		} else {
			err = c.spansOneByOne(ctx, true, r, spans)
		}
		if err != nil {
			return 0, fmt.Errorf("put %s: %w", quote(ps.ikey), err)
		}
	}
	return spanTotal(spans), nil
}

// writeBatch writes spans (sources in registered memory) to replica r: through a mapping of the
// object when this host can map it, else in engine batches.
func (c *Client) writeBatch(ctx context.Context, r api.Replica, spans []Span) error {
	id, err := c.openSegment(r.SegmentName)
	if err != nil {
		return err
	}
	if view, release, ok, err := c.eng.MapRemotePinned(id, r.Addr, r.Size); err == nil && ok {
		for _, sp := range spans {
			copy(view[sp.Off:sp.Off+sp.Size], memview.Bytes(sp.Addr, int(sp.Size)))
		}
		release()
		return nil
	}
	reqs := make([]engine.TransferRequest, 0, min(len(spans), transferChunk))
	for start := 0; start < len(spans); start += transferChunk {
		reqs = reqs[:0]
		for _, sp := range spans[start:min(start+transferChunk, len(spans))] {
			if sp.Size > 0 {
				reqs = append(reqs, engine.TransferRequest{Opcode: engine.OpWrite, Source: sp.Addr, TargetID: id, TargetOffset: r.Addr + sp.Off, Length: sp.Size})
			}
		}
		if len(reqs) == 0 {
			continue
		}
		if err := c.eng.TransferSync(ctx, reqs); err != nil {
			return api.Errorf(api.TRANSFER_FAIL, "write %d ranges to %s: %v", len(reqs), r.SegmentName, err)
		}
	}
	return nil
}

// PutSessionEnd makes the objects of keys' put sessions readable (the master's PutEnd) and
// closes the sessions; with revoke it drops the objects instead (PutRevoke). Either seals each
// session first and waits for its writes in flight. errs[i] is key i's error (no session:
// INVALID_PARAMS); a session whose end or revoke failed stays, sealed, for another try.
func (c *Client) PutSessionEnd(ctx context.Context, keys []string, revoke bool) []error {
	errs := make([]error, len(keys))
	first := map[string]int{} // a key named twice gets the first's result
	var ikeys []string
	var idx []int
	s := c.sessionsLocked()
	for i, k := range keys {
		if _, dup := first[k]; dup {
			continue
		}
		first[k] = i
		ps := s.put[k]
		if ps == nil || !ps.ready {
			errs[i] = api.Errorf(api.INVALID_PARAMS, "put %s: no put session for the key", quote(k))
			continue
		}
		ps.sealed = true
		ikeys = append(ikeys, ps.ikey)
		idx = append(idx, i)
	}
	for busy := true; busy; {
		busy = false
		for _, i := range idx {
			if ps := s.put[keys[i]]; ps != nil && ps.inflight > 0 {
				busy = true
			}
		}
		if busy {
			s.idle.Wait()
		}
	}
	s.mu.Unlock()
	if len(ikeys) > 0 {
		op := "put session end"
		call := c.master.BatchPutEnd
		if revoke {
			op, call = "put session revoke", c.master.BatchPutRevoke
		}
		rctx, cancel := c.rpcCtx(ctx)
		resp, err := call(rctx, &api.BatchKeysRequest{ClientID: c.id, Keys: ikeys})
		cancel()
		if err == nil {
			err = resp.Err()
		}
		if err == nil && len(resp.Results) != len(ikeys) {
			err = api.Errorf(api.INTERNAL_ERROR, "the master answered %d of %d keys", len(resp.Results), len(ikeys))
		}
		s = c.sessionsLocked()
		for j, i := range idx {
			switch {
			case err != nil:
				errs[i] = c.rpcErr(op+" "+quote(keys[i]), err)
			case resp.Results[j].Code == api.OK, revoke && resp.Results[j].Code == api.OBJECT_NOT_FOUND:
				delete(s.put, keys[i]) // done (a revoked object the master no longer has is gone too)
			default:
				errs[i] = fmt.Errorf("%s %s: %w", op, quote(keys[i]), resp.Results[j].Err())
			}
		}
		s.mu.Unlock()
	}
	for i, k := range keys {
		if j := first[k]; j != i {
			errs[i] = errs[j]
		}
	}
	return errs
}
