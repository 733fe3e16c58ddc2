package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/mooncake-go/mooncake/collective"
	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/engine/metadata"
	"github.com/mooncake-go/mooncake/p2p"
	"github.com/mooncake-go/mooncake/pg"
	"github.com/mooncake-go/mooncake/store/client"
	"github.com/mooncake-go/mooncake/store/ha"
	"github.com/mooncake-go/mooncake/store/snapshot"
	"github.com/mooncake-go/mooncake/store/tlsconf"
)

// The functions below read the knobs now and fill the settings structs of the library
// packages with them; capi/ and cmd/ call them at the moment of use. A field the caller set
// already (non-zero) wins over its knob.

// Engine fills cfg's unset fields from the engine-creation knobs (MC_METADATA_SERVER,
// MC_FORCE_TCP, MC_TRANSFER_TIMEOUT, MC_SLICE_SIZE, MC_TCP_SOCKET_BUFFER, MC_HANDSHAKE_PORT,
// MC_TCP_BIND_ADDRESS, MC_MIN_RPC_PORT, MC_MAX_RPC_PORT, MC_METADATA_CLUSTER_ID,
// MC_CUSTOM_TOPO_JSON, MC_REDIS_PASSWORD, MC_REDIS_DB_INDEX, MC_AUTH_TOKEN,
// MC_AUTH_TOKEN_FILE). Name, protocol and device are the caller's (see ProcessEngine for the
// process-wide engine's).
func Engine(cfg engine.Config) engine.Config {
	if cfg.MetadataServer == "" {
		cfg.MetadataServer = MetadataServer.Trimmed()
	}
	if cfg.TransferTimeout == 0 {
		if f, ok := TransferTimeout.Float(); ok && f > 0 {
			cfg.TransferTimeout = time.Duration(f * float64(time.Second))
		}
	}
	cfg.ForceTCP = cfg.ForceTCP || ForceTCP.Bool()
	if n, ok := SliceSize.Int(); ok && n > 0 && cfg.SliceSize == 0 {
		cfg.SliceSize = uint64(n)
	}
	setInt(&cfg.SocketBuffer, TCPSocketBuffer)
	setInt(&cfg.HandshakePort, HandshakePort)
	setInt(&cfg.MinRPCPort, MinRPCPort)
	setInt(&cfg.MaxRPCPort, MaxRPCPort)
	setString(&cfg.BindAddress, TCPBindAddress)
	setString(&cfg.ClusterID, MetadataClusterID)
	setString(&cfg.CustomTopology, CustomTopoJSON)
	setString(&cfg.AuthToken, AuthToken)
	setString(&cfg.AuthTokenFile, AuthTokenFile)
	cfg.Metadata = Metadata(cfg.Metadata)
	return cfg
}

// ProcessEngine is the configuration of the process-wide engine a process group creates when
// the process has none: MC_LOCAL_HOSTNAME, MC_METADATA_SERVER (P2PHANDSHAKE),
// MOONCAKE_PROTOCOL (tcp), MOONCAKE_DEVICE, and the rest as Engine.
func ProcessEngine() engine.Config {
	return Engine(engine.Config{
		LocalServerName: LocalHostname.String(),
		MetadataServer:  or(MetadataServer.String(), engine.P2PHandshake),
		Protocol:        or(Protocol.String(), "tcp"),
		DeviceName:      Device.String(),
	})
}

// Metadata fills o's unset fields from MC_REDIS_PASSWORD and MC_REDIS_DB_INDEX.
func Metadata(o metadata.Options) metadata.Options {
	setString(&o.RedisPassword, RedisPassword)
	setString(&o.RedisDBIndex, RedisDBIndex)
	o.Etcd = Etcd()
	return o
}

