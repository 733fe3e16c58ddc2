package config

// The registry. Keep docs/configuration.md's table in the same order (TestDocTable checks
// that both list the same knobs, defaults and stages).

// Library load: read once, when libmooncake.so is loaded (a Go binary: when it starts).
var (
	GoMaxProcs       = knob("MOONCAKE_GOMAXPROCS", Int, "min(NumCPU, 4) when GOMAXPROCS is unset", LibraryLoad, "Go scheduler threads of the library (GOMAXPROCS of its Go runtime)")
	GOMAXPROCS       = knob("GOMAXPROCS", Int, "unset", LibraryLoad, "when set (and MOONCAKE_GOMAXPROCS is not), the Go runtime's own setting is kept")
	ReduceKernel     = knob("MOONCAKE_REDUCE_KERNEL", String, "the best the CPU has", LibraryLoad, "forces the reduction kernels for large inputs: go, portable, avx2 or avx512 (one the CPU has)")
	LogLevel         = knob("MC_LOG_LEVEL", String, "INFO", LibraryLoad, "least severity of the library's glog-style stderr lines (errors its C functions return): TRACE (adds expected outcomes such as OBJECT_NOT_FOUND), INFO, WARNING or ERROR")
	GCHeapFloorBytes = knob("MOONCAKE_GC_HEAP_FLOOR", Bytes, "64M", LibraryLoad, "the Go runtime of the library (or binary) collects garbage at most once per this many bytes allocated while its live heap is smaller: the next collection at max(2 x live, live + this); 0: Go's own pacing")
	GOGC             = knob("GOGC", String, "unset", LibraryLoad, "when set (a percent or off), the Go runtime's own setting is kept (no MOONCAKE_GC_HEAP_FLOOR)")
)

// Engine creation: read when a transfer engine is created (TransferEngine.initialize, or the
// process-wide engine a process group or the store creates on first need).
var (
	MetadataServer    = knob("MC_METADATA_SERVER", String, "P2PHANDSHAKE", EngineCreation, "metadata store of an engine created without one: P2PHANDSHAKE, http://h:p/metadata, etcd://h:p, redis://h:p")
	LocalHostname     = knob("MC_LOCAL_HOSTNAME", String, "the host's first non-loopback IPv4 address", EngineCreation, "segment name / address of the process-wide engine a process group creates")
	Protocol          = knob("MOONCAKE_PROTOCOL", String, "tcp", EngineCreation, "transport protocol of the process-wide engine a process group creates")
	Device            = knob("MOONCAKE_DEVICE", String, "", EngineCreation, "NIC filter of the process-wide engine a process group creates (ignored by tcp)")
	ForceTCP          = knob("MC_FORCE_TCP", Bool, "0", EngineCreation, "1: reach same-host peers over TCP instead of shared memory")
	TransferTimeout   = knob("MC_TRANSFER_TIMEOUT", Number, "30", EngineCreation, "seconds a transfer may take before it fails")
	SliceSize         = knob("MC_SLICE_SIZE", Int, "8388608", EngineCreation, "bytes per TCP data frame (clamped to 8 MiB .. 1 GiB)")
	TCPSocketBuffer   = knob("MC_TCP_SOCKET_BUFFER", Int, "0 (the OS default)", EngineCreation, "TCP send/receive buffer size of the engine's sockets")
	HandshakePort     = knob("MC_HANDSHAKE_PORT", Int, "0 (a free port in MC_MIN_RPC_PORT..MC_MAX_RPC_PORT)", EngineCreation, "RPC/data port of an engine whose name has no port")
	TCPBindAddress    = knob("MC_TCP_BIND_ADDRESS", String, "0.0.0.0", EngineCreation, "address the engine listens on (also advertised when it is not a wildcard)")
	MinRPCPort        = knob("MC_MIN_RPC_PORT", Int, "15000", EngineCreation, "lowest port an engine picks at random")
	MaxRPCPort        = knob("MC_MAX_RPC_PORT", Int, "17000", EngineCreation, "port above the highest an engine picks at random")
	MetadataClusterID = knob("MC_METADATA_CLUSTER_ID", String, "", EngineCreation, "namespace of the engine's metadata keys: mooncake/<id>/...")
	RedisPassword     = knob("MC_REDIS_PASSWORD", String, "", EngineCreation, "Redis password when a redis:// URL (metadata, HA) has none; also read at store setup() and master start")
	RedisDBIndex      = knob("MC_REDIS_DB_INDEX", Int, "0", EngineCreation, "Redis database when a redis:// URL (metadata, HA) names none; also read at store setup() and master start")
	CustomTopoJSON    = knob("MC_CUSTOM_TOPO_JSON", String, "", EngineCreation, "priority-matrix JSON the engine reports instead of the discovered topology")
)

// Store setup(): read when a store client is set up.
var (
	StoreClusterID       = knob("MC_STORE_CLUSTER_ID", String, "mooncake_cluster", StoreSetup, "HA cluster whose leader a client with master_server_address=etcd://... or redis://... follows")
	StoreRPC             = knob("MC_STORE_RPC", String, "framed", StoreSetup, "grpc: call the master over gRPC instead of the framed RPC")
	StorePrefault        = knob("MC_STORE_PREFAULT", String, "auto", StoreSetup, "0: never populate the mounted segment up front; 1: always; auto: when it fits in half the available memory")
	StoreSmallValueBytes = knob("MC_STORE_SMALL_VALUE_BYTES", Int, "4096", StoreSetup, "a put of at most this many bytes sends them with its PutEnd, so that the master answers gets with them (no transfer; at most 65536; 0: never)")
	StorePutReservations = knob("MC_STORE_PUT_RESERVATIONS", Int, "64", StoreSetup, "how many single puts of one size (at most 64 KiB) a client may start ahead, so that such a put is the write and one master call (0: none)")
)

