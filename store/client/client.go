package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/auth"
	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/internal/memview"
	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/dfs"
	"github.com/mooncake-go/mooncake/store/ha"
	"github.com/mooncake-go/mooncake/store/tlsconf"
)

// Engine is what the client needs from a transfer engine; *engine.Engine implements it.
type Engine interface {
	SegmentName() string
	AllocateShared(length uint64) (uintptr, error)
	FreeShared(addr uintptr) error
	RegisterLocalMemory(addr uintptr, length uint64, location string) error
	UnregisterLocalMemory(addr uintptr) error
	OpenSegment(name string) (engine.SegmentID, error)
	MapRemote(id engine.SegmentID, addr uint64, length uint64) ([]byte, bool, error)
	MapRemotePinned(id engine.SegmentID, addr uint64, length uint64) ([]byte, func(), bool, error)
	TransferSync(ctx context.Context, reqs []engine.TransferRequest) error
}

var _ Engine = (*engine.Engine)(nil)

// Config configures a Client (the arguments of MooncakeDistributedStore.setup).
type Config struct {
	LocalHostname       string        // engine segment name / host ("" = the engine's default)
	MetadataServer      string        // engine metadata: P2PHANDSHAKE, http://..., etcd://..., redis://...
	GlobalSegmentSize   uint64        // bytes contributed to the store (0: a pure client)
	LocalBufferSize     uint64        // staging buffer (0: DefaultLocalBufferSize)
	Protocol            string        // "tcp" (default)
	DeviceName          string        // NICs for rdma-like protocols
	MasterServerAddress string        // host:port of mooncake_master, or "etcd://h:p,h:p" / "redis://h:p" to follow the HA leader
	ClusterID           string        // HA cluster to follow ("" : DefaultClusterID) (MC_STORE_CLUSTER_ID)
	TenantID            string        // key namespace ("" or "default": the default one) (setup's tenant_id; api/tenant.go)
	RPCTimeout          time.Duration // per master call (0: DefaultRPCTimeout)
	PingInterval        time.Duration // heartbeat period (0: 1 s)

	// The package reads no environment: capi/ and cmd/ fill these from the knobs of package
	// config named in the comments.
	GRPC     bool       // call the master over gRPC instead of the framed RPC (MC_STORE_RPC=grpc)
	Prefault Prefault   // populate the mounted segment up front: auto (zero), on, off (MC_STORE_PREFAULT)
	HA       ha.Options // Redis password / database / TLS files of an HA master address (MC_REDIS_PASSWORD, MC_REDIS_DB_INDEX, MC_TLS_*)
	// Security of the master connections (docs/security-store.md): the token the master
	// requires (MC_AUTH_TOKEN / MC_AUTH_TOKEN_FILE), and TLS when MasterTLS is set
	// (MC_STORE_TLS; TLS holds MC_TLS_CA_FILE, and MC_TLS_CERT_FILE and MC_TLS_KEY_FILE for a
	// master that requires a client certificate). SecurityError is why those knobs could not
	// be loaded (set by config.StoreClient): New fails with it rather than run without them.
	AuthToken     *auth.Token
	MasterTLS     bool
	SecurityError error
	TLS           tlsconf.Client
	Offload       OffloadConfig // SSD offload: setup(enable_ssd_offload=True) and the MOONCAKE_OFFLOAD_* knobs (offload.go)
	Engine        engine.Config // the rest of the engine New creates (EngineConfig sets its name, metadata, protocol and device)
}

const (
	DefaultLocalBufferSize = 16 << 20
	DefaultRPCTimeout      = 10 * time.Second
)

// Client is one store client. All methods are safe for concurrent use.
type Client struct {
	cfg       Config
	eng       Engine
	ownEngine func() error
	id        string
	tenant    string // normalized TenantID ("" = the default tenant)
	cc        *masterConn
	master    *api.MasterClient

	segment   *api.Segment         // nil for a pure client
	extra     map[string]*extraSeg // segments mounted after setup, by id (segments.go; segMu)
	extraN    int                  // extra segments mounted so far (their ids)
	stageAddr uintptr
	stageSize uint64
	chunk     uint64
	chunks    chan uint64 // free staging chunk offsets

	segMu    sync.Mutex
	segIDs   map[string]engine.SegmentID
	regMu    sync.RWMutex
	regions  map[uintptr]uint64 // user buffers registered through RegisterBuffer
	healthMu sync.Mutex
	healthy  bool
	lastErr  error

	closeOnce sync.Once
	stop      context.CancelFunc
	life      context.Context // ends at Close (c.stop)
	done      chan struct{}

	rootFS string         // the master's G3 directory ("" = no G3 tier)
	bg     sync.WaitGroup // background workers other than the heartbeat (the G3 offload loop)
	tiers  tierCounters
	local  *localDisk // SSD offload (offload.go); nil when off
	// httpc reads other clients' local disks (a client without SSD offload of its own).
	httpOnce sync.Once
	httpc    *http.Client
}

// New creates a client with its own transfer engine (closed by Close).
func New(ctx context.Context, cfg Config) (*Client, error) {
	eng, err := engine.New(ctx, EngineConfig(cfg))
	if err != nil {
		return nil, api.Errorf(api.INVALID_PARAMS, "start transfer engine: %v", err)
	}
	c, err := NewWithEngine(ctx, eng, cfg)
	if err != nil {
		eng.Close()
		return nil, err
	}
	c.ownEngine = eng.Close
	return c, nil
}

// EngineConfig is the engine configuration a client with cfg needs. With a central metadata
// server the segment name must be unique per process, so a local_hostname without a port gets a
// free one appended (Mooncake's "host:port" segment names).
func EngineConfig(cfg Config) engine.Config {
	name := cfg.LocalHostname
	meta := cfg.MetadataServer
	if meta == "" {
		meta = cfg.Engine.MetadataServer
	}
	ec := cfg.Engine
	if ec.MinRPCPort <= 0 && ec.MaxRPCPort <= 0 {
		ec.MinRPCPort, ec.MaxRPCPort = StoreMinPort, StoreMaxPort // upstream's store port range
	}
	if name != "" && meta != "" && !strings.EqualFold(meta, engine.P2PHandshake) {
		if _, _, err := net.SplitHostPort(name); err != nil {
			if port, ok := freePort(ec.MinRPCPort, ec.MaxRPCPort); ok {
				name = net.JoinHostPort(name, strconv.Itoa(port))
			}
		}
	}
	ec.LocalServerName, ec.MetadataServer, ec.Protocol, ec.DeviceName = name, meta, cfg.Protocol, cfg.DeviceName
	return ec
}

