package master

import (
	"context"
	"fmt"
	"log"
	"net"
	"path"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/mooncake-go/mooncake/auth"
	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/ha"
	"github.com/mooncake-go/mooncake/store/metrics"
)

// Log receives every entry the serving master applies, in apply order, before the RPC that
// caused it is answered. The HA oplog implements it: Append must return only once the entry is
// durable, so a standby that replays the log never loses an acknowledged change. nil = no log.
type Log interface {
	Append(ctx context.Context, e Entry) error
}

// Option configures a Server.
type Option func(*Server)

// WithClock replaces time.Now (tests drive time by hand).
func WithClock(now func() time.Time) Option { return func(s *Server) { s.now = now } }

// WithLog installs the operation log (HA).
func WithLog(l Log) Option { return func(s *Server) { s.log = l } }

// WithSecurity sets what the RPC port asks of a connection (TLS, token): see api.ServerSecurity.
// Refused connections are logged, at most a few lines a second.
func WithSecurity(sec api.ServerSecurity) Option { return func(s *Server) { s.sec = sec } }

// WithClientExpired calls fn, after a client has been expired for silence, with the engine
// names of the segments it had mounted (--enable_metadata_cleanup_on_timeout uses it). fn runs
// under the server's lock: it must not call the server.
func WithClientExpired(fn func(clientID string, engines []string)) Option {
	return func(s *Server) { s.clientExpired = fn }
}

// Server is the master service: it owns a State and turns RPCs, client liveness and timers
// into entries applied one at a time. It implements api.MasterServer.
type Server struct {
	cfg     Config
	now     func() time.Time
	log     Log
	metrics *metrics.Master
	sec     api.ServerSecurity // RPC connection security (WithSecurity)
	refused auth.RefusalLog    // refused RPC connections (rate-limited)

	mu       sync.Mutex
	state    *State
	seed     uint64
	lastSeen map[string]time.Time // client liveness: outside the state machine (not replicated)
	role     string
	ha       *haState      // nil without --enable_ha
	haLog    ha.OpLog      // set by RunHA
	wake     chan struct{} // closed (and replaced) when moves to G3 are handed out (long polls wait on it)
	room     chan struct{} // closed (and replaced) when an entry frees memory (puts told Retry wait on it)
	// localGarbage: files on clients' local disks to delete, per client (offload_server.go).
	localGarbage map[string][]string
	// clientExpired: WithClientExpired's hook (nil: none).
	clientExpired func(clientID string, engines []string)
	// HA discovery handed to clients (ServiceStatus), "" without --enable_ha.
	haBackend, haEndpoints string
	batchBufs              batchBufs // slices of batch calls, reused (batchbufs.go)
	// graceFrom: clients this leader has not heard from yet count as seen at this moment, set
	// one discovery allowance after the takeover (becomeLeader); zero: now.
	graceFrom time.Time
}

var _ api.MasterServer = (*Server)(nil)

// NewServer creates a master over an empty state.
func NewServer(cfg Config, opts ...Option) *Server {
	s := &Server{cfg: cfg, now: time.Now, state: NewState(cfg), lastSeen: map[string]time.Time{}, role: "leader",
		wake: make(chan struct{}), room: make(chan struct{})}
	if cfg.EnableHA {
		s.ha = &haState{}
		s.role = "standby"
		if ep, err := ha.ParseEndpoints(cfg.EtcdEndpoints); err == nil {
			s.haBackend, s.haEndpoints = string(ep.Kind), ep.ClientForm()
		}
	}
	for _, o := range opts {
		o(s)
	}
	s.seed = uint64(s.now().UnixNano())
	s.metrics = metrics.NewMaster(s.Snapshot)
	return s
}

// Metrics returns the server's metrics.
func (s *Server) Metrics() *metrics.Master { return s.metrics }

// Config returns the configuration the server runs with.
func (s *Server) Config() Config { return s.cfg }

