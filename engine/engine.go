package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/auth"
	"github.com/mooncake-go/mooncake/engine/metadata"
	"github.com/mooncake-go/mooncake/engine/topology"
	"github.com/mooncake-go/mooncake/engine/transport/shm"
	"github.com/mooncake-go/mooncake/engine/transport/tcp"
	"github.com/mooncake-go/mooncake/internal/memview"
)

// SegmentID names an open segment; 0 is the local segment.
type SegmentID uint64

// LocalSegment is the SegmentID of the engine's own segment.
const LocalSegment SegmentID = 0

// Notify is a small message delivered to a peer's notification FIFO.
type Notify struct {
	Name string `json:"name"`
	Msg  string `json:"msg"`
}

// Engine is one process's transfer engine: one named segment, its listener, open remote
// segments and batches. All methods are safe for concurrent use.
type Engine struct {
	watchers sync.Map // WatchWord: word address (uint64) -> *watcher
	landMu   sync.RWMutex
	zones    []*landZone // LandOn

	name     string
	ip       string
	port     int
	hostID   string
	pid      int
	id       string // this process's engine, unique (answers pings: see ProbePeerID)
	timeout  time.Duration
	forceTCP bool
	cluster  string // metadata key namespace (Config.ClusterID)
	meta     string // Config.MetadataServer as given ("" -> P2PHANDSHAKE): see Directory
	topoJSON string // Config.CustomTopology
	store    metadata.Store

	server *tcp.Server
	tcp    *tcp.Client
	shm    *shm.Transport
	local  localTransport
	srvErr chan error

	segMu    sync.RWMutex
	bufs     []*localBuf // sorted by addr
	pubMu    sync.Mutex
	descJSON atomic.Pointer[[]byte]

	remMu    sync.RWMutex
	remotes  map[SegmentID]*remoteSeg
	byName   map[string]SegmentID
	nextSeg  SegmentID
	batchMu  sync.Mutex
	batches  map[BatchID]*batch
	nextBat  BatchID
	notifyMu sync.Mutex
	notifies []Notify

	own       *auth.Token              // Config.AuthToken: every connection proves it (or a group's)
	authMu    sync.RWMutex             // guards groupToks and peerToks (auth.go)
	groupToks []tokenRef               // tokens of groups sharing this engine (AddToken)
	peerToks  map[string][]*auth.Token // addr -> tokens its groups' connections prove (OpenSegmentAuth)

	kindBytes [3]atomic.Uint64 // bytes attempted per transport kind (local, shm, tcp)

	closed atomic.Bool
	lifeMu sync.RWMutex   // Close holds it while flipping closed; submit holds it (read) while starting target workers
	wg     sync.WaitGroup // target workers and notify senders
}

