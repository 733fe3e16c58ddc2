package master

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/mooncake-go/mooncake/auth"
)

// Config is everything mooncake_master is configured with. Field comments give the flag name;
// durations are flags in Mooncake's units (ms for KV TTLs, s for client_ttl).
type Config struct {
	RPCPort    int    // --port (upstream's name) or --rpc_port
	RPCAddress string // --rpc_address (bind address)
	RPCThreads int    // --max_threads or --rpc_thread_num (gRPC stream workers; 0 = one goroutine per stream)

	MetricsPort           int  // --metrics_port (admin HTTP: /metrics, /health, ...)
	MetricsPortSet        bool // --metrics_port was given: a busy port is an error (else the next free one is used)
	EnableMetricReporting bool // --enable_metric_reporting (log a summary periodically)

	EnableHTTPMetadataServer bool   // --enable_http_metadata_server
	HTTPMetadataServerHost   string // --http_metadata_server_host
	HTTPMetadataServerPort   int    // --http_metadata_server_port

	DefaultKVLeaseTTL           time.Duration // --default_kv_lease_ttl (ms)
	DefaultKVSoftPinTTL         time.Duration // --default_kv_soft_pin_ttl (ms)
	MaxKVSoftPinTTL             time.Duration // --max_kv_soft_pin_ttl (ms)
	AllowEvictSoftPinnedObjects bool          // --allow_evict_soft_pinned_objects
	EvictionRatio               float64       // --eviction_ratio
	EvictionHighWatermarkRatio  float64       // --eviction_high_watermark_ratio
	EvictionPolicy              string        // --eviction_policy: lru | prefix (evictpolicy.go)
	SmallValueCacheBytes        uint64        // --small_value_cache_bytes: bytes of small values kept to answer gets (valuecache.go)
	ClientTTL                   time.Duration // --client_ttl (s)
	ClusterID                   string        // --cluster_id
	AllocationStrategy          string        // --allocation_strategy: random | free_ratio_first

	PutStartDiscardTimeout time.Duration // --put_start_discard_timeout_sec: an open put may be pre-empted after this
	PutStartReleaseTimeout time.Duration // --put_start_release_timeout_sec: an open put is reclaimed after this

	ConfigPath string // --config_path (JSON or YAML; command-line flags override it)

	// High availability (see docs/ha.md).
	EnableHA      bool          // --enable_ha: campaign for leadership on --etcd_endpoints, serve only while leader
	EtcdEndpoints string        // --etcd_endpoints (or --ha_backend_connstring): "http://h:p;http://h:p", "etcd://h:p,h:p", "redis://h:p"
	HABackendType string        // --ha_backend_type: etcd | redis (a connection string without a scheme is read as this)
	HALeaseTTL    time.Duration // --ha_lease_ttl_sec: leader lease TTL (default 5 s, as upstream)

	// Snapshots.
	EnableSnapshot         bool          // --enable_snapshot: save periodic snapshots (the leader, or a master without HA)
	SnapshotInterval       time.Duration // --snapshot_interval_seconds
	SnapshotRetentionCount int           // --snapshot_retention_count
	SnapshotBackendType    string        // --snapshot_backend_type: local | s3
	EnableSnapshotRestore  bool          // --enable_snapshot_restore: load the newest valid snapshot at start
	SnapshotBackupDir      string        // --snapshot_backup_dir (local backend; else MOONCAKE_SNAPSHOT_LOCAL_PATH)

	HotStandby HotStandbyConfig

	// Storage tiers (see docs/multi-tier.md).
	RootFSDir                   string // --root_fs_dir: the G3 file tier's directory, mounted at the same path on every client ("" = off)
	GlobalFileSegmentSize       uint64 // --global_file_segment_size: bytes the G3 tier may hold (0 = unlimited)
	DFSFullPolicy               string // --dfs_full_policy: refuse | evict_oldest, when a move would overflow the G3 tier
	PromotionOnHit              bool   // --promotion_on_hit: copy an object read from disk back into memory
	PromotionAdmissionThreshold int    // --promotion_admission_threshold: disk reads before a promotion

	// Security (see docs/security-store.md). The token is not a flag (a command line is
	// visible to every user of the host): mastercmd fills AuthToken from MC_AUTH_TOKEN /
	// MC_AUTH_TOKEN_FILE.
	TLSCertFile string      // --tls_cert_file: serve the RPC port over TLS with this certificate (PEM)
	TLSKeyFile  string      // --tls_key_file: the certificate's private key (PEM)
	TLSCAFile   string      // --tls_ca_file: require client certificates signed by these CAs (PEM)
	AuthToken   *auth.Token // clients (RPC) and admin HTTP callers must prove this token; nil = open

	EnableOffload  bool // --enable_offload: objects may move to the local disk of clients set up with enable_ssd_offload
	OffloadOnEvict bool // --offload_on_evict: write to local disk only when evicting (else also right after each put)

	// RPC connections.
	RPCInterface   string        // --rpc_interface: bind to this network interface's IPv4 address (overrides --rpc_address)
	RPCConnTimeout time.Duration // --rpc_conn_timeout_seconds: close a connection idle this long (0 = never)
	RPCTCPNoDelay  bool          // --rpc_enable_tcp_no_delay: TCP_NODELAY on accepted RPC connections

	// EnableMetadataCleanupOnTimeout (--enable_metadata_cleanup_on_timeout): when a client is
	// expired, the embedded HTTP metadata server (--enable_http_metadata_server) forgets its
	// transfer-engine entries (segment descriptor, RPC endpoint).
	EnableMetadataCleanupOnTimeout bool

	// Upstream names (docs/store.md, "mooncake_master: upstream's flags and config files"):
	// what the first ones select is what this master does anyway, or what it does not have.
	MemoryAllocator         string        // --memory_allocator: offset (this master's allocator) or cachelib
	EnableCXL               bool          // --enable_cxl: refused (no CXL/DAX memory support)
	CXLPath                 string        // --cxl_path
	CXLSize                 uint64        // --cxl_size
	MaxTotalFinishedTasks   uint64        // --max_total_finished_tasks (replica tasks run in the client here)
	MaxTotalPendingTasks    uint64        // --max_total_pending_tasks
	MaxTotalProcessingTasks uint64        // --max_total_processing_tasks
	PendingTaskTimeout      time.Duration // --pending_task_timeout_sec
	ProcessingTaskTimeout   time.Duration // --processing_task_timeout_sec
	EnableDiskEviction      bool          // --enable_disk_eviction: a move past a client's local-disk quota drops its oldest local copies (else it is refused)
	QuotaBytes              uint64        // --quota_bytes: a client's local-disk quota (0: 90% of the capacity it reports)
}