// Propose stamps e with the time and a seed, applies it, and appends it to the log. With HA
// it returns only once the entry is durable in the oplog (ErrNotServing, or the append's
// error, when this master is not, or stops being, the serving leader).
func (s *Server) Propose(ctx context.Context, e Entry) (Result, error) {
	s.mu.Lock()
	res, wait, err := s.proposeLocked(ctx, e)
	s.mu.Unlock()
	if err == nil && wait != nil {
		err = wait(ctx)
	}
	if err != nil {
		return Result{}, err
	}
	s.removeFiles(res.Garbage)
	s.queueLocalGarbage(res.LocalGarbage)
	return res, nil
}

// afterCommit removes the G3 files an entry proposed without waiting (timers) left behind,
// once the entry is durable.
func (s *Server) afterCommit(ctx context.Context, res Result, wait func(context.Context) error) {
	if len(res.Garbage) == 0 && len(res.LocalGarbage) == 0 {
		return
	}
	go func() {
		if wait != nil && wait(ctx) != nil {
			return
		}
		s.removeFiles(res.Garbage)
		s.queueLocalGarbage(res.LocalGarbage)
	}()
}

// proposeLocked applies e (s.mu held). With HA the entry is queued for the oplog and wait
// blocks until it is durable; call wait after releasing s.mu.
func (s *Server) proposeLocked(ctx context.Context, e Entry) (Result, func(context.Context) error, error) {
	if !s.servingLocked() {
		return Result{}, nil, ErrNotServing
	}
	e.Now = s.now().UnixNano()
	s.seed = s.seed*6364136223846793005 + 1442695040888963407
	e.Seed = s.seed
	gen, used := s.state.dfsGen, s.state.used
	res := s.state.Apply(e)
	if s.state.dfsGen != gen {
		close(s.wake)
		s.wake = make(chan struct{})
	}
	if s.state.used < used {
		close(s.room)
		s.room = make(chan struct{})
	}
	if s.log != nil {
		if err := s.log.Append(ctx, e); err != nil {
			return Result{}, nil, fmt.Errorf("append %s to the operation log: %w", e.Op, err)
		}
	}
	if s.ha != nil {
		seq := s.state.Applied()
		he, err := encodeEntry(seq, e)
		if err != nil { // cannot happen (plain data); the state already changed: step down
			s.ha.serving = false
			return Result{}, nil, fmt.Errorf("encode %s: %w", e.Op, err)
		}
		com := s.ha.com
		com.enqueue(he)
		return res, func(ctx context.Context) error { return com.wait(ctx, seq) }, nil
	}
	return res, nil, nil
}

// View runs f with the state locked for reading.
func (s *Server) View(f func(*State)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s.state)
}

func (s *Server) touch(clientID string) {
	if clientID == "" {
		return
	}
	s.mu.Lock()
	s.lastSeen[clientID] = s.now()
	s.mu.Unlock()
}

// CheckClients expires clients silent for longer than client_ttl. Clients the state knows but
// liveness does not (after a restart or promotion) get a full client_ttl of grace, counted
// after a promotion from the end of the discovery allowance (becomeLeader).
func (s *Server) CheckClients(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.servingLocked() {
		return
	}
	now := s.now()
	seen := now
	if s.graceFrom.After(now) {
		seen = s.graceFrom
	}
	for _, id := range s.state.Clients() {
		if _, ok := s.lastSeen[id]; !ok {
			s.lastSeen[id] = seen
		}
	}
	var dead []string
	for id, t := range s.lastSeen {
		if now.Sub(t) > s.cfg.ClientTTL {
			dead = append(dead, id)
		}
	}
	sort.Strings(dead)
	for _, id := range dead {
		delete(s.lastSeen, id)
		engines := s.state.ClientEngines(id)
		res, wait, err := s.proposeLocked(ctx, Entry{Op: OpExpireClient, ClientID: id})
		if err != nil {
			log.Printf("mooncake_master: expire client %s: %v", id, err)
			continue
		}
		s.afterCommit(ctx, res, wait)
		if s.clientExpired != nil {
			s.clientExpired(id, engines)
		}
		log.Printf("mooncake_master: client %s silent for more than %v: unmounted its segments", id, s.cfg.ClientTTL)
	}
}

