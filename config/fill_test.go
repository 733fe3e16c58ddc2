package config

import (
	"strconv"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/collective"
	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/p2p"
	"github.com/mooncake-go/mooncake/store/client"
)

func TestEngineFromKnobs(t *testing.T) {
	for k, v := range map[string]string{
		"MC_METADATA_SERVER": " etcd://h:1 ", "MC_FORCE_TCP": "1", "MC_TRANSFER_TIMEOUT": "1.5",
		"MC_SLICE_SIZE": "16777216", "MC_TCP_SOCKET_BUFFER": "4096", "MC_HANDSHAKE_PORT": "12345",
		"MC_TCP_BIND_ADDRESS": "127.0.0.1", "MC_MIN_RPC_PORT": "20000", "MC_MAX_RPC_PORT": "20100",
		"MC_METADATA_CLUSTER_ID": "c1", "MC_CUSTOM_TOPO_JSON": "{}", "MC_REDIS_PASSWORD": "pw", "MC_REDIS_DB_INDEX": "2",
	} {
		t.Setenv(k, v)
	}
	got := Engine(engine.Config{LocalServerName: "n"})
	want := engine.Config{LocalServerName: "n", MetadataServer: "etcd://h:1", ForceTCP: true,
		TransferTimeout: 1500 * time.Millisecond, SliceSize: 16 << 20, SocketBuffer: 4096, HandshakePort: 12345,
		BindAddress: "127.0.0.1", MinRPCPort: 20000, MaxRPCPort: 20100, ClusterID: "c1", CustomTopology: "{}"}
	want.Metadata.RedisPassword, want.Metadata.RedisDBIndex = "pw", "2"
	if got != want {
		t.Fatalf("Engine() =\n%+v\nwant\n%+v", got, want)
	}
	// Fields the caller set win.
	if got := Engine(engine.Config{MetadataServer: "P2PHANDSHAKE", ClusterID: "mine"}); got.MetadataServer != "P2PHANDSHAKE" || got.ClusterID != "mine" {
		t.Fatalf("caller's fields overwritten: %+v", got)
	}
}

func TestEngineDefaults(t *testing.T) {
	for _, k := range All() {
		if k.Stage() == EngineCreation {
			t.Setenv(k.Name(), "")
		}
	}
	if got := Engine(engine.Config{}); got != (engine.Config{}) {
		t.Fatalf("no knobs set: Engine() = %+v, want the zero Config (the engine's defaults)", got)
	}
	got := ProcessEngine()
	if got.MetadataServer != engine.P2PHandshake || got.Protocol != "tcp" || got.LocalServerName != "" {
		t.Fatalf("ProcessEngine() = %+v", got)
	}
}

func TestStoreClientFromKnobs(t *testing.T) {
	t.Setenv("MC_STORE_CLUSTER_ID", "prod")
	t.Setenv("MC_STORE_RPC", " GRPC ")
	t.Setenv("MC_STORE_PREFAULT", "0")
	t.Setenv("MC_FORCE_TCP", "yes")
	t.Setenv("MC_REDIS_PASSWORD", "pw")
	got := StoreClient(client.Config{MasterServerAddress: "etcd://h:1"})
	if got.ClusterID != "prod" || !got.GRPC || got.Prefault != client.PrefaultOff || !got.Engine.ForceTCP || got.HA.RedisPassword != "pw" {
		t.Fatalf("StoreClient() = %+v", got)
	}
	t.Setenv("MC_STORE_PREFAULT", "1")
	t.Setenv("MC_STORE_RPC", "")
	if got := StoreClient(client.Config{ClusterID: "mine"}); got.ClusterID != "mine" || got.GRPC || got.Prefault != client.PrefaultOn {
		t.Fatalf("StoreClient() = %+v", got)
	}
	t.Setenv("MC_STORE_PREFAULT", "auto")
	if got := StoreClient(client.Config{}); got.Prefault != client.PrefaultAuto {
		t.Fatalf("MC_STORE_PREFAULT=auto: %v", got.Prefault)
	}
}