// Master start: read when mooncake_master starts.
var (
	SnapshotLocalPath  = knob("MOONCAKE_SNAPSHOT_LOCAL_PATH", String, "", MasterStart, "directory of the local snapshot backend when --snapshot_backup_dir is empty (neither: /tmp/mooncake_snapshots)")
	SnapshotS3Endpoint = knob("MOONCAKE_SNAPSHOT_S3_ENDPOINT", String, "", MasterStart, "S3 endpoint of the s3 snapshot backend (empty: AWS)")
	SnapshotS3Bucket   = knob("MOONCAKE_SNAPSHOT_S3_BUCKET", String, "", MasterStart, "bucket of the s3 snapshot backend (required for it)")
	SnapshotS3Prefix   = knob("MOONCAKE_SNAPSHOT_S3_PREFIX", String, "", MasterStart, "key prefix of the s3 snapshot backend")
	AWSRegion          = knob("AWS_DEFAULT_REGION", String, "", MasterStart, "region of the s3 snapshot backend")
	AWSAccessKeyID     = knob("AWS_ACCESS_KEY_ID", String, "", MasterStart, "access key of the s3 snapshot backend (with AWS_SECRET_ACCESS_KEY; empty: the AWS credential chain)")
	AWSSecretAccessKey = knob("AWS_SECRET_ACCESS_KEY", String, "", MasterStart, "secret key of the s3 snapshot backend")
)

// init_process_group: read when a process group is created.
var (
	PGCredits             = knob("MC_PG_CREDITS", Int, "8", ProcessGroupInit, "p2p credits per peer: cells of the peer's mailbox a sender may fill ahead (earlier name MC_PG_SLOTS, still read)").formerly("MC_PG_SLOTS")
	PGCellBytes           = knob("MC_PG_CELL_BYTES", Int, "1048576", ProcessGroupInit, "payload bytes per cell of a p2p mailbox (earlier name MC_PG_SLOT_BYTES, still read)").formerly("MC_PG_SLOT_BYTES")
	PGSmallBytes          = knob("MC_PG_SMALL_BYTES", Int, "65536", ProcessGroupInit, "collectives up to this size use the latency-optimal algorithms")
	PGChunkBytes          = knob("MC_PG_CHUNK_BYTES", Int, "1048576", ProcessGroupInit, "pipelining unit of the ring and chain algorithms")
	PGFusedBytes          = knob("MC_PG_FUSED_BYTES", Int, "16384", ProcessGroupInit, "all_reduce up to this size, and each pair of all_to_all up to this size, travels in its header message (-1: never)")
	PGPairBytes           = knob("MC_PG_PAIR_BYTES", Int, "524288", ProcessGroupInit, "a two-member all_reduce up to this size is one exchange instead of the ring")
	PGShm                 = knob("MC_PG_SHM", Bool, "1", ProcessGroupInit, "0: no same-host shared-memory fast path")
	PGShmChunk            = knob("MC_PG_SHM_CHUNK", Bytes, "256K", ProcessGroupInit, "reduction unit of the shared-memory fast path")
	PGShmCopyChunk        = knob("MC_PG_SHM_COPY_CHUNK", Bytes, "2M", ProcessGroupInit, "largest copy round of the shared-memory fast path (broadcast, all_gather, gather)")
	PGShmStreamOut        = knob("MC_PG_SHM_STREAM_OUT", Bytes, "8M", ProcessGroupInit, "all_to_all outputs of this size and more are copied out with non-temporal stores")
	PGShmSpinUS           = knob("MC_PG_SHM_SPIN_US", Int, "20 (2 when ranks outnumber CPUs)", ProcessGroupInit, "microseconds a shared-memory wait polls before it sleeps (0: no polling)")
	P2PStreams            = knob("MC_P2P_STREAMS", Bool, "1", ProcessGroupInit, "0: p2p over the network without write streams (a round trip per batch)")
	PGProbeMS             = knob("MC_PG_PROBE_MS", Int, "200", ProcessGroupInit, "milliseconds of silence from a peer before a liveness probe")
	PGProbeTimeoutMS      = knob("MC_PG_PROBE_TIMEOUT_MS", Int, "2000", ProcessGroupInit, "milliseconds a liveness probe waits for the peer's answer: a stopped or cut-off rank is declared failed after this long (lower: faster recovery, more risk of dropping a rank that only stalls)")
	PGFTInputCopy         = knob("MOONCAKE_PG_FT_INPUT_COPY", Bool, "1", ProcessGroupInit, "0: no copy of in-place inputs for an elastic rerun (a peer failure then fails the op)")
	PGCollectiveTimeoutUS = knob("MOONCAKE_PG_COLLECTIVE_TIMEOUT_US", Int, "0 (the group's timeout)", ProcessGroupInit, "deadline of a collective in microseconds (capped by the group's timeout)")
	PGMetricsPort         = knob("MOONCAKE_PG_METRICS_PORT", Int, "0 (off)", ProcessGroupInit, "serve process-group metrics for Prometheus on this port plus the rank (docs/monitoring.md)")
)