// TickOnce proposes a Tick entry when one would do anything (stale puts, watermark eviction).
func (s *Server) TickOnce(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.servingLocked() && s.state.NeedsTick(s.now().UnixNano()) {
		res, wait, err := s.proposeLocked(ctx, Entry{Op: OpTick})
		if err != nil {
			log.Printf("mooncake_master: tick: %v", err)
			return
		}
		s.afterCommit(ctx, res, wait)
	}
}

// VerifyOnce appends an OpVerify entry with the digest of the state as it stands before the
// entry, so every standby applying the log can check that it holds the same state.
func (s *Server) VerifyOnce(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.servingLocked() || s.state.Applied() == s.state.VerifiedAt() {
		return
	}
	if _, _, err := s.proposeLocked(ctx, Entry{Op: OpVerify, Digest: s.state.Digest()}); err != nil {
		log.Printf("mooncake_master: verify: %v", err)
	}
}

// verifyFirst writes the first verification entry as soon as the leader's state has one to
// verify; later ones follow every --verification_interval_sec (VerifyOnce). A standby thus
// reports "verification OK" soon after the first change, not an interval later.
func (s *Server) verifyFirst(ctx context.Context) {
	s.mu.Lock()
	first := s.state.VerifiedAt() == 0 && s.state.Applied() > 0
	s.mu.Unlock()
	if first {
		s.VerifyOnce(ctx)
	}
}

// Run drives the timers (client expiry, eviction, stale puts) until ctx ends.
func (s *Server) Run(ctx context.Context) {
	if s.cfg.RootFSDir != "" {
		go s.sweepTempsLoop(ctx)
	}
	period := min(100*time.Millisecond, s.cfg.ClientTTL/4)
	t := time.NewTicker(period)
	defer t.Stop()
	var report <-chan time.Time
	if s.cfg.EnableMetricReporting {
		rt := time.NewTicker(10 * time.Second)
		defer rt.Stop()
		report = rt.C
	}
	var verify <-chan time.Time
	if s.ha != nil && s.cfg.HotStandby.EnableVerification {
		vt := time.NewTicker(s.cfg.HotStandby.VerificationInterval)
		defer vt.Stop()
		verify = vt.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-verify:
			s.VerifyOnce(ctx)
		case <-t.C:
			s.CheckClients(ctx)
			s.TickOnce(ctx)
			if verify != nil {
				s.verifyFirst(ctx)
			}
		case <-report:
			log.Printf("mooncake_master: %s", s.metrics.Summary())
		}
	}
}

