package config

import (
	"time"

	"github.com/mooncake-go/mooncake/store/client"
)

// SSD offload (client-local disk, setup(enable_ssd_offload=True)): read when a store client
// with SSD offload is set up. docs/multi-tier.md says what each changes.
var (
	OffloadFileStoragePath = knob("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", String, "/data/file_storage", StoreSetup, "SSD offload: existing absolute directory on this host's local disk where the client keeps offloaded objects")
	OffloadBucketKeysLimit = knob("MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT", Int, "500", StoreSetup, "SSD offload: most objects packed into one bucket file")
	OffloadBucketSizeLimit = knob("MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES", Int, "268435456", StoreSetup, "SSD offload: most bytes of one bucket file")
	OffloadTotalSizeLimit  = knob("MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES", Int, "2199023255552", StoreSetup, "SSD offload: most bytes the offload directory may hold (at most its filesystem's size); the master keeps the client's local copies within 90% of it, or --quota_bytes")
	OffloadHeartbeat       = knob("MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS", Int, "10", StoreSetup, "SSD offload: seconds between the client's offload heartbeats (task poll bound, sweep of dead clients' directories)")
)

// StoreOffload fills the SSD-offload settings a setup left unset from the MOONCAKE_OFFLOAD_*
// knobs (path is setup's own ssd_offload_path, "" for the knob).
func StoreOffload(path string) client.OffloadConfig {
	cfg := client.OffloadConfig{Enable: true, Dir: or(path, OffloadFileStoragePath.Trimmed())}
	if cfg.Dir == "" {
		cfg.Dir = OffloadFileStoragePath.Default()
	}
	cfg.BucketKeys = OffloadBucketKeysLimit.Positive()
	if n, ok := OffloadBucketSizeLimit.Int(); ok && n > 0 {
		cfg.BucketBytes = uint64(n)
	}
	if n, ok := OffloadTotalSizeLimit.Int(); ok && n > 0 {
		cfg.TotalBytes = uint64(n)
	}
	if n, ok := OffloadHeartbeat.Int(); ok && n > 0 {
		cfg.Heartbeat = time.Duration(n) * time.Second
	}
	return cfg
}