// HotStandbyConfig is upstream's HotStandbyConfig. A standby here follows the HA oplog
// (--etcd_endpoints) rather than a replication socket, so PrimaryAddress and ReplicationPort
// are accepted for compatibility and only logged; OplogStoreType must match the endpoints.
type HotStandbyConfig struct {
	StandbyID                string        // --standby_id (log name; default: the advertised address)
	PrimaryAddress           string        // --primary_address (informational)
	ReplicationPort          int           // --replication_port (informational)
	VerificationInterval     time.Duration // --verification_interval_sec: how often a standby checks its lag
	MaxReplicationLagEntries uint64        // --max_replication_lag_entries: lag above this raises the lag alert
	EnableVerification       bool          // --enable_verification: periodic lag check and log line
	EnableSnapshotBootstrap  bool          // --enable_snapshot_bootstrap: a standby starts from the newest snapshot
	EnableOplogFollowing     bool          // --enable_oplog_following: a standby tails the oplog (else it catches up only when promoted)
	OplogStoreType           string        // --oplog_store_type: "" (from --etcd_endpoints), etcd or redis
	OplogStoreRootDir        string        // --oplog_store_root_dir (accepted; the oplog lives in etcd/Redis)
	OplogPollInterval        time.Duration // --oplog_poll_interval_ms: lag polling period
}