// Snapshot summarises the state for metrics.
func (s *Server) Snapshot() metrics.Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	st := s.state.Stats(now.UnixNano())
	snap := metrics.Snapshot{
		Objects: st.Objects, PendingPuts: st.PendingPuts, SoftPinned: st.SoftPinned, HardPinned: st.HardPinned,
		Leased: st.Leased, Clients: st.Clients, Capacity: st.Capacity, Used: st.Used,
		EvictedObjects: st.Counters.EvictedObjects, EvictedBytes: st.Counters.EvictedBytes,
		EvictionPasses: st.Counters.EvictionPasses, ReclaimedPuts: st.Counters.ReclaimedPuts,
		ExpiredClients: st.Counters.ExpiredClients, AppliedEntries: s.state.Applied(), Role: s.role,
		DFSUsed: st.DFSUsed, DFSCapacity: s.dfsCapacity(),
		ValueCacheBytes: s.state.CachedValueBytes(), ValueCacheHits: st.Counters.ValueCacheHits, ValueCacheDrops: st.Counters.ValueCacheDrops,
		Tier: metrics.TierStats{DiskOnly: st.DiskOnly, Moving: st.Moving, Offloaded: st.Counters.OffloadedObjects,
			OffloadFailures: st.Counters.OffloadFailures, DFSRefused: st.Counters.DFSRefused,
			DFSEvictedObjects: st.Counters.DFSEvictedObjects, DiskReads: st.Counters.DiskReads, Promotions: st.Counters.Promotions,
			LocalDiskUsed: st.LocalDiskUsed, LocalDiskEvicted: st.Counters.LocalDiskEvicted, LocalDiskRefused: st.Counters.LocalDiskRefused},
	}
	if s.ha != nil {
		snap.HA = true
		snap.Serving = s.servingLocked()
		snap.OplogAppliedSeq = s.state.Applied()
		if s.ha.com != nil {
			snap.OplogDurableSeq = s.ha.com.Durable()
		}
		snap.StandbyLag = s.ha.lag.Load()
		snap.LagAlert = s.ha.lagAlert.Load()
		snap.VerifyOK, snap.VerifyMismatch = s.ha.verifyOK.Load(), s.ha.verifyBad.Load()
		snap.StateTransitions = s.ha.transitions.Load()
	}
	for _, t := range s.lastSeen {
		if now.Sub(t) <= s.cfg.ClientTTL {
			snap.ActiveClients++
		}
	}
	segs := s.state.Segments()
	names := map[string]int{}
	for _, seg := range segs {
		names[seg.Name]++
	}
	for _, seg := range segs {
		label := seg.Name
		if names[seg.Name] > 1 {
			label = fmt.Sprintf("%s@%#x", seg.Name, seg.Base)
		}
		snap.Segments = append(snap.Segments, metrics.SegmentUsage{Label: label, Capacity: seg.Used + seg.Free, Used: seg.Used})
	}
	return snap
}

// ---- gRPC ----

// interceptor counts requests and failures per method and refuses work while not serving.
func (s *Server) interceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if s.sec.Token != nil {
		if err := api.RequireAuthenticated(ctx); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	resp, err := h(ctx, req)
	failed := err != nil
	code := api.CodeOf(err)
	if c, ok := resp.(api.Coded); ok && c.StatusCode() != api.OK {
		failed, code = true, c.StatusCode()
	}
	s.metrics.ObserveRPC(path.Base(info.FullMethod), failed)
	s.metrics.ObserveRPCResult(path.Base(info.FullMethod), code.String(), time.Since(start))
	return resp, err
}

// GRPCServer builds a gRPC server with the master service registered.
func (s *Server) GRPCServer() *grpc.Server {
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(s.interceptor),
		api.ServerCreds(),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.MaxRecvMsgSize(64 << 20),
	}
	if s.cfg.RPCThreads > 0 {
		opts = append(opts, grpc.NumStreamWorkers(uint32(s.cfg.RPCThreads)))
	}
	if s.cfg.RPCConnTimeout > 0 {
		// an idle gRPC connection gets a GOAWAY (its client reconnects when it next calls)
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: s.cfg.RPCConnTimeout}))
	}
	g := grpc.NewServer(opts...)
	api.RegisterMasterServer(g, s)
	return g
}

// Serve serves the master service on lis until ctx ends, then stops gracefully: gRPC, and the
// framed RPC (store/api/framed.go) for clients that open with its magic.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	g := s.GRPCServer()
	framed := api.NewFramedServer(&api.ServiceDesc, s, s.interceptor)
	framed.IdleTimeout = s.cfg.RPCConnTimeout
	sec := s.sec
	if sec.Refused == nil {
		s.refused.Prefix = "mooncake_master rpc"
		sec.Refused = func(remote net.Addr, why error) { s.refused.Refused(remote.String(), "", why) }
	}
	lis = api.NewSecureListener(noDelayListener{lis, s.cfg.RPCTCPNoDelay}, framed, sec)
	go func() {
		<-ctx.Done()
		framed.Close()
		stopped := make(chan struct{})
		go func() { g.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(2 * time.Second):
			g.Stop()
		}
	}()
	if err := g.Serve(lis); err != nil {
		return fmt.Errorf("master rpc server on %s: %w", lis.Addr(), err)
	}
	return nil
}