// StoreMinPort and StoreMaxPort bound the port a store client's engine picks when
// local_hostname names none (upstream's 12300-14300), unless MC_MIN_RPC_PORT / MC_MAX_RPC_PORT
// say otherwise.
const (
	StoreMinPort = 12300
	StoreMaxPort = 14300
)

// freePort finds a port in [lo, hi) that is free now.
func freePort(lo, hi int) (int, bool) {
	if lo <= 0 || hi <= lo {
		lo, hi = StoreMinPort, StoreMaxPort
	}
	for i := 0; i < 64; i++ {
		p := lo + mrand.IntN(hi-lo)
		if l, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(p))); err == nil {
			l.Close()
			return p, true
		}
	}
	return 0, false
}

// NewWithEngine creates a client over an existing engine (the process-wide one), which the
// client does not close. It checks the master is reachable, allocates and mounts the segment,
// allocates the staging buffer and starts the heartbeat.
func NewWithEngine(ctx context.Context, eng Engine, cfg Config) (*Client, error) {
	if eng == nil {
		return nil, api.Errorf(api.INVALID_PARAMS, "no transfer engine")
	}
	if cfg.RPCTimeout <= 0 {
		cfg.RPCTimeout = DefaultRPCTimeout
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = time.Second
	}
	if cfg.LocalBufferSize == 0 {
		cfg.LocalBufferSize = DefaultLocalBufferSize
	}
	if cfg.MasterServerAddress == "" {
		return nil, api.Errorf(api.INVALID_PARAMS, "master_server_address is empty (want host:port of mooncake_master)")
	}
	if cfg.SecurityError != nil {
		return nil, api.Errorf(api.INVALID_PARAMS, "%v", cfg.SecurityError)
	}
	if cfg.Offload.Enable && cfg.GlobalSegmentSize == 0 {
		return nil, api.Errorf(api.INVALID_PARAMS, "enable_ssd_offload needs a global segment (global_segment_size > 0): offloaded objects move from it")
	}
	tenant, err := api.NormalizeTenant(cfg.TenantID)
	if err != nil {
		return nil, err
	}
	cc, err := dialMaster(ctx, cfg)
	if err != nil {
		return nil, api.Errorf(api.INVALID_PARAMS, "%v", err)
	}
	c := &Client{cfg: cfg, eng: eng, id: newID(), cc: cc, master: api.NewMasterClient(cc), tenant: tenant,
		segIDs: map[string]engine.SegmentID{}, extra: map[string]*extraSeg{}, regions: map[uintptr]uint64{}, healthy: true, done: make(chan struct{})}
	fail := func(err error) (*Client, error) {
		c.release()
		return nil, err
	}
	// Is the master there? Fail now, clearly, rather than on the first put.
	sctx, cancel := context.WithTimeout(ctx, cfg.RPCTimeout)
	ss, err := c.master.ServiceStatus(sctx, &api.ServiceStatusRequest{})
	cancel()
	if err != nil {
		return fail(api.Errorf(api.CodeOf(err), "cannot reach mooncake_master at %s: %v", cfg.MasterServerAddress, err))
	}
	c.rootFS = ss.RootFSDir
	c.stageSize = cfg.LocalBufferSize
	if c.stageAddr, err = eng.AllocateShared(c.stageSize); err != nil {
		return fail(api.Errorf(api.INTERNAL_ERROR, "allocate %d-byte local buffer: %v", c.stageSize, err))
	}
	c.chunk = min(max(c.stageSize/16, 64<<10), 8<<20, c.stageSize)
	c.chunks = make(chan uint64, c.stageSize/c.chunk)
	for off := uint64(0); off+c.chunk <= c.stageSize; off += c.chunk {
		c.chunks <- off
	}
	if cfg.GlobalSegmentSize > 0 {
		base, err := eng.AllocateShared(cfg.GlobalSegmentSize)
		if err != nil {
			return fail(api.Errorf(api.INTERNAL_ERROR, "allocate %d-byte global segment: %v", cfg.GlobalSegmentSize, err))
		}
		if prefaultSegment(cfg.Prefault, cfg.GlobalSegmentSize) {
			memview.Populate(base, cfg.GlobalSegmentSize, true)
		}
		c.segment = &api.Segment{ID: c.id + "/0", Name: eng.SegmentName(), Base: uint64(base), Size: cfg.GlobalSegmentSize}
		if cfg.Offload.Enable {
			if err := c.startLocalDisk(cfg.Offload, offloadHost(eng.SegmentName(), cfg.LocalHostname)); err != nil {
				return fail(err)
			}
			c.segment.OffloadEndpoint, c.segment.OffloadCapacity = c.local.endpoint, c.local.capacity
		}
		if err := c.mount(ctx); err != nil {
			return fail(err)
		}
	}
	hctx, stop := context.WithCancel(context.Background())
	c.stop, c.life = stop, hctx
	go c.heartbeat(hctx)
	if c.local != nil {
		c.bg.Add(1)
		go func() {
			defer c.bg.Done()
			c.localHousekeeping(hctx)
		}()
	}
	if (c.rootFS != "" || c.local != nil) && c.segment != nil {
		c.bg.Add(1)
		go func() {
			defer c.bg.Done()
			c.offloadLoop(hctx)
		}()
	}
	return c, nil
}

func newID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// ID is the client's id on the master.
func (c *Client) ID() string { return c.id }

// Hostname is the engine segment name other clients reach this one by.
func (c *Client) Hostname() string { return c.eng.SegmentName() }

// Segment is the mounted segment (nil for a pure client).
func (c *Client) Segment() *api.Segment { return c.segment }

func (c *Client) rpcCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.RPCTimeout)
}