// DefaultConfig returns Mooncake's defaults.
func DefaultConfig() Config {
	return Config{
		RPCPort: 50051, RPCAddress: "0.0.0.0", RPCThreads: 4,
		MetricsPort: 9003, EnableMetricReporting: true,
		HTTPMetadataServerHost: "0.0.0.0", HTTPMetadataServerPort: 8080,
		DefaultKVLeaseTTL:           10 * time.Second,
		DefaultKVSoftPinTTL:         30 * time.Minute,
		MaxKVSoftPinTTL:             24 * time.Hour,
		AllowEvictSoftPinnedObjects: true,
		EvictionRatio:               0.05,
		EvictionHighWatermarkRatio:  0.90, // upstream's DEFAULT_EVICTION_HIGH_WATERMARK_RATIO
		EvictionPolicy:              EvictionLRU,
		SmallValueCacheBytes:        64 << 20,
		ClientTTL:                   10 * time.Second,
		ClusterID:                   "mooncake_cluster",
		AllocationStrategy:          "random",
		PutStartDiscardTimeout:      30 * time.Second,
		PutStartReleaseTimeout:      600 * time.Second,
		HALeaseTTL:                  5 * time.Second,
		SnapshotInterval:            300 * time.Second,
		SnapshotRetentionCount:      2,
		SnapshotBackendType:         "local",
		HABackendType:               "etcd",
		DFSFullPolicy:               "refuse",
		PromotionAdmissionThreshold: 2,
		RPCTCPNoDelay:               true,
		MemoryAllocator:             "offset",
		CXLPath:                     "/dev/dax0.0",
		CXLSize:                     8 << 30,
		MaxTotalFinishedTasks:       10000,
		MaxTotalPendingTasks:        10000,
		MaxTotalProcessingTasks:     10000,
		PendingTaskTimeout:          300 * time.Second,
		ProcessingTaskTimeout:       300 * time.Second,
		EnableDiskEviction:          true,
		HotStandby: HotStandbyConfig{
			VerificationInterval:     30 * time.Second, // upstream's HotStandbyConfig defaults
			MaxReplicationLagEntries: 1000,
			EnableVerification:       true,
			EnableSnapshotBootstrap:  false, // --enable_snapshot_restore also bootstraps a standby, as upstream's supervisor does
			EnableOplogFollowing:     true,
			OplogPollInterval:        1000 * time.Millisecond,
		},
	}
}