func TestSnapshotBackend(t *testing.T) {
	t.Setenv("MOONCAKE_SNAPSHOT_LOCAL_PATH", "/env/dir")
	t.Setenv("MOONCAKE_SNAPSHOT_S3_BUCKET", " b ")
	t.Setenv("MOONCAKE_SNAPSHOT_S3_PREFIX", "p")
	t.Setenv("MOONCAKE_SNAPSHOT_S3_ENDPOINT", "http://h:9000")
	t.Setenv("AWS_DEFAULT_REGION", "r")
	t.Setenv("AWS_ACCESS_KEY_ID", "ak")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "sk")
	o := SnapshotBackend("")
	if o.LocalRoot != "/env/dir" || o.S3.Bucket != "b" || o.S3.Prefix != "p" || o.S3.Endpoint != "http://h:9000" ||
		o.S3.Region != "r" || o.S3.AccessKey != "ak" || o.S3.SecretKey != "sk" {
		t.Fatalf("SnapshotBackend() = %+v", o)
	}
	if o := SnapshotBackend("/flag/dir"); o.LocalRoot != "/flag/dir" {
		t.Fatalf("--snapshot_backup_dir must win: %q", o.LocalRoot)
	}
}

func TestProcessGroupSettings(t *testing.T) {
	for _, k := range All() {
		if k.Stage() == ProcessGroupInit {
			t.Setenv(k.Name(), "")
			if a := k.Alias(); a != "" {
				t.Setenv(a, "")
			}
		}
	}
	if got := Collective(); got != (collective.Options{}) {
		t.Fatalf("no knobs: Collective() = %+v", got)
	}
	if got := P2P(); got != (p2p.Options{}) {
		t.Fatalf("no knobs: P2P() = %+v", got)
	}
	// Unset, p2p applies its own defaults: the knobs must document those.
	if PGCredits.Default() != strconv.Itoa(p2p.DefaultCredits) || PGCellBytes.Default() != strconv.Itoa(p2p.DefaultCellBytes) {
		t.Fatalf("MC_PG_CREDITS, MC_PG_CELL_BYTES document %s, %s; p2p's defaults are %d, %d",
			PGCredits.Default(), PGCellBytes.Default(), p2p.DefaultCredits, p2p.DefaultCellBytes)
	}
	// MC_PG_SHM_CHUNK alone does not shrink the copy rounds (2 MiB stays the default).
	t.Setenv("MC_PG_SHM_CHUNK", "64K")
	if got, want := Shared(), (collective.SharedOptions{ChunkBytes: 64 << 10, CopyBytes: 2 << 20}); got != want {
		t.Fatalf("Shared() = %+v, want %+v", got, want)
	}
	for k, v := range map[string]string{"MC_PG_SLOTS": "8", "MC_PG_SLOT_BYTES": "4096", "MC_PG_SMALL_BYTES": "1024",
		"MC_PG_CHUNK_BYTES": "2048", "MC_PG_FUSED_BYTES": "-1", "MC_PG_PAIR_BYTES": "0",
		"MC_PG_SHM_COPY_CHUNK": "1M", "MC_PG_SHM_STREAM_OUT": "4M", "MC_PG_SHM_SPIN_US": "0"} {
		t.Setenv(k, v)
	}
	if got, want := P2P(), (p2p.Options{Credits: 8, CellBytes: 4096}); got != want {
		t.Fatalf("P2P() under the earlier names MC_PG_SLOTS, MC_PG_SLOT_BYTES = %+v, want %+v", got, want)
	}
	// The knobs' own names win over the earlier ones.
	t.Setenv("MC_PG_CREDITS", "6")
	t.Setenv("MC_PG_CELL_BYTES", "1024")
	if got, want := P2P(), (p2p.Options{Credits: 6, CellBytes: 1024}); got != want {
		t.Fatalf("P2P() = %+v, want %+v", got, want)
	}
	// FusedBytes -1 turns the fused all_reduce off (collective.Options: negative is off);
	// PairBytes 0 is the default.
	if got, want := Collective(), (collective.Options{SmallBytes: 1024, ChunkBytes: 2048, FusedBytes: -1}); got != want {
		t.Fatalf("Collective() = %+v, want %+v", got, want)
	}
	if got, want := Shared(), (collective.SharedOptions{ChunkBytes: 64 << 10, CopyBytes: 1 << 20, StreamOutBytes: 4 << 20, Spin: -1}); got != want {
		t.Fatalf("Shared() = %+v, want %+v", got, want)
	}
	t.Setenv("MC_PG_SHM_SPIN_US", "5")
	if got := Shared().Spin; got != 5*time.Microsecond {
		t.Fatalf("MC_PG_SHM_SPIN_US=5: Spin = %v", got)
	}
}