// rpcErr turns a transport failure into an *api.Error naming the master.
func (c *Client) rpcErr(op string, err error) error {
	c.setHealth(false, err)
	return api.Errorf(api.CodeOf(err), "%s: master %s: %v", op, c.cfg.MasterServerAddress, err)
}

func (c *Client) mount(ctx context.Context) error {
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	st, err := c.master.MountSegment(rctx, &api.MountSegmentRequest{ClientID: c.id, Segment: *c.segment})
	if err != nil {
		return c.rpcErr("mount segment", err)
	}
	if err := st.Err(); err != nil {
		return fmt.Errorf("mount segment %s: %w", c.segment.Name, err)
	}
	return nil
}

func (c *Client) heartbeat(ctx context.Context) {
	defer close(c.done)
	t := time.NewTicker(c.cfg.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, max(c.cfg.PingInterval, time.Second))
		resp, err := c.master.Ping(rctx, &api.PingRequest{ClientID: c.id})
		cancel()
		if err != nil {
			c.setHealth(false, err)
			continue
		}
		c.setHealth(true, nil)
		c.remountExtra(ctx, resp.MountedSegments)
		if c.segment != nil && !containsStr(resp.MountedSegments, c.segment.ID) {
			if err := c.mount(ctx); err != nil {
				log.Printf("mooncake store client: re-mount of %s failed: %v", c.segment.Name, err)
			} else {
				log.Printf("mooncake store client: re-mounted segment %s on the master", c.segment.Name)
			}
		}
	}
}

func containsStr(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func (c *Client) setHealth(ok bool, err error) {
	c.healthMu.Lock()
	c.healthy, c.lastErr = ok, err
	c.healthMu.Unlock()
}

// HealthCheck asks the master for its status: nil when it answers in time.
func (c *Client) HealthCheck(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, min(c.cfg.RPCTimeout, 3*time.Second))
	defer cancel()
	if _, err := c.master.ServiceStatus(rctx, &api.ServiceStatusRequest{}); err != nil {
		return c.rpcErr("health check", err)
	}
	c.setHealth(true, nil)
	return nil
}

// Close unmounts the segment (its replicas disappear from the master; copies elsewhere stay),
// stops the heartbeat and frees the memory. It is idempotent.
func (c *Client) Close() error {
	var err error
	c.closeOnce.Do(func() {
		if c.stop != nil {
			c.stop()
			<-c.done
			c.bg.Wait()
		}
		if e := c.closeExtra(); e != nil {
			err = e
		}
		if c.segment != nil {
			ctx, cancel := c.rpcCtx(context.Background())
			st, e := c.master.UnmountSegment(ctx, &api.UnmountSegmentRequest{ClientID: c.id, SegmentID: c.segment.ID})
			cancel()
			if e == nil {
				e = st.Err()
			}
			if e != nil && !api.Is(e, api.SEGMENT_NOT_FOUND) {
				err = fmt.Errorf("unmount segment %s: %w", c.segment.Name, e)
			}
		}
		c.release()
	})
	return err
}

func (c *Client) release() {
	if c.local != nil {
		c.local.close()
	}
	if c.segment != nil {
		c.eng.FreeShared(uintptr(c.segment.Base))
	}
	if c.stageAddr != 0 {
		c.eng.FreeShared(c.stageAddr)
	}
	c.regMu.Lock()
	for addr := range c.regions {
		c.eng.UnregisterLocalMemory(addr)
	}
	c.regions = map[uintptr]uint64{}
	c.regMu.Unlock()
	if c.cc != nil {
		c.cc.Close()
	}
	if c.ownEngine != nil {
		c.ownEngine()
	}
}

// ---- buffers ----

// RegisterBuffer registers user memory [addr, addr+length) with the engine for zero-copy
// PutFrom/GetInto.
func (c *Client) RegisterBuffer(addr uintptr, length uint64) error {
	if addr == 0 || length == 0 {
		return api.Errorf(api.INVALID_PARAMS, "register_buffer needs a non-null address and a non-zero length")
	}
	if err := c.eng.RegisterLocalMemory(addr, length, "cpu:0"); err != nil {
		return api.Errorf(api.INVALID_PARAMS, "register buffer %#x (+%d): %v", addr, length, err)
	}
	c.regMu.Lock()
	c.regions[addr] = length
	c.regMu.Unlock()
	return nil
}

// UnregisterBuffer undoes RegisterBuffer.
func (c *Client) UnregisterBuffer(addr uintptr) error {
	c.regMu.Lock()
	_, ok := c.regions[addr]
	delete(c.regions, addr)
	c.regMu.Unlock()
	if !ok {
		return api.Errorf(api.INVALID_PARAMS, "buffer %#x was not registered with this store", addr)
	}
	if err := c.eng.UnregisterLocalMemory(addr); err != nil {
		return api.Errorf(api.INVALID_PARAMS, "unregister buffer %#x: %v", addr, err)
	}
	return nil
}

func (c *Client) registered(addr uintptr, n uint64) bool {
	c.regMu.RLock()
	defer c.regMu.RUnlock()
	for a, l := range c.regions {
		if addr >= a && addr+uintptr(n) <= a+uintptr(l) {
			return true
		}
	}
	return false
}

// ---- data movement ----

func (c *Client) openSegment(name string) (engine.SegmentID, error) {
	c.segMu.Lock()
	id, ok := c.segIDs[name]
	c.segMu.Unlock()
	if ok {
		return id, nil
	}
	id, err := c.eng.OpenSegment(name)
	if err != nil {
		return 0, api.Errorf(api.TRANSFER_FAIL, "open segment %s: %v", name, err)
	}
	c.segMu.Lock()
	c.segIDs[name] = id
	c.segMu.Unlock()
	return id, nil
}

// buf is local memory taking part in a transfer: a Go or foreign slice, and whether it lies in
// engine-registered memory (then transfers use it directly, without staging).
type buf struct {
	b          []byte
	registered bool
}