// Validate rejects values that cannot work, with a message naming the flag.
func (c Config) Validate() error {
	var errs []string
	port := func(name string, p int, zeroOK bool) {
		if p < 0 || p > 65535 || (p == 0 && !zeroOK) {
			errs = append(errs, fmt.Sprintf("--%s=%d is not a valid port", name, p))
		}
	}
	port("port", c.RPCPort, true)
	port("metrics_port", c.MetricsPort, true)
	port("http_metadata_server_port", c.HTTPMetadataServerPort, true)
	if c.RPCThreads < 0 {
		errs = append(errs, "--max_threads (--rpc_thread_num) must be >= 0")
	}
	if c.DefaultKVLeaseTTL <= 0 {
		errs = append(errs, "--default_kv_lease_ttl must be > 0 (milliseconds)")
	}
	if c.DefaultKVSoftPinTTL <= 0 || c.MaxKVSoftPinTTL <= 0 {
		errs = append(errs, "--default_kv_soft_pin_ttl and --max_kv_soft_pin_ttl must be > 0 (milliseconds)")
	}
	if !(c.EvictionRatio >= 0 && c.EvictionRatio <= 1) {
		errs = append(errs, fmt.Sprintf("--eviction_ratio=%v must be in [0, 1]", c.EvictionRatio))
	}
	if !(c.EvictionHighWatermarkRatio > 0 && c.EvictionHighWatermarkRatio <= 1) {
		errs = append(errs, fmt.Sprintf("--eviction_high_watermark_ratio=%v must be in (0, 1]", c.EvictionHighWatermarkRatio))
	}
	if err := validEvictionPolicy(c.EvictionPolicy); err != nil {
		errs = append(errs, err.Error())
	}
	if c.ClientTTL <= 0 {
		errs = append(errs, "--client_ttl must be > 0 (seconds)")
	}
	if c.ClusterID == "" {
		errs = append(errs, "--cluster_id must not be empty")
	}
	switch c.AllocationStrategy {
	case "random", "free_ratio_first":
	case "cxl":
		errs = append(errs, "--allocation_strategy=cxl: "+noCXL)
	default:
		errs = append(errs, fmt.Sprintf("--allocation_strategy=%q: want random or free_ratio_first", c.AllocationStrategy))
	}
	if c.PutStartDiscardTimeout <= 0 || c.PutStartReleaseTimeout < c.PutStartDiscardTimeout {
		errs = append(errs, "put-start timeouts must be > 0 and release >= discard")
	}
	switch c.HABackendType {
	case "etcd", "redis":
	case "k8s":
		errs = append(errs, "--ha_backend_type=k8s: Kubernetes leases are not supported as an HA store here; use etcd or redis")
	default:
		errs = append(errs, fmt.Sprintf("--ha_backend_type=%q: want etcd or redis", c.HABackendType))
	}
	if c.EnableHA && strings.TrimSpace(c.EtcdEndpoints) == "" {
		errs = append(errs, "--enable_ha needs --etcd_endpoints (etcd or redis:// endpoints)")
	}
	if c.EnableHA && c.HALeaseTTL < time.Second {
		errs = append(errs, "--ha_lease_ttl_sec must be >= 1")
	}
	if c.EnableSnapshot && c.SnapshotInterval <= 0 {
		errs = append(errs, "--snapshot_interval_seconds must be > 0")
	}
	if c.SnapshotRetentionCount < 1 {
		errs = append(errs, "--snapshot_retention_count must be >= 1")
	}
	switch strings.ToLower(c.SnapshotBackendType) {
	case "local", "s3":
	default:
		errs = append(errs, fmt.Sprintf("--snapshot_backend_type=%q: want local or s3", c.SnapshotBackendType))
	}
	switch strings.ToLower(c.HotStandby.OplogStoreType) {
	case "", "etcd", "redis":
	default:
		errs = append(errs, fmt.Sprintf("--oplog_store_type=%q: want etcd or redis", c.HotStandby.OplogStoreType))
	}
	if c.HotStandby.OplogPollInterval <= 0 || c.HotStandby.VerificationInterval <= 0 {
		errs = append(errs, "--oplog_poll_interval_ms and --verification_interval_sec must be > 0")
	}
	switch c.DFSFullPolicy {
	case "refuse", "evict_oldest":
	default:
		errs = append(errs, fmt.Sprintf("--dfs_full_policy=%q: want refuse or evict_oldest", c.DFSFullPolicy))
	}
	if c.RootFSDir != "" && !filepath.IsAbs(c.RootFSDir) {
		errs = append(errs, fmt.Sprintf("--root_fs_dir=%q must be an absolute path (every client mounts the same path)", c.RootFSDir))
	}
	if c.PromotionAdmissionThreshold < 1 {
		errs = append(errs, "--promotion_admission_threshold must be >= 1")
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		errs = append(errs, "--tls_cert_file and --tls_key_file go together")
	}
	if c.TLSCAFile != "" && c.TLSCertFile == "" {
		errs = append(errs, "--tls_ca_file (client certificates) needs --tls_cert_file and --tls_key_file")
	}
	if c.RPCConnTimeout < 0 {
		errs = append(errs, "--rpc_conn_timeout_seconds must be >= 0 (0: never close idle connections)")
	}
	switch c.MemoryAllocator {
	case "offset", "cachelib":
	default:
		errs = append(errs, fmt.Sprintf("--memory_allocator=%q: want offset or cachelib", c.MemoryAllocator))
	}
	if c.EnableCXL {
		errs = append(errs, "--enable_cxl: "+noCXL)
	}
	if c.EnableMetadataCleanupOnTimeout && !c.EnableHTTPMetadataServer {
		errs = append(errs, "--enable_metadata_cleanup_on_timeout needs --enable_http_metadata_server (it cleans that server's entries)")
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid master configuration: %s", strings.Join(errs, "; "))
	}
	return nil
}

// noCXL is why CXL settings are refused.
const noCXL = "CXL memory (a DAX device such as /dev/dax0.0) is not supported by this master; segments are host memory mounted by clients"

// sizeFlag is a byte count: a plain integer or one with a KB/MB/GB/TB (or KiB...) suffix
// (powers of 1024, as upstream's size flags).
type sizeFlag struct{ v *uint64 }

func (f sizeFlag) String() string {
	if f.v == nil {
		return "0"
	}
	return fmt.Sprint(*f.v)
}