// New starts an engine: it binds the RPC/data listener, chooses the segment name, connects
// to the metadata store (unless P2PHANDSHAKE) and publishes the (empty) descriptor.
func New(ctx context.Context, cfg Config) (*Engine, error) {
	if err := CheckProtocol(cfg.Protocol); err != nil {
		return nil, err
	}
	meta := strings.TrimSpace(cfg.MetadataServer)
	if meta == "" {
		meta = P2PHandshake
	}
	p2p := strings.EqualFold(meta, P2PHandshake)
	own, err := auth.Load(cfg.AuthToken, cfg.AuthTokenFile)
	if err != nil {
		return nil, errf(ErrInvalidArgument, "transfer engine: %v", err)
	}

	e := &Engine{
		hostID:   HostID(),
		pid:      os.Getpid(),
		id:       fmt.Sprintf("%d-%016x", os.Getpid(), rand.Uint64()),
		timeout:  cfg.TransferTimeout,
		forceTCP: cfg.ForceTCP,
		cluster:  cfg.ClusterID,
		meta:     meta,
		topoJSON: cfg.CustomTopology,
		remotes:  make(map[SegmentID]*remoteSeg),
		byName:   make(map[string]SegmentID),
		nextSeg:  1,
		batches:  make(map[BatchID]*batch),
		nextBat:  1,
		shm:      shm.New(),
		tcp:      tcp.NewClient(),
		own:      own,
		peerToks: make(map[string][]*auth.Token),
	}
	e.tcp.Tokens = e.dialTokens
	if e.timeout <= 0 {
		e.timeout = DefaultTransferTimeout
	}
	chunk := cfg.SliceSize
	if chunk < tcp.DefaultChunkSize {
		chunk = tcp.DefaultChunkSize
	}
	if chunk > tcp.MaxDataFrame {
		chunk = tcp.MaxDataFrame
	}
	e.tcp.ChunkSize = chunk
	sockBuf := cfg.SocketBuffer
	e.tcp.SocketBuffer = sockBuf
	e.local.e = e

	// Name and port.
	host, port, err := splitName(cfg.LocalServerName)
	if err != nil {
		return nil, err
	}
	if port == 0 {
		port = cfg.HandshakePort
	}
	ip := host
	if ip == "" {
		if b := cfg.BindAddress; b != "" && b != "0.0.0.0" && b != "::" {
			ip = b
		} else {
			ip = localIP()
		}
	}
	ln, err := listen(cfg, port)
	if err != nil {
		return nil, err
	}
	e.port = ln.Addr().(*net.TCPAddr).Port
	if host != "" && net.ParseIP(host) == nil {
		// A name that does not resolve is a segment name, not an address to advertise.
		if _, err := net.LookupHost(host); err != nil {
			ip = localIP()
		}
	}
	e.ip = ip
	if p2p {
		e.name = net.JoinHostPort(ip, strconv.Itoa(e.port))
	} else {
		e.name = cfg.LocalServerName
		if e.name == "" {
			h, err := os.Hostname()
			if err != nil || h == "" {
				h = ip
			}
			e.name = h
		}
		mo := cfg.Metadata
		if mo.AuthToken == nil {
			mo.AuthToken = own // an HTTP metadata server with a token wants its requests signed
		}
		st, err := openMetadata(meta, mo)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("connecting to metadata server %q: %w: %w", meta, ErrMetadata, err)
		}
		e.store = st
	}
	empty := e.descriptorLocked().Encode()
	e.descJSON.Store(&empty)

	e.tcp.Self = e.name
	e.server = tcp.NewServer(ln, (*serverHandler)(e))
	e.server.SocketBuffer = sockBuf
	e.server.Auth = e.serverAuth()
	e.srvErr = make(chan error, 1)
	go func() { e.srvErr <- e.server.Serve() }()

	if e.store != nil {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		rm, _ := json.Marshal(RPCMeta{IPOrHostName: ip, RPCPort: e.port})
		if err := e.store.Put(pctx, RPCMetaKey(e.cluster, e.name), rm); err != nil {
			e.Close()
			return nil, fmt.Errorf("publishing the endpoint of %q: %w: %w", e.name, ErrMetadata, err)
		}
		if err := e.publish(); err != nil {
			e.Close()
			return nil, err
		}
	}
	return e, nil
}

// openMetadata is metadata.OpenWith; tests replace it with a fake store.
var openMetadata = metadata.OpenWith

func splitName(name string) (string, int, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return "", 0, nil
	}
	if h, p, err := net.SplitHostPort(name); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 65535 {
			return "", 0, errf(ErrInvalidArgument, "local server name %q has an invalid port", name)
		}
		return h, n, nil
	}
	return strings.Trim(name, "[]"), 0, nil
}

