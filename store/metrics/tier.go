package metrics

import "github.com/prometheus/client_golang/prometheus"

// TierStats are the storage-tier figures of a Snapshot (all zero without --root_fs_dir).
type TierStats struct {
	DiskOnly          int    // objects whose only copy is a G3 file
	Moving            int    // moves between tiers in progress
	Offloaded         uint64 // objects written to G3
	OffloadFailures   uint64 // moves to G3 that failed, were cancelled or timed out
	DFSRefused        uint64 // moves refused because the G3 tier was full (dfs_full_policy=refuse)
	DFSEvictedObjects uint64 // G3 objects dropped to make room (dfs_full_policy=evict_oldest)
	DiskReads         uint64 // gets answered from a G3 file (no memory copy)
	Promotions        uint64 // objects copied back into memory after disk hits
	LocalDiskUsed     uint64 // bytes on clients' local disks (SSD offload)
	LocalDiskEvicted  uint64 // local-disk copies dropped to keep a client's disk within its quota
	LocalDiskRefused  uint64 // moves to a local disk refused: quota reached, no disk eviction
}

var (
	descTierObjects = prometheus.NewDesc("mooncake_master_tier_objects", "Objects by where their only/hottest copy lives: disk_only (G3 file only), moving (a move between tiers in progress).", []string{"state"}, nil)
	descTierMoves   = prometheus.NewDesc("mooncake_master_tier_moves_total", "Tier moves by result: offloaded (written to G3), offload_failed, dfs_refused (G3 full, object kept in memory), dfs_evicted (G3 object dropped, oldest first), promoted (copied back to memory), local_disk_evicted (a client's local-disk copy dropped to stay within its quota, oldest first), local_disk_refused (a move to a full local disk refused).", []string{"result"}, nil)
	descTierReads   = prometheus.NewDesc("mooncake_master_disk_reads_total", "Gets of objects that had no memory copy (served from the G3 tier).", nil, nil)
	descLocalUsed   = prometheus.NewDesc("mooncake_master_local_disk_used_bytes", "Bytes of objects on clients' local disks (SSD offload), all clients together.", nil, nil)
)

func collectTier(ch chan<- prometheus.Metric, t TierStats) {
	ch <- prometheus.MustNewConstMetric(descTierObjects, prometheus.GaugeValue, float64(t.DiskOnly), "disk_only")
	ch <- prometheus.MustNewConstMetric(descTierObjects, prometheus.GaugeValue, float64(t.Moving), "moving")
	for _, m := range []struct {
		r string
		v uint64
	}{{"offloaded", t.Offloaded}, {"offload_failed", t.OffloadFailures}, {"dfs_refused", t.DFSRefused},
		{"dfs_evicted", t.DFSEvictedObjects}, {"promoted", t.Promotions}, {"local_disk_evicted", t.LocalDiskEvicted},
		{"local_disk_refused", t.LocalDiskRefused}} {
		ch <- prometheus.MustNewConstMetric(descTierMoves, prometheus.CounterValue, float64(m.v), m.r)
	}
	ch <- prometheus.MustNewConstMetric(descTierReads, prometheus.CounterValue, float64(t.DiskReads))
	ch <- prometheus.MustNewConstMetric(descLocalUsed, prometheus.GaugeValue, float64(t.LocalDiskUsed))
}
