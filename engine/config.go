package engine

import (
	"time"

	"github.com/mooncake-go/mooncake/engine/metadata"
)

// P2PHandshake is the metadata connection string for direct peer handshakes (no store).
const P2PHandshake = "P2PHANDSHAKE"

// Default values of Config's fields.
const (
	DefaultTransferTimeout = 30 * time.Second
	DefaultMinRPCPort      = 15000
	DefaultMaxRPCPort      = 17000
)

// Config configures New. The zero value is usable: P2P handshake, tcp, a name derived from
// the host's address and the chosen RPC port. The engine reads no environment: capi/ and cmd/
// fill the fields from the knobs of package config (named in each field's comment).
type Config struct {
	LocalServerName string        // segment name; "" -> hostname. With P2PHANDSHAKE the name becomes host:rpc_port
	MetadataServer  string        // "P2PHANDSHAKE" (default), "http://h:p/metadata", "etcd://h:p[,h:p]", bare "h:p" = etcd, "redis://h:p" (MC_METADATA_SERVER)
	Protocol        string        // "tcp" (default); "rdma", "nvlink", "cxl", ... -> errors.Is(err, ErrNotSupported)
	DeviceName      string        // NIC filter for protocols that use one; ignored by tcp
	TransferTimeout time.Duration // 0 -> 30 s (MC_TRANSFER_TIMEOUT)

	ForceTCP       bool   // reach same-host peers over TCP, not shared memory (MC_FORCE_TCP)
	SliceSize      uint64 // bytes per TCP data frame, clamped to [8 MiB, 1 GiB]; 0 -> 8 MiB (MC_SLICE_SIZE)
	SocketBuffer   int    // TCP socket buffer size; 0 -> the OS default (MC_TCP_SOCKET_BUFFER)
	HandshakePort  int    // port when LocalServerName has none; 0 -> a free one in [MinRPCPort, MaxRPCPort) (MC_HANDSHAKE_PORT)
	BindAddress    string // listen address; "" -> 0.0.0.0; a non-wildcard one is also advertised (MC_TCP_BIND_ADDRESS)
	MinRPCPort     int    // 0 -> 15000 (MC_MIN_RPC_PORT)
	MaxRPCPort     int    // 0 -> 17000 (MC_MAX_RPC_PORT)
	ClusterID      string // metadata key namespace: mooncake/<ClusterID>/... ("" -> mooncake/...) (MC_METADATA_CLUSTER_ID)
	CustomTopology string // priority-matrix JSON GetLocalTopology reports when valid (MC_CUSTOM_TOPO_JSON)

	Metadata metadata.Options // settings of the metadata store (Redis password and database)

	// AuthToken / AuthTokenFile: the engine's token (auth.Load: at most one of them set).
	// With a token every connection, in and out, proves it before anything else is sent
	// (docs/security.md); without one the engine serves unauthenticated peers, except for the
	// buffers of groups that use a token of their own (AddToken). (MC_AUTH_TOKEN, MC_AUTH_TOKEN_FILE)
	AuthToken     string
	AuthTokenFile string
}