func listen(cfg Config, port int) (net.Listener, error) {
	bind := cfg.BindAddress
	if bind == "" {
		bind = "0.0.0.0"
	}
	if port > 0 {
		ln, err := net.Listen("tcp", net.JoinHostPort(bind, strconv.Itoa(port)))
		if err != nil {
			return nil, fmt.Errorf("binding the RPC port %s:%d: %w: %w", bind, port, ErrSocket, err)
		}
		return ln, nil
	}
	lo, hi := cfg.MinRPCPort, cfg.MaxRPCPort
	if lo <= 0 {
		lo = DefaultMinRPCPort
	}
	if hi <= 0 {
		hi = DefaultMaxRPCPort
	}
	if hi <= lo || hi > 65536 {
		lo, hi = DefaultMinRPCPort, DefaultMaxRPCPort
	}
	var lastErr error
	for i := 0; i < 64; i++ {
		p := lo + rand.IntN(hi-lo)
		ln, err := net.Listen("tcp", net.JoinHostPort(bind, strconv.Itoa(p)))
		if err == nil {
			return ln, nil
		}
		lastErr = err
	}
	for p := lo; p < hi; p++ {
		ln, err := net.Listen("tcp", net.JoinHostPort(bind, strconv.Itoa(p)))
		if err == nil {
			return ln, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("no free RPC port in [%d, %d) on %s: %w: %w", lo, hi, bind, ErrSocket, lastErr)
}

// SegmentName is this engine's segment name (host:port with P2PHANDSHAKE).
func (e *Engine) SegmentName() string { return e.name }

// Directory is where this engine's segments are found by others: its metadata server as
// configured (P2PHANDSHAKE when none) and its cluster id. Two engines with the same Directory
// see the same segments; a segment published in one directory is unknown in another.
func (e *Engine) Directory() (metadataServer, cluster string) { return e.meta, e.cluster }

// RPCPort is the port of the engine's listener (RPC and tcp data).
func (e *Engine) RPCPort() int { return e.port }

// HostID is the host identity this engine advertises.
func (e *Engine) HostID() string { return e.hostID }

// Close stops the listener, waits for in-flight transfers to end (they are bounded by the
// transfer timeout; connections are closed to hurry them), removes the engine's keys from the
// metadata store and frees shared buffers.
func (e *Engine) Close() error {
	e.lifeMu.Lock()
	if e.closed.Swap(true) {
		e.lifeMu.Unlock()
		return nil
	}
	e.lifeMu.Unlock()
	var firstErr error
	if e.server != nil {
		e.server.Close()
		<-e.srvErr
	}
	e.tcp.Close()
	e.wg.Wait()
	e.shm.Close()
	if e.store != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		e.store.Delete(ctx, SegmentKey(e.cluster, e.name))
		e.store.Delete(ctx, RPCMetaKey(e.cluster, e.name))
		cancel()
		if err := e.store.Close(); err != nil {
			firstErr = err
		}
	}
	e.segMu.Lock()
	bufs := e.bufs
	e.bufs = nil
	e.segMu.Unlock()
	for _, b := range bufs {
		if b.region != nil {
			e.waitUnpinned(b)
			e.freeRegion(b)
		}
	}
	return firstErr
}

// serverHandler answers the listener's questions.
type serverHandler Engine

func (h *serverHandler) Acquire(addr, length uint64, who []*auth.Token) ([]byte, tcp.Pin, error) {
	e := (*Engine)(h)
	b, err := e.acquire(addr, length)
	if err != nil {
		return nil, nil, &tcp.RemoteError{Code: CodeAddressNotRegistered, Msg: err.Error()}
	}
	if !e.mayReach(b, who) {
		b.Release()
		return nil, nil, &tcp.RemoteError{Code: CodeAddressNotRegistered, Msg: fmt.Sprintf(
			"[%#x, +%d) of segment %q belongs to a group this connection did not authenticate for", addr, length, e.name)}
	}
	return memview.Bytes(uintptr(addr), int(length)), b, nil
}

func (h *serverHandler) Signaled(addr uint64) {
	if v, ok := (*Engine)(h).watchers.Load(addr); ok {
		w := v.(*watcher)
		if w.hook != nil && w.hook() {
			return
		}
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

// Land implements tcp.Lander with the zones registered by LandOn.
func (h *serverHandler) Land(addr, length uint64, interrupt func()) ([]byte, func(bool)) {
	e := (*Engine)(h)
	e.landMu.RLock()
	var z *landZone
	for _, c := range e.zones {
		if addr >= c.base && addr+length <= c.end {
			z = c
			break
		}
	}
	e.landMu.RUnlock()
	if z == nil {
		return nil, nil
	}
	return z.hook(uintptr(addr), int(length), interrupt)
}

// LandHook decides where the payload of a WRITE into its zone goes: nil to leave it to its
// target, else a destination of n bytes and a done func that runs once the read ended (ok: all
// of it arrived). interrupt makes a read that waits for the payload fail (the connection is
// dropped); the hook's owner calls it when it must stop writes into the destination before the
// bytes come. See tcp.Lander.
type LandHook func(addr uintptr, n int, interrupt func()) (dst []byte, done func(ok bool))

type landZone struct {
	base, end uint64
	hook      LandHook
}

// LandOn registers hook for WRITEs over tcp whose payload (16 KiB or more) lies inside local
// registered memory [base, base+length): the payload may be read straight into another buffer
// of this process instead of its target (a p2p mailbox's cells: the posted receive the bytes
// are for). Writes through shared memory do not reach it. stop removes the registration;
// the hook may still run once after stop returns.
func (e *Engine) LandOn(base, length uintptr, hook LandHook) (stop func()) {
	z := &landZone{base: uint64(base), end: uint64(base + length), hook: hook}
	e.landMu.Lock()
	e.zones = append(e.zones, z)
	e.landMu.Unlock()
	return func() {
		e.landMu.Lock()
		defer e.landMu.Unlock()
		for i, c := range e.zones {
			if c == z {
				e.zones = append(e.zones[:i:i], e.zones[i+1:]...)
				return
			}
		}
	}
}

// watcher is a WatchWord registration.
type watcher struct {
	ch   chan struct{}
	hook func() bool
}

// WatchWord returns a channel that gets a token (it holds one) whenever a peer's signal write
// to the 4-byte word at addr (local registered memory) arrives over tcp, after the word is
// stored: a goroutine of this process can then wait for such writes in the Go scheduler
// instead of sleeping in a futex syscall (a thread hand-off each time). Writes by same-host
// processes through shared memory do not reach it; they still wake futex waiters only. One
// watcher per word; stop removes it.
//
// hook (nil: none) runs first, on the tcp server goroutine that stored the word: when it
// reports that it handled the write (true), no token is left. It lets the watcher act on the
// write without waking a goroutine at all; it must not block (the connection's next frames
// wait for it), and it may still run once after stop returns.
func (e *Engine) WatchWord(addr uintptr, hook func() bool) (ch <-chan struct{}, stop func()) {
	w := &watcher{ch: make(chan struct{}, 1), hook: hook}
	e.watchers.Store(uint64(addr), w)
	return w.ch, func() { e.watchers.CompareAndDelete(uint64(addr), w) }
}

func (h *serverHandler) Control(op tcp.Op, payload []byte, who []*auth.Token) ([]byte, error) {
	e := (*Engine)(h)
	switch op {
	case tcp.OpDescriptor:
		return e.descriptorFor(who), nil
	case tcp.OpPing:
		return []byte(e.id), nil
	case tcp.OpNotify:
		var n Notify
		if err := json.Unmarshal(payload, &n); err != nil {
			return nil, &tcp.RemoteError{Code: CodeMalformedJSON, Msg: "bad notification: " + err.Error()}
		}
		e.deliver(n)
		return nil, nil
	}
	return nil, &tcp.RemoteError{Code: CodeNotImplemented, Msg: "unknown control op"}
}

func (e *Engine) deliver(n Notify) {
	e.notifyMu.Lock()
	e.notifies = append(e.notifies, n)
	e.notifyMu.Unlock()
}

// GetNotifies drains the notifications received so far, oldest first.
func (e *Engine) GetNotifies() []Notify {
	e.notifyMu.Lock()
	defer e.notifyMu.Unlock()
	out := e.notifies
	e.notifies = nil
	return out
}

// SendNotify delivers n to the segment's owner.
func (e *Engine) SendNotify(target SegmentID, n Notify) error {
	if target == LocalSegment {
		e.deliver(n)
		return nil
	}
	r, err := e.remote(target)
	if err != nil {
		return err
	}
	payload, _ := json.Marshal(n)
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	if _, err := e.tcp.Call(ctx, r.addr, tcp.OpNotify, payload); err != nil {
		return fmt.Errorf("sending a notification to %q: %w: %w", r.name, ErrSocket, err)
	}
	return nil
}

// ID identifies this engine instance: two processes never share one, even when a new process
// reuses a dead one's address (and so its segment name under P2PHANDSHAKE).
func (e *Engine) ID() string { return e.id }

// ProbePeer checks that the engine named name answers.
func (e *Engine) ProbePeer(name string) error { return e.ProbePeerID(name, "") }

// ProbePeerID checks that the engine named name answers and, when id is not empty, that it is
// the engine instance id (not another process that took over its address).
func (e *Engine) ProbePeerID(name, id string) error {
	if name == e.name {
		if id != "" && id != e.id {
			return fmt.Errorf("segment %q is now served by another engine (%s, not %s)", name, e.id, id)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(e.timeout, 5*time.Second))
	defer cancel()
	addr, err := e.resolve(ctx, name)
	if err != nil {
		return err
	}
	got, err := e.tcp.Call(ctx, addr, tcp.OpPing, nil)
	if err != nil {
		return fmt.Errorf("peer %q (%s) does not answer: %w: %w", name, addr, ErrSocket, err)
	}
	if id != "" && string(got) != id {
		return fmt.Errorf("segment %q is now served by another engine (%q, not %q): %w", name, got, id, ErrSocket)
	}
	return nil
}

// TransportBytes reports how many bytes this engine has moved through each transport
// ("local", "shm", "tcp"), counting attempted runs.
func (e *Engine) TransportBytes() map[string]uint64 {
	return map[string]uint64{
		"local": e.kindBytes[kindLocal].Load(),
		"shm":   e.kindBytes[kindShm].Load(),
		"tcp":   e.kindBytes[kindTCP].Load(),
	}
}

// GetLocalTopology returns the priority-matrix JSON of this host.
func (e *Engine) GetLocalTopology() string { return topology.GetLocalTopology(e.topoJSON) }

// isNotSupported reports whether err came from an unsupported protocol.
func isNotSupported(err error) bool { return errors.Is(err, ErrNotSupported) }
