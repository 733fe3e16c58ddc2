package client

import (
	"bytes"
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/testsvc"
)

// g3Failover: two HA master processes share --root_fs_dir; objects are moved to G3 under the
// primary, the primary is SIGKILLed, and under the new leader every object — the ones in G3
// included — reads back byte for byte, and new moves to G3 still work.
func g3Failover(t *testing.T, bins [2]string) {
	eps := "etcd://" + testsvc.StartEtcd(t)
	root := t.TempDir()
	flags := []string{"--root_fs_dir=" + root, "--eviction_high_watermark_ratio=0.8", "--eviction_ratio=0.1", "--default_kv_lease_ttl=200"}
	a := startHAMaster(t, bins[0], eps, "g3ha", haLeaseTTL, flags...)
	a.waitServing(t, 20*time.Second)
	b := startHAMaster(t, bins[0], eps, "g3ha", haLeaseTTL, flags...)
	holder := newHAClient(t, eps, "g3ha", 8<<20)
	reader := newHAClient(t, eps, "g3ha", 0)
	if holder.RootFSDir() != root {
		t.Fatalf("client learnt G3 directory %q, want %q", holder.RootFSDir(), root)
	}
	ctx := context.Background()
	const n, size = 96, 256 << 10 // 24 MiB against 8 MiB of memory
	for i := range n {
		if err := reader.PutValue(ctx, fmt.Sprintf("h%03d", i), tierValue(i, size), PutOptions{}); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	inG3 := 0
	for i := range n {
		g, _, err := reader.replicas(ctx, fmt.Sprintf("h%03d", i))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := diskOnly(g.Replicas); ok {
			inG3++
		}
	}
	if inG3 < n/2 {
		t.Fatalf("only %d of %d objects in G3 before the failover", inG3, n)
	}
	a.p.cmd.Process.Signal(syscall.SIGKILL)
	b.waitServing(t, 30*time.Second)
	for i := range n {
		got, err := reader.GetValue(ctx, fmt.Sprintf("h%03d", i))
		if err != nil || !bytes.Equal(got, tierValue(i, size)) {
			t.Fatalf("get h%03d after the failover: %v", i, err)
		}
	}
	// The new leader keeps moving objects (it knows the file generations in use).
	for i := n; i < n+32; i++ {
		if err := reader.PutValue(ctx, fmt.Sprintf("h%03d", i), tierValue(i, size), PutOptions{}); err != nil {
			t.Fatalf("put %d after the failover: %v", i, err)
		}
	}
	for i := range n + 32 {
		got, err := reader.GetValue(ctx, fmt.Sprintf("h%03d", i))
		if err != nil || !bytes.Equal(got, tierValue(i, size)) {
			t.Fatalf("get h%03d: %v", i, err)
		}
	}
	t.Logf("%d of %d objects in G3 before the primary was killed; all %d readable under the new leader", inG3, n, n+32)
}
