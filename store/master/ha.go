package master

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/ha"
	"github.com/mooncake-go/mooncake/store/snapshot"
)

// HA is what a master needs for high availability: an elector and the oplog of its cluster
// (store/ha), and optionally a snapshot manager (store/snapshot).
type HA struct {
	Elector   ha.Elector
	Log       ha.OpLog
	Snapshots *snapshot.Manager // nil: no snapshots (the oplog is then never truncated)
}

// entryTypeJSON is the ha.Entry.Type of a master Entry encoded as JSON; entryTypeJSONReserved
// the same encoding for an entry an older master cannot apply (OpPutEndReserved, reserve.go):
// a standby of that version stops on its unknown type instead of diverging from its leader.
const (
	entryTypeJSON         uint32 = 1
	entryTypeJSONReserved uint32 = 2
	// entryTypeJSONUnconfirmed: an entry that makes or confirms an unconfirmed put
	// (unconfirmed.go), which a master of the version before cannot apply.
	entryTypeJSONUnconfirmed uint32 = 3
)

// ErrNotServing is returned (as UNAVAILABLE_IN_CURRENT_STATUS) by requests reaching a master
// that is not the serving leader.
var ErrNotServing = errors.New("this master is not the serving leader")

// encodeEntry turns a master entry into an oplog entry with sequence id seq.
func encodeEntry(seq uint64, e Entry) (ha.Entry, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return ha.Entry{}, err
	}
	typ := entryTypeJSON
	switch {
	case e.Op == OpPutConfirm || e.Unconfirmed || len(e.Keys) > 0:
		typ = entryTypeJSONUnconfirmed
	case e.Op == OpPutEndReserved:
		typ = entryTypeJSONReserved
	}
	return ha.Entry{Seq: seq, Type: typ, Payload: b}, nil
}

func decodeEntry(he ha.Entry) (Entry, error) {
	if he.Type != entryTypeJSON && he.Type != entryTypeJSONReserved && he.Type != entryTypeJSONUnconfirmed {
		return Entry{}, fmt.Errorf("oplog entry %d has unknown type %d", he.Seq, he.Type)
	}
	var e Entry
	if err := json.Unmarshal(he.Payload, &e); err != nil {
		return Entry{}, fmt.Errorf("oplog entry %d: %w", he.Seq, err)
	}
	return e, nil
}

// haState is the server's HA bookkeeping. Fields marked (mu) are guarded by Server.mu.
type haState struct {
	serving     bool          // (mu)
	lead        ha.Leadership // (mu) current term while serving
	com         *committer    // (mu) current term's committer while serving
	lag         atomic.Uint64 // standby lag (entries)
	lagAlert    atomic.Bool   // lag > max_replication_lag_entries
	verifyOK    atomic.Uint64 // OpVerify entries whose digest matched this state
	verifyBad   atomic.Uint64 // ... and those that did not
	transitions atomic.Uint64 // role changes
	failed      chan struct{} // closed by the committer when an append fails
	failOnce    *sync.Once
}