// noDelayListener sets TCP_NODELAY on the connections it accepts as --rpc_enable_tcp_no_delay
// says (Go's default is on).
type noDelayListener struct {
	net.Listener
	noDelay bool
}

func (l noDelayListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(l.noDelay)
	}
	return c, err
}

func (s *Server) do(ctx context.Context, e Entry) Result {
	s.touch(e.ClientID)
	res, err := s.Propose(ctx, e)
	if err != nil {
		if s.ha != nil {
			return unavailable(err)
		}
		return fail(api.INTERNAL_ERROR, err.Error())
	}
	return res
}

// notServing is the status of a request reaching a master that is not the serving leader.
func (s *Server) notServing() *api.Status {
	if s.Serving() {
		return nil
	}
	st := unavailable(ErrNotServing).Status()
	return &st
}

func statusOf(r Result) *api.Status { st := r.Status(); return &st }

func (s *Server) MountSegment(ctx context.Context, r *api.MountSegmentRequest) (*api.Status, error) {
	seg := r.Segment
	return statusOf(s.do(ctx, Entry{Op: OpMountSegment, ClientID: r.ClientID, Segment: &seg})), nil
}

func (s *Server) UnmountSegment(ctx context.Context, r *api.UnmountSegmentRequest) (*api.Status, error) {
	op := OpUnmountSegment
	switch {
	case r.LocalDisk:
		op = OpUnmountLocalDisk
	case r.Drain:
		op = OpDrainSegment
	}
	return statusOf(s.do(ctx, Entry{Op: op, ClientID: r.ClientID, SegmentID: r.SegmentID})), nil
}

func (s *Server) Ping(ctx context.Context, r *api.PingRequest) (*api.PingResponse, error) {
	if r.ClientID == "" {
		return &api.PingResponse{Status: api.Status{Code: api.INVALID_PARAMS, Message: "ping without a client id"}}, nil
	}
	if st := s.notServing(); st != nil {
		return &api.PingResponse{Status: *st}, nil
	}
	s.touch(r.ClientID)
	resp := &api.PingResponse{ClientTTLMs: s.cfg.ClientTTL.Milliseconds()}
	s.View(func(st *State) { resp.MountedSegments = st.ClientSegments(r.ClientID) })
	return resp, nil
}

func (s *Server) PutStart(ctx context.Context, r *api.PutStartRequest) (*api.PutStartResponse, error) {
	cfg := r.Config
	var res Result
	s.waitRoom(ctx, r.WaitMs, func() bool {
		res = s.do(ctx, Entry{Op: OpPutStart, ClientID: r.ClientID, Key: r.Key, Size: r.Size, Config: &cfg, Upsert: r.Upsert})
		return res.Retry
	})
	return &api.PutStartResponse{Status: res.Status(), Replicas: res.Replicas, Retry: res.Retry}, nil
}

// maxPutWait bounds how long a put told Retry is held (PutStartRequest.WaitMs).
const maxPutWait = 5 * time.Second

// waitRoom runs try, and again each time an entry frees memory, while it reports that memory
// is full with moves in progress (Retry), for up to waitMs: a put short of room proceeds within
// one round trip of a move's end instead of at its next poll. A master that stops serving
// while it holds puts answers them (Retry) within servingCheck, so that their clients turn to
// the new leader.
func (s *Server) waitRoom(ctx context.Context, waitMs int64, try func() (retry bool)) {
	var timer *time.Timer
	var check *time.Ticker
	for {
		s.mu.Lock()
		room := s.room // taken before trying: room freed in between closes it
		s.mu.Unlock()
		if !try() || waitMs <= 0 {
			return
		}
		if timer == nil {
			timer = time.NewTimer(min(time.Duration(waitMs)*time.Millisecond, maxPutWait))
			defer timer.Stop()
			check = time.NewTicker(servingCheck)
			defer check.Stop()
		}
	wait:
		for {
			select {
			case <-room:
				break wait
			case <-check.C:
				if !s.Serving() {
					return
				}
			case <-timer.C:
				return
			case <-ctx.Done():
				return
			}
		}
	}
}