// transfer moves len(local.b) bytes between local and the replica (write: local -> replica).
func (c *Client) transfer(ctx context.Context, write bool, local buf, r api.Replica) error {
	n := uint64(len(local.b))
	if n > r.Size {
		return api.Errorf(api.BUFFER_OVERFLOW, "%d bytes do not fit a %d-byte replica", n, r.Size)
	}
	id, err := c.openSegment(r.SegmentName)
	if err != nil {
		return err
	}
	// Same host: one memcpy through the peer's (or our own) shared mapping, held for the copy so
	// a peer dying or a segment being freed meanwhile cannot unmap it under us.
	if view, release, ok, err := c.eng.MapRemotePinned(id, r.Addr, n); err == nil && ok {
		if !write {
			// A large result is usually fresh memory (a new bytes object, a malloc above the
			// mmap threshold): fault it in with one system call, not one fault per 4 KiB.
			populateView(local.b, true)
		}
		if write {
			copy(view, local.b)
		} else {
			copy(local.b, view)
		}
		release()
		return nil
	}
	op := engine.OpRead
	if write {
		op = engine.OpWrite
	}
	if local.registered {
		err := c.eng.TransferSync(ctx, []engine.TransferRequest{{Opcode: op, Source: memview.Addr(local.b), TargetID: id, TargetOffset: r.Addr, Length: n}})
		if err != nil {
			return api.Errorf(api.TRANSFER_FAIL, "transfer %d bytes with %s: %v", n, r.SegmentName, err)
		}
		return nil
	}
	return c.staged(ctx, op, local.b, id, r)
}

// staged moves data through staging chunks, several chunks per engine batch.
func (c *Client) staged(ctx context.Context, op engine.Opcode, data []byte, id engine.SegmentID, r api.Replica) error {
	stage := memview.Bytes(c.stageAddr, int(c.stageSize))
	for done := uint64(0); done < uint64(len(data)); {
		// take one chunk (blocking), then any more that are free right away
		var offs []uint64
		select {
		case off := <-c.chunks:
			offs = append(offs, off)
		case <-ctx.Done():
			return api.Errorf(api.RPC_TIMEOUT, "waiting for local buffer space: %v", ctx.Err())
		}
		want := (uint64(len(data)) - done + c.chunk - 1) / c.chunk
	more:
		for uint64(len(offs)) < min(want, 8) {
			select {
			case off := <-c.chunks:
				offs = append(offs, off)
			default:
				break more
			}
		}
		reqs := make([]engine.TransferRequest, 0, len(offs))
		type piece struct{ stage, data []byte }
		var pieces []piece
		p := done
		for _, off := range offs {
			if p >= uint64(len(data)) {
				break
			}
			n := min(c.chunk, uint64(len(data))-p)
			pc := piece{stage[off : off+n], data[p : p+n]}
			if op == engine.OpWrite {
				copy(pc.stage, pc.data)
			}
			pieces = append(pieces, pc)
			reqs = append(reqs, engine.TransferRequest{Opcode: op, Source: c.stageAddr + uintptr(off), TargetID: id, TargetOffset: r.Addr + p, Length: n})
			p += n
		}
		err := c.eng.TransferSync(ctx, reqs)
		if err == nil && op == engine.OpRead {
			for _, pc := range pieces {
				copy(pc.data, pc.stage)
			}
		}
		for _, off := range offs {
			c.chunks <- off
		}
		if err != nil {
			return api.Errorf(api.TRANSFER_FAIL, "transfer %d bytes with %s: %v", len(data), r.SegmentName, err)
		}
		done = p
	}
	return nil
}

// ---- put ----

func (c *Client) writeReplicas(ctx context.Context, parts []buf, reps []api.Replica) error {
	for _, r := range reps {
		var off uint64
		for _, p := range parts {
			if len(p.b) == 0 {
				continue
			}
			rr := r
			rr.Addr += off
			rr.Size -= off
			if err := c.transfer(ctx, true, p, rr); err != nil {
				return err
			}
			off += uint64(len(p.b))
		}
	}
	return nil
}

func (c *Client) put(ctx context.Context, key string, parts []buf, cfg api.ReplicateConfig, upsert bool) error {
	key, err := c.tkey(key)
	if err != nil {
		return err
	}
	return c.putKey(ctx, key, parts, cfg, upsert)
}

// putKey is put of an internal key.
func (c *Client) putKey(ctx context.Context, key string, parts []buf, cfg api.ReplicateConfig, upsert bool) error {
	var size uint64
	for _, p := range parts {
		size += uint64(len(p.b))
	}
	ps, err := c.putStart(ctx, key, size, cfg, upsert)
	if err != nil {
		return err
	}
	if ps.Code == api.OBJECT_ALREADY_EXISTS {
		return nil // write-once: the key is already stored
	}
	if err := ps.Err(); err != nil {
		return fmt.Errorf("put %s: %w", quote(key), err)
	}
	if err := c.writeReplicas(ctx, parts, ps.Replicas); err != nil {
		c.revoke(key)
		return fmt.Errorf("put %s: %w", quote(key), err)
	}
	rctx, cancel := c.rpcCtx(ctx)
	st, err := c.master.PutEnd(rctx, &api.KeyRequest{ClientID: c.id, Key: key})
	cancel()
	if err != nil {
		return c.rpcErr("put "+quote(key), err)
	}
	if err := st.Err(); err != nil {
		return fmt.Errorf("put %s: %w", quote(key), err)
	}
	return nil
}

// placement applies the client-side placement options: PreferAllocInSameNode names this
// client's own segment as the preferred one when the caller named none.
func (c *Client) placement(cfg api.ReplicateConfig) api.ReplicateConfig {
	if cfg.PreferAllocInSameNode && len(cfg.PreferredSegments) == 0 && c.segment != nil {
		cfg.PreferredSegments = []string{c.segment.Name}
	}
	return cfg
}

func (c *Client) revoke(key string) {
	ctx, cancel := c.rpcCtx(context.Background())
	defer cancel()
	c.master.PutRevoke(ctx, &api.KeyRequest{ClientID: c.id, Key: key})
}

// quote is how this package's messages show a key (api.DisplayKey).
func quote(key string) string {
	return api.DisplayKey(key)
}

// tkey is the internal key of the caller's key k: k itself for the default tenant, else k in
// this client's tenant namespace (api/tenant.go). Keys holding the namespace separator are
// refused, so that no caller can name another tenant's keys.
func (c *Client) tkey(k string) (string, error) {
	if err := api.CheckUserKey(k); err != nil {
		return "", err
	}
	return api.TenantKey(c.tenant, k), nil
}