func (f sizeFlag) Set(s string) error {
	t := strings.ToUpper(strings.TrimSpace(s))
	mult := uint64(1)
	for _, u := range []struct {
		suf string
		m   uint64
	}{{"TIB", 1 << 40}, {"GIB", 1 << 30}, {"MIB", 1 << 20}, {"KIB", 1 << 10}, {"TB", 1 << 40}, {"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10}, {"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(t, u.suf) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suf)), u.m
			break
		}
	}
	var n uint64
	if _, err := fmt.Sscan(t, &n); err != nil || fmt.Sprint(n) != t {
		return fmt.Errorf("want a size in bytes (e.g. 1073741824 or 1GB), got %q", s)
	}
	*f.v = n * mult
	return nil
}

type durationFlag struct {
	d    *time.Duration
	unit time.Duration
}

func (f durationFlag) String() string {
	if f.d == nil {
		return "0"
	}
	return fmt.Sprint(int64(*f.d / f.unit))
}

// Set takes an integer in the flag's unit, or (as upstream's newer masters) a number with a
// unit: "500ms", "5s", "30m", "2h".
func (f durationFlag) Set(s string) error {
	t := strings.TrimSpace(s)
	var n int64
	if _, err := fmt.Sscan(t, &n); err == nil && fmt.Sprint(n) == t {
		*f.d = time.Duration(n) * f.unit
		return nil
	}
	if d, err := time.ParseDuration(t); err == nil && strings.IndexAny(t, "mshu") > 0 {
		*f.d = d
		return nil
	}
	return fmt.Errorf("want an integer (%s) or a duration such as 500ms, 5s, 30m, 2h; got %q", unitName(f.unit), s)
}

func unitName(u time.Duration) string {
	switch u {
	case time.Millisecond:
		return "milliseconds"
	case time.Second:
		return "seconds"
	}
	return u.String()
}

