package client

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// g3Promotion: with --promotion_on_hit and --promotion_admission_threshold=2, the second get
// of a G3-only object copies it back into memory, and later gets are served from memory.
func g3Promotion(t *testing.T, bins [2]string) {
	tc := startTierCluster(t, bins, "8MB", "--promotion_on_hit", "--promotion_admission_threshold=2")
	ctx := context.Background()
	const n, size = 96, 256 << 10
	for i := range n {
		if err := tc.me.PutValue(ctx, fmt.Sprintf("p%03d", i), tierValue(i, size), PutOptions{}); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	// Make room below the watermark so that a promotion is admitted.
	for i := n / 2; i < n; i++ {
		if err := tc.me.Remove(ctx, []string{fmt.Sprintf("p%03d", i)}, true)[0]; err != nil {
			t.Fatal(err)
		}
	}
	key, idx := "", -1
	for i := range n / 2 {
		if _, ok := diskOnly(tc.replicas(fmt.Sprintf("p%03d", i))); ok {
			key, idx = fmt.Sprintf("p%03d", i), i
			break
		}
	}
	if key == "" {
		t.Fatal("no G3-only object")
	}
	// tc.replicas counted one disk hit; this get is the second and promotes.
	before := tc.me.TierStats()
	timed := func() time.Duration {
		t0 := time.Now()
		got, err := tc.me.GetValue(ctx, key)
		d := time.Since(t0)
		if err != nil || !bytes.Equal(got, tierValue(idx, size)) {
			t.Fatalf("get %s: %v", key, err)
		}
		return d
	}
	promoting := timed()
	after := tc.me.TierStats()
	if after.Promoted != before.Promoted+1 || after.DiskReads != before.DiskReads+1 {
		t.Fatalf("tier stats %+v -> %+v, want one disk read and one promotion", before, after)
	}
	reps := tc.replicas(key)
	if len(reps) != 2 || reps[0].IsDisk() || !reps[1].IsDisk() {
		t.Fatalf("replicas after promotion: %+v, want memory then disk", reps)
	}
	hit := timed()
	if st := tc.me.TierStats(); st.DiskReads != after.DiskReads {
		t.Fatalf("a promoted object was read from disk again: %+v", st)
	}
	if v := tc.metric(`mooncake_master_tier_moves_total{result="promoted"}`); v != 1 {
		t.Fatalf("promoted metric %v, want 1", v)
	}
	t.Logf("get %s: %v while promoting (disk read + copy to memory), %v once promoted", key, promoting, hit)
}

// g3BelowWatermark: a workload that stays below the high watermark never touches disk.
func g3BelowWatermark(t *testing.T, bins [2]string) {
	tc := startTierCluster(t, bins, "8MB")
	ctx := context.Background()
	const n, size = 40, 256 << 10 // 10 MiB of 16 MiB, watermark 0.8
	for round := range 3 {
		for i := range n {
			key := fmt.Sprintf("b%03d", i)
			if round == 0 {
				if err := tc.me.PutValue(ctx, key, tierValue(i, size), PutOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			got, err := tc.me.GetValue(ctx, key)
			if err != nil || !bytes.Equal(got, tierValue(i, size)) {
				t.Fatalf("get %s: %v", key, err)
			}
		}
	}
	time.Sleep(300 * time.Millisecond) // a few master ticks
	if v := tc.metric("mooncake_master_dfs_segment_used_bytes"); v != 0 {
		t.Errorf("G3 holds %v bytes", v)
	}
	if v := tc.metric(`mooncake_master_tier_moves_total{result="offloaded"}`); v != 0 {
		t.Errorf("%v objects moved to G3", v)
	}
	if st := tc.me.TierStats(); st.DiskReads != 0 {
		t.Errorf("gets served from disk: %+v", st)
	}
	entries, _ := os.ReadDir(tc.root)
	if len(entries) != 0 {
		t.Errorf("files under the G3 directory: %v", entries[0].Name())
	}
}