// tkeys is tkey for many keys (the same slice when nothing changes); one bad key fails them all.
func (c *Client) tkeys(ks []string) ([]string, error) {
	out, cloned := ks, false
	for i, k := range ks {
		ik, err := c.tkey(k)
		if err != nil {
			return nil, err
		}
		if ik != k {
			if !cloned {
				out, cloned = slices.Clone(ks), true
			}
			out[i] = ik
		}
	}
	return out, nil
}

// Put stores value under key. A key that already exists is left as it is (write-once).
func (c *Client) Put(ctx context.Context, key string, value []byte, cfg api.ReplicateConfig) error {
	return c.put(ctx, key, []buf{{b: value}}, cfg, false)
}

// PutParts stores the concatenation of parts under key.
func (c *Client) PutParts(ctx context.Context, key string, parts [][]byte, cfg api.ReplicateConfig) error {
	return c.put(ctx, key, partBufs(parts), cfg, false)
}

func partBufs(parts [][]byte) []buf {
	bs := make([]buf, len(parts))
	for i, p := range parts {
		bs[i] = buf{b: p}
	}
	return bs
}

// PutFrom stores size bytes at addr (zero-copy when the memory was registered).
func (c *Client) PutFrom(ctx context.Context, key string, addr uintptr, size uint64, cfg api.ReplicateConfig) error {
	return c.putFrom(ctx, key, addr, size, cfg, false)
}

func (c *Client) putFrom(ctx context.Context, key string, addr uintptr, size uint64, cfg api.ReplicateConfig, upsert bool) error {
	if addr == 0 || size == 0 {
		return api.Errorf(api.INVALID_PARAMS, "put_from needs a non-null buffer and a non-zero size")
	}
	return c.put(ctx, key, []buf{{b: memview.Bytes(addr, int(size)), registered: c.registered(addr, size)}}, cfg, upsert)
}

// BatchPut stores values[i] under keys[i]; one error (or nil) per key.
func (c *Client) BatchPut(ctx context.Context, keys []string, values [][]byte, cfg api.ReplicateConfig) []error {
	return c.batchPut(ctx, keys, valueBufs(values), cfg, false)
}

func valueBufs(values [][]byte) [][]buf {
	bufs := make([][]buf, len(values))
	for i, v := range values {
		bufs[i] = []buf{{b: v}}
	}
	return bufs
}

// BatchPutFrom is PutFrom for many keys.
func (c *Client) BatchPutFrom(ctx context.Context, keys []string, addrs []uintptr, sizes []uint64, cfg api.ReplicateConfig) []error {
	return c.batchPutFrom(ctx, keys, addrs, sizes, cfg, false)
}

func (c *Client) batchPutFrom(ctx context.Context, keys []string, addrs []uintptr, sizes []uint64, cfg api.ReplicateConfig, upsert bool) []error {
	if len(addrs) != len(keys) || len(sizes) != len(keys) {
		return fill(len(keys), api.Errorf(api.INVALID_PARAMS, "%d keys, %d buffers, %d sizes", len(keys), len(addrs), len(sizes)))
	}
	bufs := make([][]buf, len(keys))
	for i := range keys {
		if addrs[i] == 0 || sizes[i] == 0 {
			bufs[i] = nil
			continue
		}
		bufs[i] = []buf{{b: memview.Bytes(addrs[i], int(sizes[i])), registered: c.registered(addrs[i], sizes[i])}}
	}
	return c.batchPut(ctx, keys, bufs, cfg, upsert)
}

// ---- upsert: put that replaces an existing value ----
//
// The master keeps the old value readable while the new one is written and swaps them when the
// write is complete: a reader sees the whole old value or the whole new one. A failed upsert
// leaves the old value in place.

// Upsert stores value under key, replacing the value the key has.
func (c *Client) Upsert(ctx context.Context, key string, value []byte, cfg api.ReplicateConfig) error {
	return c.put(ctx, key, []buf{{b: value}}, cfg, true)
}

// UpsertParts is Upsert of the concatenation of parts.
func (c *Client) UpsertParts(ctx context.Context, key string, parts [][]byte, cfg api.ReplicateConfig) error {
	return c.put(ctx, key, partBufs(parts), cfg, true)
}

// UpsertFrom is Upsert of size bytes at addr (zero-copy when the memory was registered).
func (c *Client) UpsertFrom(ctx context.Context, key string, addr uintptr, size uint64, cfg api.ReplicateConfig) error {
	return c.putFrom(ctx, key, addr, size, cfg, true)
}

// BatchUpsert is Upsert for many keys; one error (or nil) per key.
func (c *Client) BatchUpsert(ctx context.Context, keys []string, values [][]byte, cfg api.ReplicateConfig) []error {
	return c.batchPut(ctx, keys, valueBufs(values), cfg, true)
}

// BatchUpsertFrom is UpsertFrom for many keys.
func (c *Client) BatchUpsertFrom(ctx context.Context, keys []string, addrs []uintptr, sizes []uint64, cfg api.ReplicateConfig) []error {
	return c.batchPutFrom(ctx, keys, addrs, sizes, cfg, true)
}

func fill(n int, err error) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