// committer appends the leader's entries to the oplog in order, batching whatever queued up
// while the previous append was in flight (group commit). Requests wait for their entry's
// sequence id to become durable before they are answered.
type committer struct {
	log     ha.OpLog
	view    ha.View
	timeout time.Duration
	onFail  func(error)

	mu      sync.Mutex
	queue   []ha.Entry
	durable uint64
	err     error
	changed chan struct{} // closed and replaced whenever durable or err changes
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

func newCommitter(l ha.OpLog, view ha.View, start uint64, timeout time.Duration, onFail func(error)) *committer {
	c := &committer{log: l, view: view, timeout: timeout, onFail: onFail, durable: start,
		changed: make(chan struct{}), wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

// enqueue adds an entry; the caller holds Server.mu, so entries queue in sequence order.
func (c *committer) enqueue(e ha.Entry) {
	c.mu.Lock()
	c.queue = append(c.queue, e)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// wait blocks until entry seq is durable, the committer failed or ctx ends.
func (c *committer) wait(ctx context.Context, seq uint64) error {
	for {
		c.mu.Lock()
		durable, err, ch := c.durable, c.err, c.changed
		c.mu.Unlock()
		if durable >= seq {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *committer) Durable() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.durable
}

func (c *committer) close() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
}

const maxCommitBatch = 512

func (c *committer) run() {
	defer close(c.done)
	for {
		select {
		case <-c.stop:
			c.fail(ErrNotServing)
			return
		case <-c.wake:
		}
		for {
			c.mu.Lock()
			n := min(len(c.queue), maxCommitBatch)
			batch := c.queue[:n:n]
			c.queue = c.queue[n:]
			c.mu.Unlock()
			if n == 0 {
				break
			}
			ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
			err := c.log.Append(ctx, c.view, batch)
			cancel()
			if err != nil {
				err = fmt.Errorf("oplog append of entries %d..%d: %w", batch[0].Seq, batch[n-1].Seq, err)
				c.fail(err)
				c.onFail(err)
				return
			}
			c.mu.Lock()
			c.durable = batch[n-1].Seq
			close(c.changed)
			c.changed = make(chan struct{})
			c.mu.Unlock()
		}
	}
}

func (c *committer) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
		close(c.changed)
		c.changed = make(chan struct{})
	}
	c.mu.Unlock()
}

// servingLocked reports whether this master may serve requests now (s.mu held).
func (s *Server) servingLocked() bool {
	if s.ha == nil {
		return true
	}
	return s.ha.serving && s.ha.lead != nil && s.ha.lead.Valid()
}

// Serving reports whether this master serves requests (always true without HA).
func (s *Server) Serving() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.servingLocked()
}

// Role is "leader" or "standby".
func (s *Server) Role() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.role
}

func (s *Server) setRole(role string) {
	if s.role != role {
		s.role = role
		if s.ha != nil {
			s.ha.transitions.Add(1)
		}
		log.Printf("mooncake_master: role %s", role)
	}
}

func unavailable(err error) Result {
	return fail(api.UNAVAILABLE_IN_CURRENT_STATUS, err.Error())
}

// ---- state loading ----

// RestoreSnapshot replaces the state with the newest valid snapshot of m. It returns false
// (and leaves the state alone) when there is none.
func (s *Server) RestoreSnapshot(ctx context.Context, m *snapshot.Manager) (bool, error) {
	st, seq, err := loadSnapshot(ctx, s.cfg, m)
	if err != nil || st == nil {
		return false, err
	}
	s.mu.Lock()
	s.state = st
	s.mu.Unlock()
	log.Printf("mooncake_master: restored snapshot at seq %d", seq)
	return true, nil
}

func loadSnapshot(ctx context.Context, cfg Config, m *snapshot.Manager) (*State, uint64, error) {
	res, err := m.Restore(ctx)
	if errors.Is(err, snapshot.ErrNoSnapshot) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("restore snapshot: %w", err)
	}
	for _, e := range res.Skipped {
		log.Printf("mooncake_master: skipped snapshot: %v", e)
	}
	st, err := DecodeState(cfg, res.Snapshot.Payload)
	if err != nil {
		return nil, 0, fmt.Errorf("snapshot %s: %w", res.Snapshot.ID, err)
	}
	if st.Applied() != res.Snapshot.LastAppliedSeq {
		return nil, 0, fmt.Errorf("snapshot %s: state at seq %d, manifest says %d", res.Snapshot.ID, st.Applied(), res.Snapshot.LastAppliedSeq)
	}
	return st, st.Applied(), nil
}

// resetState rebuilds the state from scratch: the newest snapshot when bootstrapping from
// snapshots is enabled (or force), else empty.
func (s *Server) resetState(ctx context.Context, h HA, force bool) error {
	st := NewState(s.cfg)
	if h.Snapshots != nil && (force || s.cfg.EnableSnapshotRestore || s.cfg.HotStandby.EnableSnapshotBootstrap) {
		loaded, seq, err := loadSnapshot(ctx, s.cfg, h.Snapshots)
		if err != nil {
			return err
		}
		if loaded != nil {
			st = loaded
			log.Printf("mooncake_master: %s bootstrapped from snapshot at seq %d", s.name(), seq)
		}
	}
	s.mu.Lock()
	s.state = st
	s.mu.Unlock()
	return nil
}

