package master

import (
	"flag"
	"testing"
)

// The eviction watermark defaults to upstream's 0.90 (DEFAULT_EVICTION_HIGH_WATERMARK_RATIO):
// with 0.95 a promotion right after hits on a nearly full segment found no room.
func TestEvictionHighWatermarkDefault(t *testing.T) {
	c := DefaultConfig()
	fs := flag.NewFlagSet("master", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if c.EvictionHighWatermarkRatio != 0.90 {
		t.Fatalf("--eviction_high_watermark_ratio defaults to %v, want 0.90", c.EvictionHighWatermarkRatio)
	}
	if f := fs.Lookup("eviction_high_watermark_ratio"); f == nil || f.DefValue != "0.9" {
		t.Fatalf("flag default %v, want 0.9", f)
	}
}