// HA fills o's unset fields from MC_REDIS_PASSWORD, MC_REDIS_DB_INDEX and the TLS files
// (MC_TLS_CA_FILE, MC_TLS_CERT_FILE, MC_TLS_KEY_FILE).
func HA(o ha.Options) ha.Options {
	setString(&o.RedisPassword, RedisPassword)
	setString(&o.RedisDBIndex, RedisDBIndex)
	o.TLS = TLSClient(o.TLS)
	o.Etcd = Etcd()
	return o
}

// TLSClient fills t's unset fields from MC_TLS_CA_FILE, MC_TLS_CERT_FILE and MC_TLS_KEY_FILE.
func TLSClient(t tlsconf.Client) tlsconf.Client {
	setString(&t.CAFile, TLSCAFile)
	setString(&t.CertFile, TLSCertFile)
	setString(&t.KeyFile, TLSKeyFile)
	return t
}

// StoreClient fills cfg's unset fields from the store-setup knobs (MC_STORE_CLUSTER_ID,
// MC_STORE_RPC, MC_STORE_PREFAULT, MC_STORE_SMALL_VALUE_BYTES, MC_STORE_PUT_RESERVATIONS, the Redis ones) and cfg.Engine as Engine does.
func StoreClient(cfg client.Config) client.Config {
	setString(&cfg.ClusterID, StoreClusterID)
	cfg.GRPC = cfg.GRPC || strings.EqualFold(StoreRPC.Trimmed(), "grpc")
	if cfg.Prefault == client.PrefaultAuto {
		switch StorePrefault.String() {
		case "0":
			cfg.Prefault = client.PrefaultOff
		case "1":
			cfg.Prefault = client.PrefaultOn
		}
	}
	if cfg.SmallValueBytes == 0 {
		if n, ok := StoreSmallValueBytes.Int(); ok && n <= 0 {
			cfg.SmallValueBytes = -1 // 0: never
		} else if ok {
			cfg.SmallValueBytes = n
		}
	}
	if cfg.PutReservations == 0 {
		if n, ok := StorePutReservations.Int(); ok && n <= 0 {
			cfg.PutReservations = -1 // 0: none
		} else if ok {
			cfg.PutReservations = n
		}
	}
	cfg.HA = HA(cfg.HA)
	cfg.TLS = TLSClient(cfg.TLS)
	if cfg.AuthToken == nil {
		cfg.AuthToken, cfg.SecurityError = Token()
	}
	switch strings.ToLower(StoreTLS.Trimmed()) {
	case "", "auto":
		cfg.MasterTLS = cfg.MasterTLS || cfg.TLS.CAFile != ""
	case "1", "true", "on", "yes":
		cfg.MasterTLS = true
	case "0", "false", "off", "no":
	default:
		if cfg.SecurityError == nil {
			cfg.SecurityError = fmt.Errorf("MC_STORE_TLS=%q: want auto, 1 or 0", StoreTLS.String())
		}
	}
	cfg.Engine = Engine(cfg.Engine)
	return cfg
}

// SnapshotBackend is the backend settings of a master whose --snapshot_backup_dir is
// localRoot: MOONCAKE_SNAPSHOT_LOCAL_PATH when localRoot is empty, and the S3 knobs
// (MOONCAKE_SNAPSHOT_S3_ENDPOINT, _BUCKET, _PREFIX, AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY).
func SnapshotBackend(localRoot string) snapshot.BackendOptions {
	return snapshot.BackendOptions{
		LocalRoot: or(localRoot, SnapshotLocalPath.String()),
		S3: snapshot.S3Config{
			Endpoint:  SnapshotS3Endpoint.Trimmed(),
			Region:    AWSRegion.Trimmed(),
			Bucket:    SnapshotS3Bucket.Trimmed(),
			Prefix:    SnapshotS3Prefix.Trimmed(),
			AccessKey: AWSAccessKeyID.String(),
			SecretKey: AWSSecretAccessKey.String(),
		},
	}
}