func (s *Server) name() string {
	if s.cfg.HotStandby.StandbyID != "" {
		return s.cfg.HotStandby.StandbyID
	}
	return s.advertise()
}

// applyLogged applies oplog entries in order (standby, catch-up). Entries at or below the
// applied position are skipped; a gap is an error.
func (s *Server) applyLogged(entries []ha.Entry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, he := range entries {
		applied := s.state.Applied()
		if he.Seq <= applied {
			continue
		}
		if he.Seq != applied+1 {
			return fmt.Errorf("oplog entry %d does not follow applied entry %d: %w", he.Seq, applied, ha.ErrCompacted)
		}
		e, err := decodeEntry(he)
		if err != nil {
			return err
		}
		if e.Op == OpVerify && e.Digest != "" && s.ha != nil {
			// The digest is the primary's state at applied_seq_id; the lines read as upstream's
			// HotStandbyService logs them (docs/ha.md, "Verify sync status").
			if d := s.state.Digest(); d == e.Digest {
				s.ha.verifyOK.Add(1)
				log.Printf("[HotStandbyService] verification OK: primary_seq_id=%d standby_seq_id=%d (standby %s, state digests match)", applied, applied, s.name())
			} else {
				s.ha.verifyBad.Add(1)
				log.Printf("[HotStandbyService] verification FAILED: primary_seq_id=%d standby_seq_id=%d (standby %s): STATE DIFFERS (primary %s, standby %s)", applied, applied, s.name(), e.Digest[:12], d[:min(12, len(d))])
			}
		}
		s.state.Apply(e)
	}
	return nil
}

func (s *Server) applied() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.Applied()
}

// follow tails the oplog into the state until ctx ends (standby). A compacted log makes it
// reload the newest snapshot.
func (s *Server) follow(ctx context.Context, h HA) {
	for ctx.Err() == nil {
		err := h.Log.Tail(ctx, s.applied()+1, s.applyLogged)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, ha.ErrCompacted) {
			log.Printf("mooncake_master: %s: oplog compacted past applied entry %d: reloading the newest snapshot", s.name(), s.applied())
			if err := s.resetState(ctx, h, true); err != nil {
				log.Printf("mooncake_master: %s: %v", s.name(), err)
			}
		} else if err != nil {
			log.Printf("mooncake_master: %s: following the oplog: %v", s.name(), err)
		}
		sleepCtx(ctx, time.Second)
	}
}

// catchUp applies every entry in the oplog (a new leader, before serving). The old leader
// is fenced out, so the log cannot grow meanwhile.
func (s *Server) catchUp(ctx context.Context, h HA) error {
	reloaded := false
	for {
		from := s.applied() + 1
		entries, err := h.Log.ReadFrom(ctx, from, 1024)
		if errors.Is(err, ha.ErrCompacted) && !reloaded && h.Snapshots != nil {
			reloaded = true
			if err := s.resetState(ctx, h, true); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("catch up from oplog entry %d: %w", from, err)
		}
		if len(entries) == 0 {
			break
		}
		if err := s.applyLogged(entries); err != nil {
			return err
		}
	}
	last, err := h.Log.LastSeq(ctx)
	if err != nil {
		return fmt.Errorf("catch up: %w", err)
	}
	if applied := s.applied(); last != applied && last != 0 {
		return fmt.Errorf("catch up: oplog ends at %d but the state is at %d: %w", last, applied, ha.ErrSeqMismatch)
	}
	return nil
}