func (c *Client) batchPut(ctx context.Context, keys []string, bufs [][]buf, cfg api.ReplicateConfig, upsert bool) []error {
	errs := make([]error, len(keys))
	if len(bufs) != len(keys) {
		return fill(len(keys), api.Errorf(api.INVALID_PARAMS, "%d keys but %d values", len(keys), len(bufs)))
	}
	if len(keys) == 0 {
		return errs
	}
	keys, err := c.tkeys(keys)
	if err != nil {
		return fill(len(errs), err)
	}
	sizes := make([]uint64, len(keys))
	for i, b := range bufs {
		for _, p := range b {
			sizes[i] += uint64(len(p.b))
		}
	}
	// Keys answered Retry (memory full while objects move to a disk tier) are asked for again,
	// as a batch, until the master finds them room or the RPC timeout passes (see putStart).
	pending := make([]int, len(keys))
	for i := range pending {
		pending[i] = i
	}
	deadline := time.Now().Add(c.cfg.RPCTimeout)
	var wait roomWait
	for len(pending) > 0 {
		req := &api.BatchPutStartRequest{ClientID: c.id, Config: c.placement(cfg), Upsert: upsert, WaitMs: wait.ms(c, deadline)}
		for _, i := range pending {
			req.Keys, req.Sizes = append(req.Keys, keys[i]), append(req.Sizes, sizes[i])
		}
		rctx, cancel := c.rpcCtx(ctx)
		resp, err := c.master.BatchPutStart(rctx, req)
		cancel()
		if err == nil {
			err = resp.Err()
		}
		if err == nil && len(resp.Results) != len(pending) {
			err = api.Errorf(api.INTERNAL_ERROR, "the master answered %d of %d keys", len(resp.Results), len(pending))
		}
		if err != nil {
			err = c.rpcErr("batch put", err)
			for _, i := range pending {
				errs[i] = err
			}
			return errs
		}
		var retry []int
		for j, r := range resp.Results {
			if r.Retry {
				retry = append(retry, pending[j])
			}
		}
		c.finishPuts(ctx, keys, bufs, pending, resp.Results, errs)
		if len(retry) > 0 && len(retry) < len(pending) {
			wait.backoff = 0 // some keys found room: ask for the others at once
		} else if len(retry) > 0 && !wait.again(ctx, deadline) {
			for j, r := range resp.Results {
				if r.Retry {
					errs[pending[j]] = fmt.Errorf("put %s: %w", quote(keys[pending[j]]), r.Err())
				}
			}
			return errs
		}
		pending = retry
	}
	return errs
}

// finishPuts writes the values of the keys a BatchPutStart gave room (idx[j] is the key of
// results[j]), revokes those whose writes failed and ends the others in one batch each,
// setting errs; keys answered Retry are left alone.
func (c *Client) finishPuts(ctx context.Context, keys []string, bufs [][]buf, idx []int, results []api.PutStartResponse, errs []error) {
	var ended, revoked []string
	var endIdx []int
	for j, r := range results {
		i := idx[j]
		switch {
		case r.Code == api.OBJECT_ALREADY_EXISTS, r.Retry:
		case r.Code != api.OK:
			errs[i] = fmt.Errorf("put %s: %w", quote(keys[i]), r.Err())
		default:
			if err := c.writeReplicas(ctx, bufs[i], r.Replicas); err != nil {
				errs[i] = fmt.Errorf("put %s: %w", quote(keys[i]), err)
				revoked = append(revoked, keys[i])
				continue
			}
			ended = append(ended, keys[i])
			endIdx = append(endIdx, i)
		}
	}
	if len(revoked) > 0 {
		rctx, cancel := c.rpcCtx(context.Background())
		c.master.BatchPutRevoke(rctx, &api.BatchKeysRequest{ClientID: c.id, Keys: revoked})
		cancel()
	}
	if len(ended) > 0 {
		rctx, cancel := c.rpcCtx(ctx)
		resp, err := c.master.BatchPutEnd(rctx, &api.BatchKeysRequest{ClientID: c.id, Keys: ended})
		cancel()
		if err == nil {
			err = resp.Err()
		}
		for j, i := range endIdx {
			switch {
			case err != nil:
				errs[i] = c.rpcErr("put "+quote(keys[i]), err)
			case j < len(resp.Results) && resp.Results[j].Code != api.OK:
				errs[i] = fmt.Errorf("put %s: %w", quote(keys[i]), resp.Results[j].Err())
			}
		}
	}
}

// ---- get ----

// orderReplicas puts the local segment first, then replicas whose memory this host can map.
func (c *Client) orderReplicas(reps []api.Replica) []api.Replica {
	out := append([]api.Replica(nil), reps...)
	me := c.eng.SegmentName()
	rank := func(r api.Replica) int {
		switch {
		case r.IsLocalDisk() && c.local != nil && r.Endpoint == c.local.endpoint:
			return 4 // memory copies first, then this host's own disk
		case r.IsDisk():
			return 5
		case r.IsLocalDisk():
			return 6 // another client's disk: a round trip to it
		}
		if r.SegmentName == me {
			return 0
		}
		id, err := c.openSegment(r.SegmentName)
		if err != nil {
			return 3
		}
		if _, ok, err := c.eng.MapRemote(id, r.Addr, 1); err == nil && ok {
			return 1
		}
		return 2
	}
	ranks := make(map[int]int, len(out))
	for i, r := range out {
		ranks[i] = rank(r)
	}
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return ranks[idx[a]] < ranks[idx[b]] })
	sorted := make([]api.Replica, len(out))
	for i, j := range idx {
		sorted[i] = out[j]
	}
	return sorted
}

func (c *Client) readInto(ctx context.Context, key string, g *api.GetReplicaListResponse, start time.Time, dst buf) error {
	if len(g.Replicas) == 0 {
		return api.Errorf(api.REPLICA_NOT_FOUND, "get %s: no replica", quote(key))
	}
	var errs []error
	for _, r := range c.orderReplicas(g.Replicas) {
		if r.IsFile() {
			if err := c.readDisk(ctx, key, g, r, dst); err != nil {
				errs = append(errs, err)
				continue
			}
			return nil
		}
		if err := c.transfer(ctx, false, dst, r); err != nil {
			errs = append(errs, err)
			continue
		}
		if ttl := time.Duration(g.LeaseTTLMs) * time.Millisecond; ttl > 0 && time.Since(start) > ttl {
			return api.Errorf(api.LEASE_EXPIRED, "get %s: the read took longer than the %v lease; the data may have been replaced", quote(key), ttl)
		}
		return nil
	}
	if len(errs) == 1 {
		return fmt.Errorf("get %s: %w", quote(key), errs[0])
	}
	return fmt.Errorf("get %s: every replica failed: %w", quote(key), errors.Join(errs...))
}

func (c *Client) replicas(ctx context.Context, key string) (*api.GetReplicaListResponse, time.Time, error) {
	start := time.Now()
	rctx, cancel := c.rpcCtx(ctx)
	g, err := c.master.GetReplicaList(rctx, &api.KeyRequest{ClientID: c.id, Key: key})
	cancel()
	if err != nil {
		return nil, start, c.rpcErr("get "+quote(key), err)
	}
	if err := g.Err(); err != nil {
		return nil, start, fmt.Errorf("get %s: %w", quote(key), err)
	}
	return g, start, nil
}