// Collective is the algorithm settings of a new process group: MC_PG_SMALL_BYTES,
// MC_PG_CHUNK_BYTES, MC_PG_FUSED_BYTES and MC_PG_PAIR_BYTES (each: a value above 0, else the
// default), as capi's process-group creation read them.
func Collective() collective.Options {
	return collective.Options{
		SmallBytes: PGSmallBytes.Positive(),
		ChunkBytes: PGChunkBytes.Positive(),
		FusedBytes: fused(),
		PairBytes:  PGPairBytes.Positive(),
	}
}

// Shared is the same-host fast path's settings of a new process group: MC_PG_SHM_CHUNK,
// MC_PG_SHM_COPY_CHUNK (2 MiB when unset, also when MC_PG_SHM_CHUNK is set), MC_PG_SHM_STREAM_OUT
// and MC_PG_SHM_SPIN_US (0: no polling). Whether to take the fast path at all is PGShm.Bool().
func Shared() collective.SharedOptions {
	o := collective.SharedOptions{
		ChunkBytes:     PGShmChunk.Size(),
		CopyBytes:      PGShmCopyChunk.Size(),
		StreamOutBytes: PGShmStreamOut.Size(),
	}
	if o.CopyBytes == 0 {
		o.CopyBytes = collective.DefaultShmCopyBytes
	}
	if us, ok := PGShmSpinUS.Int(); ok && us >= 0 {
		o.Spin = time.Duration(us) * time.Microsecond
		if us == 0 {
			o.Spin = -1 // no polling
		}
	}
	return o
}

// fused is MC_PG_FUSED_BYTES: a size, or a negative value for no fused all_reduce or all_to_all.
func fused() int {
	n, _ := PGFusedBytes.Int()
	return n
}

// PG is a new process group's settings, read at init_process_group: the endpoint's (P2P),
// the algorithms' (Collective), the same-host fast path's (Shared, and MC_PG_SHM), the
// elastic rerun's input copy (MOONCAKE_PG_FT_INPUT_COPY) and the collective deadline
// (MOONCAKE_PG_COLLECTIVE_TIMEOUT_US).
func PG() pg.Options {
	o := pg.Options{
		P2P:            P2P(),
		Collective:     Collective(),
		Shared:         Shared(),
		NoSharedMemory: !PGShm.Bool(),
		NoInputCopy:    !PGFTInputCopy.Bool(),
	}
	if us := PGCollectiveTimeoutUS.Positive(); us > 0 {
		o.CollectiveTimeout = time.Duration(us) * time.Microsecond
	}
	return o
}

// P2P is the endpoint settings of a new process group: MC_PG_CREDITS and MC_PG_CELL_BYTES (a
// value above 0, else the default), MC_P2P_STREAMS, MC_PG_PROBE_MS and MC_PG_PROBE_TIMEOUT_MS.
func P2P() p2p.Options {
	return p2p.Options{
		Credits:       PGCredits.Positive(),
		CellBytes:     PGCellBytes.Positive(),
		NoStreams:     !P2PStreams.Bool(),
		ProbeInterval: time.Duration(PGProbeMS.Positive()) * time.Millisecond,
		ProbeTimeout:  time.Duration(PGProbeTimeoutMS.Positive()) * time.Millisecond,
	}
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func setString(dst *string, k *Knob) {
	if *dst == "" {
		*dst = k.String()
	}
}

func setInt(dst *int, k *Knob) {
	if n, ok := k.Int(); ok && *dst == 0 {
		*dst = n
	}
}

// GCHeapFloor is the floor internal/gcfloor keeps (MOONCAKE_GC_HEAP_FLOOR; 64 MiB unless it
// is 0): 0 when GOGC is set, so that the runtime's own setting is kept.
func GCHeapFloor() uint64 {
	v := GCHeapFloorBytes.Trimmed()
	if GOGC.String() != "" || v == "0" || v == "off" {
		return 0
	}
	if n := ParseSize(v); n > 0 {
		return uint64(n)
	}
	return 64 << 20
}