// monitorLag polls the oplog's last seq (standby) and logs the lag periodically.
func (s *Server) monitorLag(ctx context.Context, h HA) {
	hs := s.cfg.HotStandby
	t := time.NewTicker(hs.OplogPollInterval)
	defer t.Stop()
	var lastLog time.Time // the first poll logs at once, so a new standby shows its state
	caughtUp := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		last, err := h.Log.LastSeq(ctx)
		if err != nil {
			continue
		}
		applied := s.applied()
		var lag uint64
		if last > applied {
			lag = last - applied
		}
		// Catching up (lag reaching 0) is logged when it happens, not at the next interval.
		logNow := lag == 0 && !caughtUp
		caughtUp = lag == 0
		s.ha.lag.Store(lag)
		alert := lag > hs.MaxReplicationLagEntries
		if alert && !s.ha.lagAlert.Load() {
			log.Printf("mooncake_master: %s: replication lag %d entries exceeds max_replication_lag_entries=%d", s.name(), lag, hs.MaxReplicationLagEntries)
		}
		s.ha.lagAlert.Store(alert)
		if hs.EnableVerification && (logNow || time.Since(lastLog) >= hs.VerificationInterval) {
			lastLog = time.Now()
			log.Printf("[HotStandbyService] applied_seq_id=%d lag=%d entries (standby %s)", applied, lag, s.name())
		}
	}
}

// RunHA runs the HA life cycle until ctx ends: bootstrap, follow the oplog as a standby while
// campaigning, and on winning catch up, then serve until the leadership is lost (or an append
// fails), then start over as a standby from a freshly rebuilt state.
func (s *Server) RunHA(ctx context.Context, h HA) error {
	if s.ha == nil {
		return fmt.Errorf("RunHA on a master without --enable_ha")
	}
	s.mu.Lock()
	s.haLog = h.Log
	s.mu.Unlock()
	if s.cfg.EnableSnapshot && h.Snapshots != nil {
		go s.snapshotLoop(ctx, h)
	}
	for ctx.Err() == nil {
		if err := s.resetState(ctx, h, false); err != nil {
			log.Printf("mooncake_master: %s: %v", s.name(), err)
			sleepCtx(ctx, time.Second)
			continue
		}
		sctx, scancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		if s.cfg.HotStandby.EnableOplogFollowing {
			wg.Add(1)
			go func() { defer wg.Done(); s.follow(sctx, h) }()
		}
		wg.Add(1)
		go func() { defer wg.Done(); s.monitorLag(sctx, h) }()
		lead, err := h.Elector.Campaign(ctx)
		scancel()
		wg.Wait()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			log.Printf("mooncake_master: %s: campaign: %v", s.name(), err)
			sleepCtx(ctx, time.Second)
			continue
		}
		start := time.Now()
		if err := s.catchUp(ctx, h); err != nil {
			log.Printf("mooncake_master: %s: won the election but cannot catch up, resigning: %v", s.name(), err)
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			lead.Resign(rctx)
			cancel()
			sleepCtx(ctx, time.Second)
			continue
		}
		failed := s.becomeLeader(lead)
		log.Printf("mooncake_master: %s is the leader (%s) at oplog seq %d, caught up in %v", s.name(), lead.View(), s.applied(), time.Since(start).Round(time.Millisecond))
		why := ""
		select {
		case <-lead.Lost():
			why = fmt.Sprintf("leadership lost: %v", lead.Err())
		case <-failed:
			why = "oplog append failed"
		case <-ctx.Done():
			why = "shutting down"
		}
		s.stopServing(why)
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		lead.Resign(rctx)
		cancel()
	}
	return ctx.Err()
}

// discoveryAllowance is how long a client may take to find a new leader, on top of the
// client_ttl of grace it then gets (see the package doc, "Failover"): a client's attempt at the
// deposed leader times out within 3 s (store/client's haAttemptTimeout), its view watcher may
// miss the change for up to one lease TTL (a poll or a watch re-established after an error),
// and its heartbeat runs once a second.
func discoveryAllowance(cfg Config) time.Duration {
	return cfg.HALeaseTTL + 4*time.Second
}