// Get returns the value of key.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	return c.GetAlloc(ctx, key, func(n uint64) ([]byte, error) { return make([]byte, n), nil })
}

// GetAlloc reads key into memory obtained from alloc(size) (e.g. C memory for the C ABI) and
// returns it; on error after alloc the memory is still the caller's to free.
func (c *Client) GetAlloc(ctx context.Context, key string, alloc func(size uint64) ([]byte, error)) ([]byte, error) {
	key, err := c.tkey(key)
	if err != nil {
		return nil, err
	}
	g, start, err := c.replicas(ctx, key)
	if err != nil {
		return nil, err
	}
	out, err := alloc(g.Size)
	if err != nil {
		return nil, err
	}
	if err := c.readInto(ctx, key, g, start, buf{b: out[:g.Size]}); err != nil {
		return out, err
	}
	return out, nil
}

// GetInto reads key into [addr, addr+size) and returns the value's length.
func (c *Client) GetInto(ctx context.Context, key string, addr uintptr, size uint64) (uint64, error) {
	if addr == 0 || size == 0 {
		return 0, api.Errorf(api.INVALID_PARAMS, "get_into needs a non-null buffer and a non-zero size")
	}
	key, err := c.tkey(key)
	if err != nil {
		return 0, err
	}
	g, start, err := c.replicas(ctx, key)
	if err != nil {
		return 0, err
	}
	if g.Size > size {
		return 0, api.Errorf(api.BUFFER_OVERFLOW, "get_into %s: the value is %d bytes, the buffer only %d", quote(key), g.Size, size)
	}
	dst := buf{b: memview.Bytes(addr, int(g.Size)), registered: c.registered(addr, g.Size)}
	if err := c.readInto(ctx, key, g, start, dst); err != nil {
		return 0, err
	}
	return g.Size, nil
}

// BatchGet returns values (nil where the key failed) and per-key errors.
func (c *Client) BatchGet(ctx context.Context, keys []string) ([][]byte, []error) {
	out, errs := c.BatchGetAlloc(ctx, keys, func(_ int, n uint64) ([]byte, error) { return make([]byte, n), nil })
	for i, e := range errs {
		if e != nil {
			out[i] = nil
		}
	}
	return out, errs
}

// BatchGetAlloc is GetAlloc for many keys: alloc(i, size) gives the memory for keys[i], called
// on the calling goroutine in key order, once per key whose size the master answered, before
// any value is read. values[i] is what alloc returned for it (even when the read then failed,
// so the caller can free it).
func (c *Client) BatchGetAlloc(ctx context.Context, keys []string, alloc func(i int, size uint64) ([]byte, error)) ([][]byte, []error) {
	out := make([][]byte, len(keys))
	errs := c.batchGet(ctx, keys, func(i int, size uint64) (buf, error) {
		b, err := alloc(i, size)
		if err != nil {
			return buf{}, err
		}
		out[i] = b
		return buf{b: b[:size]}, nil
	})
	return out, errs
}

// BatchGetInto reads keys[i] into buffers[i]; it returns bytes read per key.
func (c *Client) BatchGetInto(ctx context.Context, keys []string, addrs []uintptr, sizes []uint64) ([]uint64, []error) {
	n := make([]uint64, len(keys))
	if len(addrs) != len(keys) || len(sizes) != len(keys) {
		return n, fill(len(keys), api.Errorf(api.INVALID_PARAMS, "%d keys, %d buffers, %d sizes", len(keys), len(addrs), len(sizes)))
	}
	errs := c.batchGet(ctx, keys, func(i int, size uint64) (buf, error) {
		if addrs[i] == 0 || sizes[i] < size {
			return buf{}, api.Errorf(api.BUFFER_OVERFLOW, "get_into %s: the value is %d bytes, the buffer only %d", quote(keys[i]), size, sizes[i])
		}
		n[i] = size
		return buf{b: memview.Bytes(addrs[i], int(size)), registered: c.registered(addrs[i], size)}, nil
	})
	for i, e := range errs {
		if e != nil {
			n[i] = 0
		}
	}
	return n, errs
}

func (c *Client) batchGet(ctx context.Context, keys []string, dst func(i int, size uint64) (buf, error)) []error {
	errs := make([]error, len(keys))
	if len(keys) == 0 {
		return errs
	}
	keys, err := c.tkeys(keys)
	if err != nil {
		return fill(len(errs), err)
	}
	start := time.Now()
	rctx, cancel := c.rpcCtx(ctx)
	resp, err := c.master.BatchGetReplicaList(rctx, &api.BatchKeysRequest{ClientID: c.id, Keys: keys})
	cancel()
	if err == nil {
		err = resp.Err()
	}
	if err != nil {
		return fill(len(keys), c.rpcErr("batch get", err))
	}
	// Buffers first, in order (dst may call back into the caller), then the reads, several
	// at once: G3 files are read with one pread chain each, and a disk keeps several busy.
	bufs := make([]buf, len(resp.Results))
	var todo []int
	for i := range resp.Results {
		g := &resp.Results[i]
		if err := g.Err(); err != nil {
			errs[i] = fmt.Errorf("get %s: %w", quote(keys[i]), err)
			continue
		}
		b, err := dst(i, g.Size)
		if err != nil {
			errs[i] = err
			continue
		}
		bufs[i] = b
		todo = append(todo, i)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, batchReadParallel)
	run := func(f func()) {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f()
		}()
	}
	files, todo := c.sharedFiles(resp.Results, todo)
	for path, idx := range files {
		run(func() {
			wants := make([]dfs.Want, len(idx))
			for j, i := range idx {
				r := resp.Results[i].Replicas[0]
				wants[j] = dfs.Want{Offset: r.Offset, Key: keys[i], Sum: r.Checksum, Dst: bufs[i].b}
			}
			for j, err := range dfs.ReadMany(c.rootFS, path, wants, dfs.Options{}) {
				i := idx[j]
				if err == nil {
					c.tiers.diskReads.Add(1)
				} else { // on its own, for its other replicas and its own error
					errs[i] = c.readInto(ctx, keys[i], &resp.Results[i], start, bufs[i])
				}
			}
		})
	}
	for _, i := range todo {
		run(func() { errs[i] = c.readInto(ctx, keys[i], &resp.Results[i], start, bufs[i]) })
	}
	wg.Wait()
	return errs
}

