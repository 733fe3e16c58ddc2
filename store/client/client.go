package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/auth"
	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/internal/memview"
	"github.com/mooncake-go/mooncake/store/api"
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
	GRPC     bool     // call the master over gRPC instead of the framed RPC (MC_STORE_RPC=grpc)
	Prefault Prefault // populate the mounted segment up front: auto (zero), on, off (MC_STORE_PREFAULT)
	// SmallValueBytes: a put of at most this many bytes (at most 64 KiB) sends them with its
	// PutEnd, for the master's value cache (store/master/valuecache.go); 0: DefaultSmallValueBytes;
	// < 0: never (MC_STORE_SMALL_VALUE_BYTES).
	SmallValueBytes int
	// SingleCallsInFlight: how many single gets' (puts') master calls of this client run at
	// once before later ones go together as a batch call (coalesce.go); 0: 1. The C ABI sets
	// ForeignThreadCalls: its callers are threads of their own (Python's, Rust's), each woken
	// by the kernel when a batch it waited in ends.
	SingleCallsInFlight int
	// PutReservations: how many puts of one size a client starts ahead, so that a single put
	// of at most 64 KiB is the write and one master call (reserve.go); 0:
	// DefaultPutReservations; < 0: none (MC_STORE_PUT_RESERVATIONS).
	PutReservations int
	HA              ha.Options // Redis password / database / TLS files of an HA master address (MC_REDIS_PASSWORD, MC_REDIS_DB_INDEX, MC_TLS_*)
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

	lookups     coalescer[struct{}, *api.GetReplicaListResponse] // concurrent single gets' master calls (coalesce.go)
	ends        coalescer[[]byte, struct{}]                      // concurrent single puts' PutEnd calls, each with its small value
	cachedReads atomic.Uint64                                    // gets served from the master's value cache (smallvalue.go)
	resv        reservations                                     // puts started ahead (reserve.go)
	confirms    confirmQueue                                     // unconfirmed puts' completed writes (unconfirmed.go)

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
	sess     sessions // transfer sessions (sessions.go)
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
	c.lookups.parallel, c.ends.parallel = cfg.SingleCallsInFlight, cfg.SingleCallsInFlight // coalesce.go
	c.resv.per, c.resv.pools = cfg.PutReservations, map[reserveKey]*reservePool{}          // reserve.go
	if c.resv.per == 0 {
		c.resv.per = DefaultPutReservations
	}
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
	c.confirms.on.Store(ss.UnconfirmedPuts) // unconfirmed.go
	c.cc.follow(ctx, ss)                    // a plain address of an HA master: follow its cluster's leader
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

// rpcErr turns a transport failure into an *api.Error naming the master, and saying so when
// the master could not be reached (RPC_FAIL) or did not answer in time (RPC_TIMEOUT): the log
// line of such a call is then told apart from one about the key itself.
func (c *Client) rpcErr(op string, err error) error {
	c.setHealth(false, err)
	code := api.CodeOf(err)
	what := ""
	switch code {
	case api.RPC_FAIL:
		what = " unreachable"
	case api.RPC_TIMEOUT:
		what = fmt.Sprintf(" did not answer within %v", c.cfg.RPCTimeout)
	}
	return api.Errorf(code, "%s: master %s%s: %v", op, c.cfg.MasterServerAddress, what, err)
}