// RegisterFlags defines the master's flags on fs, bound to c (whose values are the defaults).
// Later features (HA, snapshots) add their flags here.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.RPCPort, "port", c.RPCPort, "gRPC port of the master service (0 picks a free port); also --rpc_port")
	fs.IntVar(&c.RPCPort, "rpc_port", c.RPCPort, "same as --port")
	fs.StringVar(&c.RPCAddress, "rpc_address", c.RPCAddress, "address the gRPC service binds to")
	fs.IntVar(&c.RPCThreads, "max_threads", c.RPCThreads, "gRPC worker goroutines (0: one per stream); also --rpc_thread_num")
	fs.IntVar(&c.RPCThreads, "rpc_thread_num", c.RPCThreads, "same as --max_threads")
	fs.IntVar(&c.MetricsPort, "metrics_port", c.MetricsPort, "admin HTTP port (/metrics, /health, /get_all_keys, ...); 0 picks a free port")
	fs.BoolVar(&c.EnableMetricReporting, "enable_metric_reporting", c.EnableMetricReporting, "log a metrics summary every 10 s")
	fs.BoolVar(&c.EnableHTTPMetadataServer, "enable_http_metadata_server", c.EnableHTTPMetadataServer, "also serve the transfer engine's HTTP metadata protocol")
	fs.StringVar(&c.HTTPMetadataServerHost, "http_metadata_server_host", c.HTTPMetadataServerHost, "bind address of the HTTP metadata server")
	fs.IntVar(&c.HTTPMetadataServerPort, "http_metadata_server_port", c.HTTPMetadataServerPort, "port of the HTTP metadata server")
	fs.Var(durationFlag{&c.DefaultKVLeaseTTL, time.Millisecond}, "default_kv_lease_ttl", "lease a Get grants, in milliseconds")
	fs.Var(durationFlag{&c.DefaultKVSoftPinTTL, time.Millisecond}, "default_kv_soft_pin_ttl", "how long a soft pin lasts, in milliseconds")
	fs.Var(durationFlag{&c.MaxKVSoftPinTTL, time.Millisecond}, "max_kv_soft_pin_ttl", "upper bound of a soft pin, in milliseconds")
	fs.BoolVar(&c.AllowEvictSoftPinnedObjects, "allow_evict_soft_pinned_objects", c.AllowEvictSoftPinnedObjects, "let eviction take soft-pinned objects (last)")
	fs.Float64Var(&c.EvictionRatio, "eviction_ratio", c.EvictionRatio, "fraction of evictable objects evicted per pass")
	fs.Float64Var(&c.EvictionHighWatermarkRatio, "eviction_high_watermark_ratio", c.EvictionHighWatermarkRatio, "usage ratio above which eviction runs")
	fs.StringVar(&c.EvictionPolicy, "eviction_policy", c.EvictionPolicy, "eviction order: lru (least recently used first) or prefix (chain tails first; keys NAME|PARENT name their parent block)")
	fs.Uint64Var(&c.SmallValueCacheBytes, "small_value_cache_bytes", c.SmallValueCacheBytes, "bytes of small values (at most 64 KiB each) the master keeps to answer a get without a transfer; 0: none")
	fs.Var(durationFlag{&c.ClientTTL, time.Second}, "client_ttl", "seconds of silence after which a client is unmounted")
	fs.StringVar(&c.ClusterID, "cluster_id", c.ClusterID, "cluster identifier")
	fs.StringVar(&c.AllocationStrategy, "allocation_strategy", c.AllocationStrategy, "replica placement: random or free_ratio_first")
	fs.Var(durationFlag{&c.PutStartDiscardTimeout, time.Second}, "put_start_discard_timeout_sec", "seconds after which an unfinished put may be pre-empted")
	fs.Var(durationFlag{&c.PutStartReleaseTimeout, time.Second}, "put_start_release_timeout_sec", "seconds after which an unfinished put is reclaimed")
	fs.BoolVar(&c.EnableHA, "enable_ha", c.EnableHA, "high availability: campaign for leadership on --etcd_endpoints and serve only while leader")
	fs.StringVar(&c.EtcdEndpoints, "etcd_endpoints", c.EtcdEndpoints, "HA store: \"http://h:2379;http://h2:2379\", \"etcd://h:p,h:p\" or \"redis://h:6379\"")
	fs.StringVar(&c.EtcdEndpoints, "ha_backend_connstring", c.EtcdEndpoints, "same as --etcd_endpoints (upstream's newer name)")
	fs.StringVar(&c.HABackendType, "ha_backend_type", c.HABackendType, "HA store kind: etcd or redis (read from the endpoints' scheme when they have one)")
	fs.Var(durationFlag{&c.HALeaseTTL, time.Second}, "ha_lease_ttl_sec", "leader lease TTL in seconds")
	fs.BoolVar(&c.EnableSnapshot, "enable_snapshot", c.EnableSnapshot, "save periodic metadata snapshots")
	fs.Var(durationFlag{&c.SnapshotInterval, time.Second}, "snapshot_interval_seconds", "seconds between snapshots")
	fs.IntVar(&c.SnapshotRetentionCount, "snapshot_retention_count", c.SnapshotRetentionCount, "snapshots kept")
	fs.StringVar(&c.SnapshotBackendType, "snapshot_backend_type", c.SnapshotBackendType, "snapshot backend: local or s3 (MOONCAKE_SNAPSHOT_S3_* environment)")
	for _, alias := range []string{"snapshot_object_store_type", "snapshot_payload_store_type", "snapshot_payload_backend_type"} {
		fs.StringVar(&c.SnapshotBackendType, alias, c.SnapshotBackendType, "same as --snapshot_backend_type (upstream's newer name)")
	}
	fs.BoolVar(&c.EnableSnapshotRestore, "enable_snapshot_restore", c.EnableSnapshotRestore, "load the newest valid snapshot at start")
	fs.StringVar(&c.SnapshotBackupDir, "snapshot_backup_dir", c.SnapshotBackupDir, "local snapshot directory (default: MOONCAKE_SNAPSHOT_LOCAL_PATH, else /tmp/mooncake_snapshots)")
	hs := &c.HotStandby
	fs.StringVar(&hs.StandbyID, "standby_id", hs.StandbyID, "name of this master in standby logs")
	fs.StringVar(&hs.PrimaryAddress, "primary_address", hs.PrimaryAddress, "accepted for compatibility: the standby finds the primary through --etcd_endpoints")
	fs.IntVar(&hs.ReplicationPort, "replication_port", hs.ReplicationPort, "accepted for compatibility: replication goes through the oplog store")
	fs.Var(durationFlag{&hs.VerificationInterval, time.Second}, "verification_interval_sec", "seconds between standby lag checks/log lines")
	fs.Uint64Var(&hs.MaxReplicationLagEntries, "max_replication_lag_entries", hs.MaxReplicationLagEntries, "standby lag (entries) above which the lag alert metric is raised")
	fs.BoolVar(&hs.EnableVerification, "enable_verification", hs.EnableVerification, "standby: log applied_seq_id and lag periodically")
	fs.BoolVar(&hs.EnableSnapshotBootstrap, "enable_snapshot_bootstrap", hs.EnableSnapshotBootstrap, "standby: start from the newest snapshot (needs a snapshot backend)")
	fs.BoolVar(&hs.EnableOplogFollowing, "enable_oplog_following", hs.EnableOplogFollowing, "standby: apply oplog entries as they are appended")
	fs.StringVar(&hs.OplogStoreType, "oplog_store_type", hs.OplogStoreType, "oplog store: etcd or redis (default: from --etcd_endpoints)")
	fs.StringVar(&hs.OplogStoreRootDir, "oplog_store_root_dir", hs.OplogStoreRootDir, "accepted for compatibility (the oplog lives in etcd/Redis)")
	fs.Var(durationFlag{&hs.OplogPollInterval, time.Millisecond}, "oplog_poll_interval_ms", "standby lag polling period in milliseconds")
	fs.StringVar(&c.RootFSDir, "root_fs_dir", c.RootFSDir, "G3 file tier: directory (same path on every client) objects move to under memory pressure; empty = off")
	fs.Var(sizeFlag{&c.GlobalFileSegmentSize}, "global_file_segment_size", "bytes the G3 tier may hold (e.g. 100GB); 0 = unlimited")
	fs.StringVar(&c.DFSFullPolicy, "dfs_full_policy", c.DFSFullPolicy, "when the G3 tier is full: refuse (objects stay in memory) or evict_oldest (drop the oldest G3 objects)")
	fs.BoolVar(&c.PromotionOnHit, "promotion_on_hit", c.PromotionOnHit, "copy an object read from disk back into memory after --promotion_admission_threshold reads")
	fs.IntVar(&c.PromotionAdmissionThreshold, "promotion_admission_threshold", c.PromotionAdmissionThreshold, "disk reads of an object before it is promoted to memory")
	fs.StringVar(&c.TLSCertFile, "tls_cert_file", c.TLSCertFile, "serve the RPC port (gRPC and framed) over TLS with this PEM certificate (with --tls_key_file)")
	fs.StringVar(&c.TLSKeyFile, "tls_key_file", c.TLSKeyFile, "PEM private key of --tls_cert_file")
	fs.StringVar(&c.TLSCAFile, "tls_ca_file", c.TLSCAFile, "PEM CAs: when set, RPC clients must present a certificate they signed (MC_TLS_CERT_FILE/MC_TLS_KEY_FILE)")
	fs.BoolVar(&c.EnableOffload, "enable_offload", c.EnableOffload, "SSD offload: objects move to the local disk of clients set up with enable_ssd_offload")
	fs.BoolVar(&c.OffloadOnEvict, "offload_on_evict", c.OffloadOnEvict, "SSD offload: write objects to local disk only when they are evicted (default: also after each put)")
	fs.StringVar(&c.ConfigPath, "config_path", c.ConfigPath, "JSON or YAML file of flag_name: value; command-line flags override it")
	fs.StringVar(&c.RPCInterface, "rpc_interface", c.RPCInterface, "bind the RPC port to this network interface's IPv4 address (overrides --rpc_address)")
	fs.Var(durationFlag{&c.RPCConnTimeout, time.Second}, "rpc_conn_timeout_seconds", "close an RPC connection idle this many seconds (0: never)")
	fs.BoolVar(&c.RPCTCPNoDelay, "rpc_enable_tcp_no_delay", c.RPCTCPNoDelay, "TCP_NODELAY on RPC connections")
	fs.BoolVar(&c.EnableMetadataCleanupOnTimeout, "enable_metadata_cleanup_on_timeout", c.EnableMetadataCleanupOnTimeout,
		"when a client times out, remove its transfer-engine entries from the HTTP metadata server (needs --enable_http_metadata_server)")
	fs.StringVar(&c.MemoryAllocator, "memory_allocator", c.MemoryAllocator, "segment allocator: offset (this master's); cachelib is accepted and uses it too")
	fs.BoolVar(&c.EnableCXL, "enable_cxl", c.EnableCXL, "CXL memory: not supported (true is refused)")
	fs.StringVar(&c.CXLPath, "cxl_path", c.CXLPath, "DAX device of --enable_cxl (accepted)")
	fs.Var(sizeFlag{&c.CXLSize}, "cxl_size", "CXL memory size of --enable_cxl (accepted)")
	fs.Uint64Var(&c.MaxTotalFinishedTasks, "max_total_finished_tasks", c.MaxTotalFinishedTasks, "accepted: replica tasks run in the client that creates them here")
	fs.Uint64Var(&c.MaxTotalPendingTasks, "max_total_pending_tasks", c.MaxTotalPendingTasks, "accepted: replica tasks run in the client that creates them here")
	fs.Uint64Var(&c.MaxTotalProcessingTasks, "max_total_processing_tasks", c.MaxTotalProcessingTasks, "accepted: replica tasks run in the client that creates them here")
	fs.Var(durationFlag{&c.PendingTaskTimeout, time.Second}, "pending_task_timeout_sec", "accepted: replica tasks run in the client that creates them here")
	fs.Var(durationFlag{&c.ProcessingTaskTimeout, time.Second}, "processing_task_timeout_sec", "accepted: replica tasks run in the client that creates them here")
	fs.BoolVar(&c.EnableDiskEviction, "enable_disk_eviction", c.EnableDiskEviction, "SSD offload: a move past a client's local-disk quota drops that client's oldest local copies (false: the move is refused)")
	fs.Var(sizeFlag{&c.QuotaBytes}, "quota_bytes", "SSD offload: bytes each client's local disk may hold (0: 90% of the capacity it reports, MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES)")
}