// sharedFiles takes out of todo the G3-only objects of a batch get that share a file with
// another (objects that moved to G3 in one bucket), by file, to be read with one dfs.ReadMany
// each; it returns them and what is left of todo. Objects with a memory copy, on a client's
// local disk, or being promoted by this read are left to readInto.
func (c *Client) sharedFiles(results []api.GetReplicaListResponse, todo []int) (map[string][]int, []int) {
	if c.rootFS == "" {
		return nil, todo
	}
	byFile := map[string][]int{}
	var rest []int
	for _, i := range todo {
		g := &results[i]
		if g.Promote == nil && len(g.Replicas) > 0 && !slices.ContainsFunc(g.Replicas, func(r api.Replica) bool { return !r.IsDisk() || r.IsLocalDisk() }) {
			byFile[g.Replicas[0].Path] = append(byFile[g.Replicas[0].Path], i)
			continue
		}
		rest = append(rest, i)
	}
	for path, idx := range byFile {
		if len(idx) == 1 {
			rest = append(rest, idx[0])
			delete(byFile, path)
		}
	}
	return byFile, rest
}

// batchReadParallel is how many values of one batch get are read at once.
const batchReadParallel = 8

// ---- queries and removal ----

// Exists reports whether key is stored.
func (c *Client) Exists(ctx context.Context, key string) (bool, error) {
	key, err := c.tkey(key)
	if err != nil {
		return false, err
	}
	rctx, cancel := c.rpcCtx(ctx)
	r, err := c.master.ExistKey(rctx, &api.KeyRequest{ClientID: c.id, Key: key})
	cancel()
	if err != nil {
		return false, c.rpcErr("is_exist "+quote(key), err)
	}
	return r.Exists, r.Err()
}

// BatchExists is Exists for many keys.
func (c *Client) BatchExists(ctx context.Context, keys []string) ([]bool, []error) {
	out := make([]bool, len(keys))
	keys, err := c.tkeys(keys)
	if err != nil {
		return out, fill(len(out), err)
	}
	rctx, cancel := c.rpcCtx(ctx)
	r, err := c.master.BatchExistKey(rctx, &api.BatchKeysRequest{ClientID: c.id, Keys: keys})
	cancel()
	if err != nil {
		return out, fill(len(keys), c.rpcErr("batch is_exist", err))
	}
	errs := make([]error, len(keys))
	for i, res := range r.Results {
		out[i], errs[i] = res.Exists, res.Err()
	}
	return out, errs
}

// Size returns the size of key's value.
func (c *Client) Size(ctx context.Context, key string) (uint64, error) {
	key, err := c.tkey(key)
	if err != nil {
		return 0, err
	}
	rctx, cancel := c.rpcCtx(ctx)
	r, err := c.master.ExistKey(rctx, &api.KeyRequest{ClientID: c.id, Key: key})
	cancel()
	if err != nil {
		return 0, c.rpcErr("get_size "+quote(key), err)
	}
	if err := r.Err(); err != nil {
		return 0, err
	}
	if !r.Exists {
		return 0, api.Errorf(api.OBJECT_NOT_FOUND, "key %s not found", quote(key))
	}
	return r.Size, nil
}

// Remove deletes key; a leased or hard-pinned key needs force.
func (c *Client) Remove(ctx context.Context, key string, force bool) error {
	key, err := c.tkey(key)
	if err != nil {
		return err
	}
	rctx, cancel := c.rpcCtx(ctx)
	st, err := c.master.Remove(rctx, &api.RemoveRequest{ClientID: c.id, Key: key, Force: force})
	cancel()
	if err != nil {
		return c.rpcErr("remove "+quote(key), err)
	}
	return st.Err()
}

// BatchRemove removes many keys; one error per key.
func (c *Client) BatchRemove(ctx context.Context, userKeys []string, force bool) []error {
	keys, err := c.tkeys(userKeys)
	if err != nil {
		return fill(len(userKeys), err)
	}
	rctx, cancel := c.rpcCtx(ctx)
	r, err := c.master.BatchRemove(rctx, &api.BatchKeysRequest{ClientID: c.id, Keys: keys, Force: force})
	cancel()
	if err == nil {
		err = r.Err()
	}
	if err != nil {
		return fill(len(keys), c.rpcErr("batch remove", err))
	}
	errs := make([]error, len(keys))
	for i, s := range r.Results {
		errs[i] = s.Err()
	}
	return errs
}

// RemoveByRegex removes this client's tenant's keys matching pattern (RE2 syntax) and returns
// how many.
func (c *Client) RemoveByRegex(ctx context.Context, pattern string, force bool) (int64, error) {
	if _, err := regexp.Compile(pattern); err != nil {
		return 0, api.Errorf(api.INVALID_PARAMS, "bad regular expression %q: %v", pattern, err)
	}
	rctx, cancel := c.rpcCtx(ctx)
	r, err := c.master.RemoveByRegex(rctx, &api.RemoveByRegexRequest{ClientID: c.id, Pattern: pattern, Force: force, Scoped: true, Tenant: c.tenant})
	cancel()
	if err != nil {
		return 0, c.rpcErr("remove_by_regex", err)
	}
	return r.Count, r.Err()
}

// RemoveAll removes every key of this client's tenant and returns how many; keepHeld leaves
// the keys a plain remove would refuse (leased, hard-pinned).
func (c *Client) RemoveAll(ctx context.Context, keepHeld bool) (int64, error) {
	rctx, cancel := c.rpcCtx(ctx)
	r, err := c.master.RemoveAll(rctx, &api.RemoveAllRequest{ClientID: c.id, Scoped: true, Tenant: c.tenant, KeepHeld: keepHeld})
	cancel()
	if err != nil {
		return 0, c.rpcErr("remove_all", err)
	}
	return r.Count, r.Err()
}