// servingCheck is how often a held put checks that this master still serves.
const servingCheck = 100 * time.Millisecond

func (s *Server) PutEnd(ctx context.Context, r *api.KeyRequest) (*api.Status, error) {
	return statusOf(s.do(ctx, Entry{Op: OpPutEnd, ClientID: r.ClientID, Key: r.Key, Value: r.Value})), nil
}

// PutEndReserved completes a put written into the reservation r.Reserved (reserve.go).
func (s *Server) PutEndReserved(ctx context.Context, r *api.KeyRequest) (*api.Status, error) {
	if r.Reserved == "" {
		return &api.Status{Code: api.INVALID_PARAMS, Message: "PutEndReserved without a reservation"}, nil
	}
	return statusOf(s.do(ctx, Entry{Op: OpPutEndReserved, ClientID: r.ClientID, Key: r.Key, Reserved: r.Reserved, Value: r.Value,
		Keys: r.Confirmed})), nil
}

// PutEndUnconfirmed completes a put into the reservation r.Reserved whose write is still under
// way, readable from r.Value until the client confirms it (unconfirmed.go).
func (s *Server) PutEndUnconfirmed(ctx context.Context, r *api.KeyRequest) (*api.Status, error) {
	if r.Reserved == "" {
		return &api.Status{Code: api.INVALID_PARAMS, Message: "PutEndUnconfirmed without a reservation"}, nil
	}
	return statusOf(s.do(ctx, Entry{Op: OpPutEndReserved, ClientID: r.ClientID, Key: r.Key, Reserved: r.Reserved, Value: r.Value,
		Unconfirmed: true, Keys: r.Confirmed})), nil
}

// ConfirmPuts confirms the writes of the client's unconfirmed puts among r.Keys (unconfirmed.go).
func (s *Server) ConfirmPuts(ctx context.Context, r *api.BatchKeysRequest) (*api.Status, error) {
	if len(r.Keys) == 0 {
		return &api.Status{}, nil
	}
	return statusOf(s.do(ctx, Entry{Op: OpPutConfirm, ClientID: r.ClientID, Keys: r.Keys})), nil
}

func (s *Server) PutRevoke(ctx context.Context, r *api.KeyRequest) (*api.Status, error) {
	return statusOf(s.do(ctx, Entry{Op: OpPutRevoke, ClientID: r.ClientID, Key: r.Key})), nil
}

func (s *Server) leaseResp(res Result) api.GetReplicaListResponse {
	return api.GetReplicaListResponse{Status: res.Status(), Size: res.Size, Replicas: res.Replicas,
		LeaseTTLMs: s.cfg.DefaultKVLeaseTTL.Milliseconds(), Promote: res.Promote, Value: res.Value}
}

func (s *Server) GetReplicaList(ctx context.Context, r *api.KeyRequest) (*api.GetReplicaListResponse, error) {
	resp := s.leaseResp(s.do(ctx, Entry{Op: OpGrantLease, ClientID: r.ClientID, Key: r.Key}))
	return &resp, nil
}

func (s *Server) exist(key string) api.ExistKeyResponse {
	if err := ValidateKey(key); err != nil {
		return api.ExistKeyResponse{Status: api.StatusOf(err)}
	}
	var resp api.ExistKeyResponse
	s.View(func(st *State) { resp.Exists, resp.Size = st.Exists(key) })
	return resp
}

func (s *Server) ExistKey(ctx context.Context, r *api.KeyRequest) (*api.ExistKeyResponse, error) {
	if st := s.notServing(); st != nil {
		return &api.ExistKeyResponse{Status: *st}, nil
	}
	s.touch(r.ClientID)
	resp := s.exist(r.Key)
	return &resp, nil
}

func (s *Server) Remove(ctx context.Context, r *api.RemoveRequest) (*api.Status, error) {
	return statusOf(s.do(ctx, Entry{Op: OpRemove, ClientID: r.ClientID, Key: r.Key, Force: r.Force})), nil
}