// becomeLeader starts serving: fresh client liveness (every known client gets client_ttl of
// grace to heartbeat the new leader, counted from one discovery allowance after the takeover),
// a committer for this term.
func (s *Server) becomeLeader(lead ha.Leadership) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	failed := make(chan struct{})
	once := &sync.Once{}
	s.ha.failed, s.ha.failOnce = failed, once
	timeout := max(5*time.Second, s.cfg.HALeaseTTL)
	s.ha.com = newCommitter(s.haLog, lead.View(), s.state.Applied(), timeout, func(err error) {
		log.Printf("mooncake_master: %s: %v: stepping down", s.name(), err)
		s.mu.Lock()
		s.ha.serving = false
		s.mu.Unlock()
		once.Do(func() { close(failed) })
	})
	s.ha.lead = lead
	s.ha.serving = true
	s.ha.lag.Store(0)
	s.ha.lagAlert.Store(false)
	s.lastSeen = map[string]time.Time{}
	s.graceFrom = s.now().Add(discoveryAllowance(s.cfg))
	s.setRole("leader")
	return failed
}

func (s *Server) stopServing(why string) {
	s.mu.Lock()
	s.ha.serving = false
	com := s.ha.com
	s.ha.com, s.ha.lead = nil, nil
	s.setRole("standby")
	s.mu.Unlock()
	log.Printf("mooncake_master: %s stopped serving: %s", s.name(), why)
	if com != nil {
		com.close()
	}
}

// ---- snapshots ----

// SaveSnapshot encodes the state under the lock (service goes on meanwhile for the time of
// the encoding only), waits until the entries it covers are durable (HA), saves it, and then
// truncates the oplog before the oldest retained snapshot.
func (s *Server) SaveSnapshot(ctx context.Context, m *snapshot.Manager) (snapshot.Manifest, error) {
	s.mu.Lock()
	if s.ha != nil && !s.servingLocked() {
		s.mu.Unlock()
		return snapshot.Manifest{}, ErrNotServing
	}
	payload, err := s.state.Encode()
	seq := s.state.Applied()
	var com *committer
	if s.ha != nil {
		com = s.ha.com
	}
	s.mu.Unlock()
	if err != nil {
		return snapshot.Manifest{}, fmt.Errorf("encode state: %w", err)
	}
	if com != nil {
		if err := com.wait(ctx, seq); err != nil {
			return snapshot.Manifest{}, fmt.Errorf("snapshot at %d: entries not durable: %w", seq, err)
		}
	}
	man, err := m.Save(ctx, seq, payload)
	if err != nil {
		return man, err
	}
	if s.haLog != nil {
		mans, err := m.List(ctx)
		if err == nil && len(mans) > 0 {
			oldest := mans[len(mans)-1].LastAppliedSeq
			for _, mm := range mans {
				oldest = min(oldest, mm.LastAppliedSeq)
			}
			if oldest > 0 {
				if err := s.haLog.Truncate(ctx, oldest+1); err != nil {
					log.Printf("mooncake_master: truncate oplog before %d: %v", oldest+1, err)
				}
			}
		}
	}
	return man, nil
}

// SnapshotLoop saves a snapshot every --snapshot_interval_seconds (when serving) until ctx ends.
func (s *Server) SnapshotLoop(ctx context.Context, m *snapshot.Manager) {
	s.snapshotLoop(ctx, HA{Snapshots: m})
}

func (s *Server) snapshotLoop(ctx context.Context, h HA) {
	t := time.NewTicker(s.cfg.SnapshotInterval)
	defer t.Stop()
	var lastSeq uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !s.Serving() || s.applied() == lastSeq {
			continue
		}
		man, err := s.SaveSnapshot(ctx, h.Snapshots)
		if err != nil {
			if !errors.Is(err, ErrNotServing) {
				log.Printf("mooncake_master: snapshot: %v", err)
			}
			continue
		}
		lastSeq = man.LastAppliedSeq
		log.Printf("mooncake_master: saved snapshot %s (seq %d, %d bytes)", man.ID, man.LastAppliedSeq, man.PayloadSize)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
