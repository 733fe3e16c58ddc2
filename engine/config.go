package engine

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// P2PHandshake is the metadata connection string for direct peer handshakes (no store).
const P2PHandshake = "P2PHANDSHAKE"

// Config configures New. The zero value is usable: P2P handshake, tcp, a name derived from
// the host's address and the chosen RPC port.
type Config struct {
	LocalServerName string        // segment name; "" -> hostname. With P2PHANDSHAKE the name becomes host:rpc_port
	MetadataServer  string        // "P2PHANDSHAKE" (default; MC_METADATA_SERVER when empty), "http://h:p/metadata", "etcd://h:p[,h:p]", bare "h:p" = etcd, "redis://h:p"
	Protocol        string        // "tcp" (default); "rdma", "nvlink", "cxl", ... -> errors.Is(err, ErrNotSupported)
	DeviceName      string        // NIC filter for protocols that use one; ignored by tcp
	TransferTimeout time.Duration // 0 -> MC_TRANSFER_TIMEOUT seconds or 30 s
}

// Protocols that exist upstream but need hardware or libraries this build does not drive.
var unsupportedProtocols = map[string]bool{
	"rdma": true, "efa": true, "nvlink": true, "nvlink_intra": true, "mnnvl": true,
	"cxl": true, "nvmeof": true, "ascend": true, "hccl": true, "hip": true, "barex": true,
	"ubshmem": true, "gds": true,
}

func envInt(name string, def int) int {
	if v := strings.TrimSpace(os.Getenv(name)); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return def
}

func envBool(name string) bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv(name))) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

func defaultTimeout() time.Duration {
	if v := strings.TrimSpace(os.Getenv("MC_TRANSFER_TIMEOUT")); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 {
			return time.Duration(f * float64(time.Second))
		}
	}
	return 30 * time.Second
}