func (s *Server) RemoveByRegex(ctx context.Context, r *api.RemoveByRegexRequest) (*api.CountResponse, error) {
	res := s.do(ctx, Entry{Op: OpRemoveByRegex, ClientID: r.ClientID, Pattern: r.Pattern, Force: r.Force, Scoped: r.Scoped, Tenant: r.Tenant})
	return &api.CountResponse{Status: res.Status(), Count: res.Count}, nil
}

func (s *Server) RemoveAll(ctx context.Context, r *api.RemoveAllRequest) (*api.CountResponse, error) {
	res := s.do(ctx, Entry{Op: OpRemoveAll, ClientID: r.ClientID, Scoped: r.Scoped, Tenant: r.Tenant, KeepHeld: r.KeepHeld})
	return &api.CountResponse{Status: res.Status(), Count: res.Count}, nil
}

// batch applies one Batch entry built from per-key entries and hands use its results: only
// during the call, as their slice is used again by later batches (so is the entries'), which
// spares the collector two slices of every batch call. Without a result (the entry was not
// applied: not serving, the log failed) use is not called and the status says why.
func (s *Server) batch(ctx context.Context, clientID string, n int, mk func(i int) Entry, use func([]Result)) api.Status {
	e := Entry{Op: OpBatch, ClientID: clientID}
	// An operation log (tests') may keep the entry: it gets slices of its own.
	reuse := s.log == nil
	if reuse {
		e.Batch, e.results = s.batchBufs.get(n)
	} else {
		e.Batch = make([]Entry, n)
	}
	for i := range n {
		e.Batch[i] = mk(i)
		e.Batch[i].ClientID = clientID
	}
	res := s.do(ctx, e)
	if res.Code == api.OK {
		use(res.Batch)
	}
	if reuse {
		s.batchBufs.put(e.Batch, res.Batch)
	}
	if res.Code != api.OK {
		return res.Status()
	}
	return api.Status{}
}

func (s *Server) BatchPutStart(ctx context.Context, r *api.BatchPutStartRequest) (*api.BatchPutStartResponse, error) {
	if len(r.Keys) != len(r.Sizes) {
		return &api.BatchPutStartResponse{Status: api.Status{Code: api.INVALID_PARAMS,
			Message: fmt.Sprintf("%d keys but %d sizes", len(r.Keys), len(r.Sizes))}}, nil
	}
	cfg := r.Config
	out := &api.BatchPutStartResponse{Results: make([]api.PutStartResponse, len(r.Keys))}
	pending := make([]int, len(r.Keys)) // the keys told Retry so far: all at first
	for i := range pending {
		pending[i] = i
	}
	first := true
	s.waitRoom(ctx, r.WaitMs, func() bool {
		var retry []int
		st := s.batch(ctx, r.ClientID, len(pending), func(j int) Entry {
			i := pending[j]
			return Entry{Op: OpPutStart, Key: r.Keys[i], Size: r.Sizes[i], Config: &cfg, Upsert: r.Upsert}
		}, func(results []Result) {
			for j, res := range results {
				i := pending[j]
				out.Results[i] = api.PutStartResponse{Status: res.Status(), Replicas: res.Replicas, Retry: res.Retry}
				if res.Retry {
					retry = append(retry, i)
				}
			}
		})
		if st.Code != api.OK {
			if first {
				out.Status = st
			} else { // keys started in earlier rounds keep their answers
				for _, i := range pending {
					out.Results[i] = api.PutStartResponse{Status: st}
				}
			}
			return false
		}
		first = false
		// Wait only while no key found room: keys that did are answered now, so that the
		// client writes them while moves free room for the others.
		progress := len(retry) < len(pending)
		pending = retry
		return !progress
	})
	if out.Status.Code != api.OK {
		out.Results = nil
	}
	return out, nil
}