// ParseFlags parses args (without the program name) into a Config: defaults, then the file
// named by --config_path, then the command-line flags. Unknown flags and bad
// values are errors.
func ParseFlags(name string, args []string) (Config, error) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return cfg, fmt.Errorf("bad command line: %w", err)
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("bad command line: unexpected argument %q", fs.Arg(0))
	}
	if cfg.ConfigPath != "" {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if err := applyConfigFile(fs, cfg.ConfigPath, set); err != nil {
			return cfg, err
		}
	}
	fs.Visit(func(f *flag.Flag) { cfg.MetricsPortSet = cfg.MetricsPortSet || f.Name == "metrics_port" })
	if cfg.HABackendType == "redis" && cfg.EtcdEndpoints != "" && !strings.Contains(cfg.EtcdEndpoints, "://") {
		cfg.EtcdEndpoints = "redis://" + cfg.EtcdEndpoints // --ha_backend_type=redis --ha_backend_connstring=h:6379
	}
	return cfg, cfg.Validate()
}

// configFileAliases maps keys of upstream's master config files that are not flag names here
// to the flag that holds the same setting.
var configFileAliases = map[string]string{
	"client_live_ttl_sec":   "client_ttl", // upstream's classic conf/master.json
	"client_active_ttl_sec": "client_ttl", // its newer one
}

// applyConfigFile sets the flags a JSON or YAML file names (keys are flag names, or the
// aliases above), except those in skip (given on the command line). A key that is neither is
// logged and skipped, as upstream's master ignores keys it does not read: upstream's own
// config files carry keys for features this master does not have.
func applyConfigFile(fs *flag.FlagSet, path string, skip map[string]bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read --config_path: %w", err)
	}
	var m map[string]any
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber() // keep 9223372036854775807 an integer
		err = dec.Decode(&m)
	default: // YAML is a superset of JSON
		err = yaml.Unmarshal(data, &m)
	}
	if err != nil {
		return fmt.Errorf("parse config file %s: %w", path, err)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var ignored []string
	for _, k := range keys {
		name := k
		if a, ok := configFileAliases[k]; ok {
			name = a
		}
		if name == "config_path" {
			return fmt.Errorf("config file %s: config_path cannot be set inside a config file", path)
		}
		if fs.Lookup(name) == nil {
			ignored = append(ignored, k)
			continue
		}
		if skip[name] {
			continue
		}
		v := m[k]
		s := fmt.Sprint(v)
		if f, ok := v.(float64); ok && f == float64(int64(f)) {
			s = fmt.Sprint(int64(f))
		}
		if err := fs.Set(name, s); err != nil {
			return fmt.Errorf("config file %s: option %s: %w", path, k, err)
		}
	}
	if len(ignored) > 0 {
		log.Printf("mooncake_master: config file %s: ignoring %d key(s) this master does not read: %s", path, len(ignored), strings.Join(ignored, ", "))
	}
	return nil
}