// BatchReplicaClear drops the copies of the keys that may go (see State.replicaClear) and
// lists them; keys that may not are skipped, as upstream's.
func (s *Server) BatchReplicaClear(ctx context.Context, r *api.BatchReplicaClearRequest) (*api.BatchReplicaClearResponse, error) {
	out := &api.BatchReplicaClearResponse{ClearedKeys: []string{}}
	out.Status = s.batch(ctx, r.ClientID, len(r.Keys), func(i int) Entry {
		return Entry{Op: OpReplicaClear, Key: r.Keys[i], SegName: r.SegmentName}
	}, func(results []Result) {
		for i, res := range results {
			if res.Code == api.OK && res.Count > 0 {
				out.ClearedKeys = append(out.ClearedKeys, r.Keys[i])
			}
		}
	})
	return out, nil
}

func (s *Server) batchStatus(ctx context.Context, r *api.BatchKeysRequest, op Op) *api.BatchStatusResponse {
	out := &api.BatchStatusResponse{}
	out.Status = s.batch(ctx, r.ClientID, len(r.Keys), func(i int) Entry {
		e := Entry{Op: op, Key: r.Keys[i], Force: r.Force}
		if op == OpPutEnd && i < len(r.Values) {
			e.Value = r.Values[i] // the value cache (valuecache.go)
		}
		return e
	}, func(results []Result) { out.Results = statuses(results) })
	return out
}

// statuses are the results' statuses (nil for none, as an empty batch's answer has always been).
func statuses(results []Result) []api.Status {
	if len(results) == 0 {
		return nil
	}
	out := make([]api.Status, len(results))
	for i, res := range results {
		out[i] = res.Status()
	}
	return out
}

func (s *Server) BatchPutEnd(ctx context.Context, r *api.BatchKeysRequest) (*api.BatchStatusResponse, error) {
	return s.batchStatus(ctx, r, OpPutEnd), nil
}

func (s *Server) BatchPutRevoke(ctx context.Context, r *api.BatchKeysRequest) (*api.BatchStatusResponse, error) {
	return s.batchStatus(ctx, r, OpPutRevoke), nil
}

func (s *Server) BatchRemove(ctx context.Context, r *api.BatchKeysRequest) (*api.BatchStatusResponse, error) {
	return s.batchStatus(ctx, r, OpRemove), nil
}

func (s *Server) BatchGetReplicaList(ctx context.Context, r *api.BatchKeysRequest) (*api.BatchGetReplicaListResponse, error) {
	out := &api.BatchGetReplicaListResponse{}
	out.Status = s.batch(ctx, r.ClientID, len(r.Keys), func(i int) Entry { return Entry{Op: OpGrantLease, Key: r.Keys[i]} },
		func(results []Result) {
			if len(results) > 0 {
				out.Results = make([]api.GetReplicaListResponse, len(results))
			}
			for i, res := range results {
				out.Results[i] = s.leaseResp(res)
			}
		})
	return out, nil
}

func (s *Server) BatchExistKey(ctx context.Context, r *api.BatchKeysRequest) (*api.BatchExistKeyResponse, error) {
	if st := s.notServing(); st != nil {
		return &api.BatchExistKeyResponse{Status: *st}, nil
	}
	s.touch(r.ClientID)
	out := &api.BatchExistKeyResponse{Results: make([]api.ExistKeyResponse, len(r.Keys))}
	s.View(func(st *State) { // one lock for the batch, not one per key
		for i, k := range r.Keys {
			if err := ValidateKey(k); err != nil {
				out.Results[i] = api.ExistKeyResponse{Status: api.StatusOf(err)}
				continue
			}
			out.Results[i].Exists, out.Results[i].Size = st.Exists(k)
		}
	})
	return out, nil
}

func (s *Server) ServiceStatus(ctx context.Context, r *api.ServiceStatusRequest) (*api.ServiceStatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &api.ServiceStatusResponse{Role: s.role, ClusterID: s.cfg.ClusterID, RootFSDir: s.cfg.RootFSDir,
		HABackend: s.haBackend, HAEndpoints: s.haEndpoints, UnconfirmedPuts: s.cfg.SmallValueCacheBytes > 0}, nil
}
