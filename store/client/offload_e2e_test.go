package client

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/internal/memview"
	"github.com/mooncake-go/mooncake/internal/testsvc"
	"github.com/mooncake-go/mooncake/store/api"
)

// SSD offload end to end: a mooncake_master process with --enable_offload, two
// mooncake_client processes with --enable_offload (each with its own local offload
// directory), and the test as a pure client that reads the offloaded objects through the
// holders' read servers.

type offloadCluster struct {
	t       *testing.T
	master  *proc
	addr    string
	clients []*proc
	dirs    []string
	me      *Client
}

func startOffloadCluster(t *testing.T, bins [2]string, segment string, masterFlags ...string) *offloadCluster {
	t.Helper()
	oc := &offloadCluster{t: t}
	args := append([]string{"--rpc_port=0", "--metrics_port=0", "--rpc_address=127.0.0.1", "--client_ttl=2",
		"--enable_metric_reporting=false", "--enable_offload", "--eviction_high_watermark_ratio=0.8",
		"--eviction_ratio=0.1", "--default_kv_lease_ttl=200"}, masterFlags...)
	p, m := startProc(t, masterReady, bins[0], args...)
	oc.master, oc.addr = p, "127.0.0.1:"+m[1]
	for i := range 2 {
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("ssd%d", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Setenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", dir)
		t.Setenv("MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT", "16")
		c, _ := startProc(t, regexp.MustCompile(`MOONCAKE_CLIENT_READY segment=(\S+)`), bins[1],
			"--master_server_address="+oc.addr, "--host=127.0.0.1", "--port=0", "--global_segment_size="+segment,
			"--local_buffer_size=4MB", "--enable_offload")
		oc.clients = append(oc.clients, c)
		oc.dirs = append(oc.dirs, dir)
	}
	ctx := context.Background()
	eng, err := engine.New(ctx, engine.Config{LocalServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	oc.me, err = NewWithEngine(ctx, eng, Config{MasterServerAddress: oc.addr, LocalBufferSize: 4 << 20, RPCTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { oc.me.Close() })
	return oc
}

// kinds counts the replica kinds of key (without a lease).
func (oc *offloadCluster) kinds(key string) (mem, local int, rep api.Replica) {
	oc.t.Helper()
	reps, err := oc.me.ReplicaDesc(context.Background(), key)
	if err != nil {
		oc.t.Fatalf("replica description of %s: %v", key, err)
	}
	for _, r := range reps {
		switch r.TierName() {
		case api.KindMemory:
			mem++
		case api.KindLocalDisk:
			local++
			rep = r
		default:
			oc.t.Fatalf("replica of kind %q without a G3 tier: %+v", r.Kind, r)
		}
	}
	return mem, local, rep
}

// TestSSDOffload runs the SSD offload scenarios on one build of the binaries.
func TestSSDOffload(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	m, c := buildBinaries(t)
	bins := [2]string{m, c}
	t.Run("WorkingSetLargerThanMemory", func(t *testing.T) { offloadWorkingSet(t, bins) })
	t.Run("CopyAfterPut", func(t *testing.T) { offloadCopyAfterPut(t, bins) })
	t.Run("HolderKilled", func(t *testing.T) { offloadHolderKilled(t, bins) })
	t.Run("MasterFailover", func(t *testing.T) { offloadFailover(t, bins) })
}

// offloadWorkingSet: a working set 4x the memory segments with --offload_on_evict: every key
// reads back byte for byte, the disk-only ones through the holders' read servers; small
// objects share bucket files; repeated hits promote an object back into memory; removing keys
// removes their files.
func offloadWorkingSet(t *testing.T, bins [2]string) {
	oc := startOffloadCluster(t, bins, "8MB", "--offload_on_evict", "--promotion_on_hit", "--promotion_admission_threshold=2")
	ctx := context.Background()
	const n, size = 256, 256 << 10 // 64 MiB against 16 MiB of memory
	for i := range n {
		if err := oc.me.PutValue(ctx, fmt.Sprintf("o%03d", i), tierValue(i, size), PutOptions{}); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	localOnly, key, idx, key2, idx2 := 0, "", -1, "", -1
	for i := range n {
		k := fmt.Sprintf("o%03d", i)
		mem, local, r := oc.kinds(k)
		if mem == 0 && local == 1 {
			localOnly++
			if key != "" && key2 == "" && i < n/2 {
				key2, idx2 = k, i
			}
			if key == "" {
				key, idx = k, i
				if r.Endpoint == "" || r.SegmentName == "" {
					t.Fatalf("local-disk replica without its holder: %+v", r)
				}
			}
		}
	}
	if localOnly < n/2 {
		t.Fatalf("only %d of %d objects live only on local disk", localOnly, n)
	}
	for i := range n {
		got, err := oc.me.GetValue(ctx, fmt.Sprintf("o%03d", i))
		if err != nil || !bytes.Equal(got, tierValue(i, size)) {
			t.Fatalf("get o%03d: %v", i, err)
		}
	}
	if got := oc.me.OffloadRPCReadCount(); got < uint64(localOnly) {
		t.Fatalf("offload RPC reads %d, want >= %d (the local-only objects)", got, localOnly)
	}
	// Small objects are packed: far fewer files than objects.
	files := 0
	for _, d := range oc.dirs {
		filepath.Walk(d, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() && strings.HasSuffix(p, ".mcbkt") {
				files++
			}
			return nil
		})
	}
	if files == 0 || files >= localOnly {
		t.Fatalf("%d bucket files for %d objects on local disk (bucket keys limit 16)", files, localOnly)
	}
	// Promotion: make room below the watermark, then hit a disk-only object.
	for i := n / 2; i < n; i++ {
		if err := oc.me.Remove(ctx, []string{fmt.Sprintf("o%03d", i)}, true)[0]; err != nil {
			t.Fatal(err)
		}
	}
	if idx >= n/2 {
		t.Fatalf("first local-only object %s is in the removed half", key)
	}
	for range 2 {
		got, err := oc.me.GetValue(ctx, key)
		if err != nil || !bytes.Equal(got, tierValue(idx, size)) {
			t.Fatalf("get %s: %v", key, err)
		}
	}
	if mem, local, _ := oc.kinds(key); mem != 1 || local != 1 {
		t.Fatalf("after two disk hits %s has %d memory and %d local-disk replicas, want 1 and 1", key, mem, local)
	}
	before := oc.me.OffloadRPCReadCount()
	got, err := oc.me.GetValue(ctx, key)
	if err != nil || !bytes.Equal(got, tierValue(idx, size)) {
		t.Fatalf("get %s after promotion: %v", key, err)
	}
	if after := oc.me.OffloadRPCReadCount(); after != before {
		t.Fatalf("a promoted object was read from disk again (%d -> %d RPC reads)", before, after)
	}
	if st := oc.me.TierStats(); st.Promoted != 1 {
		t.Fatalf("promoted %d objects, want 1", st.Promoted)
	}
	// Ranged and multi-buffer reads of another local-only object: its local-disk copy is a
	// file, not memory (ranged reads refuse it, a staged snapshot read and get_into_buffers read
	// it), and the promotions the master offers the ranged reads are given back, so the multi-
	// buffer read (the fourth disk hit) promotes it.
	if key2 == "" {
		t.Fatal("no second local-only object in the first half")
	}
	key, want := key2, tierValue(idx2, size)
	out := bytes.Repeat([]byte{0}, 4096) // on the heap: a registered address must not move with a stack
	if err := oc.me.RegisterBuffer(memview.Addr(out), uint64(len(out))); err != nil {
		t.Fatal(err)
	}
	if _, errs := oc.me.GetRanges(ctx, key, []Range{{Src: 10, Dst: memview.Addr(out), Size: 100}}); !api.Is(errs[0], api.REPLICA_NOT_FOUND) {
		t.Fatalf("ranged read of a local-disk-only object: %v, want REPLICA_NOT_FOUND", errs[0])
	}
	snap := oc.me.PrepareSnapshot(ctx, []string{key})
	gotR, errs := snap.GetRanges(ctx, []RangeGroup{{Key: key, Frags: []Range{{Src: size - 100, Dst: memview.Addr(out) + 50, Size: 100}}}}, true)
	if errs[0][0] != nil || gotR[0][0] != 100 || !bytes.Equal(out[50:150], want[size-100:]) {
		t.Fatalf("staged snapshot read of a local-disk-only object: %v", errs[0][0])
	}
	if _, errs := oc.me.GetRanges(ctx, key, []Range{{Src: 10, Dst: memview.Addr(out), Size: 100}}); !api.Is(errs[0], api.REPLICA_NOT_FOUND) {
		t.Fatalf("second ranged read of a local-disk-only object: %v, want REPLICA_NOT_FOUND", errs[0])
	}
	whole := [][]byte{make([]byte, size/2), make([]byte, size-size/2)}
	if n, errs := oc.me.Get(ctx, []Item{{Key: key, Parts: whole}}, GetOptions{}); errs[0] != nil ||
		n[0] != size || !bytes.Equal(append(whole[0], whole[1]...), want) {
		t.Fatalf("get_into_buffers of a local-disk-only object: %d %v", n[0], errs[0])
	}
	oc.me.UnregisterBuffer(memview.Addr(out))
	if mem, local, _ := oc.kinds(key); mem != 1 || local != 1 {
		t.Fatalf("after four disk hits (two ranged reads, a snapshot, a multi-buffer read) %s has %d memory and %d local-disk replicas, want 1 and 1", key, mem, local)
	}
}

// offloadHolderKilled: a client holding local-disk replicas is SIGKILLed; gets of its objects
// fail with a clean code (never wrong bytes), the others read back, and once the master
// expires it its objects are gone (OBJECT_NOT_FOUND) and the survivor sweeps its directory.
func offloadHolderKilled(t *testing.T, bins [2]string) {
	oc := startOffloadCluster(t, bins, "8MB", "--offload_on_evict")
	ctx := context.Background()
	const n, size = 160, 256 << 10
	for i := range n {
		if err := oc.me.PutValue(ctx, fmt.Sprintf("x%03d", i), tierValue(i, size), PutOptions{}); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	victimDir := oc.dirs[0]
	sub, _ := os.ReadDir(victimDir)
	if len(sub) != 1 {
		t.Fatalf("offload directory %s holds %d entries, want the client's own", victimDir, len(sub))
	}
	oc.clients[0].cmd.Process.Signal(syscall.SIGKILL)
	oc.clients[0].cmd.Wait()
	ok, failed := 0, 0
	for i := range n {
		got, err := oc.me.GetValue(ctx, fmt.Sprintf("x%03d", i))
		switch {
		case err == nil && bytes.Equal(got, tierValue(i, size)):
			ok++
		case err == nil:
			t.Fatalf("get x%03d returned wrong bytes after the holder died", i)
		default:
			switch api.CodeOf(err) {
			case api.RPC_FAIL, api.TRANSFER_FAIL, api.OBJECT_NOT_FOUND, api.REPLICA_NOT_FOUND:
				failed++
			default:
				t.Fatalf("get x%03d: unexpected error code %v: %v", i, api.CodeOf(err), err)
			}
		}
	}
	if failed == 0 || ok == 0 {
		t.Fatalf("after killing one holder: %d ok, %d failed; want some of each", ok, failed)
	}
	// After client_ttl (2 s) the master drops the dead client's replicas: every key then reads
	// back right or is OBJECT_NOT_FOUND (what lived only with the dead client is gone).
	deadline := time.Now().Add(30 * time.Second)
	for {
		notFound, good, other := 0, 0, 0
		for i := range n {
			got, err := oc.me.GetValue(ctx, fmt.Sprintf("x%03d", i))
			switch {
			case err == nil && !bytes.Equal(got, tierValue(i, size)):
				t.Fatalf("get x%03d returned wrong bytes", i)
			case err == nil:
				good++
			case api.Is(err, api.OBJECT_NOT_FOUND):
				notFound++
			default:
				other++
			}
		}
		if other == 0 && notFound >= failed && good+notFound == n {
			t.Logf("after expiry: %d keys read back, %d gone (OBJECT_NOT_FOUND)", good, notFound)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the kill: %d ok, %d OBJECT_NOT_FOUND, %d other errors", good, notFound, other)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// A new client on the dead one's directory sweeps the orphaned files at start.
	eng, err := engine.New(ctx, engine.Config{LocalServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	c, err := NewWithEngine(ctx, eng, Config{MasterServerAddress: oc.addr, GlobalSegmentSize: 4 << 20, LocalBufferSize: 4 << 20,
		Offload: OffloadConfig{Enable: true, Dir: victimDir}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sub, _ = os.ReadDir(victimDir)
	if len(sub) != 1 || sub[0].Name() != c.ID() {
		t.Fatalf("after a new client started, %s holds %v, want only %s", victimDir, sub, c.ID())
	}
	t.Logf("holder killed: %d of %d keys still readable, %d failed cleanly", ok, n, failed)
}

// offloadFailover: two HA masters with --enable_offload; objects move to an in-process
// client's local disk under the primary, the primary is SIGKILLed, and under the new leader
// every object reads back byte for byte and new moves to local disk still work.
func offloadFailover(t *testing.T, bins [2]string) {
	eps := "etcd://" + testsvc.StartEtcd(t)
	flags := []string{"--enable_offload", "--offload_on_evict", "--eviction_high_watermark_ratio=0.8", "--eviction_ratio=0.1", "--default_kv_lease_ttl=200"}
	a := startHAMaster(t, bins[0], eps, "ssdha", haLeaseTTL, flags...)
	a.waitServing(t, 20*time.Second)
	b := startHAMaster(t, bins[0], eps, "ssdha", haLeaseTTL, flags...)
	ctx := context.Background()
	eng, err := engine.New(ctx, engine.Config{LocalServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	holder, err := NewWithEngine(ctx, eng, Config{MasterServerAddress: eps, ClusterID: "ssdha", GlobalSegmentSize: 8 << 20,
		LocalBufferSize: 4 << 20, RPCTimeout: 30 * time.Second, Offload: OffloadConfig{Enable: true, Dir: t.TempDir()}})
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close(); eng.Close() })
	reader := newHAClient(t, eps, "ssdha", 0)
	const n, size = 96, 256 << 10
	for i := range n {
		if err := reader.PutValue(ctx, fmt.Sprintf("s%03d", i), tierValue(i, size), PutOptions{}); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	// onDisk lists the keys whose one replica is on the holder's local disk.
	onDisk := func() map[string]bool {
		set := map[string]bool{}
		for i := range n {
			key := fmt.Sprintf("s%03d", i)
			reps, err := reader.ReplicaDesc(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if len(reps) == 1 && reps[0].IsLocalDisk() {
				set[key] = true
			}
		}
		return set
	}
	// Moves to disk run in the background after the puts; wait until two looks a second
	// apart agree, so the set compared across the failover is the settled one.
	before := onDisk()
	for deadline := time.Now().Add(20 * time.Second); ; {
		time.Sleep(time.Second)
		again := onDisk()
		if len(again) == len(before) || time.Now().After(deadline) {
			before = again
			break
		}
		before = again
	}
	if len(before) < n/2 {
		t.Fatalf("only %d of %d objects on local disk before the failover", len(before), n)
	}
	a.p.cmd.Process.Signal(syscall.SIGKILL)
	b.waitServing(t, 30*time.Second)
	after := onDisk()
	for key := range before {
		if !after[key] {
			t.Fatalf("%s was on local disk under the old leader but not under the new one (%d on disk now, %d before)", key, len(after), len(before))
		}
	}
	for i := n; i < n+32; i++ {
		if err := reader.PutValue(ctx, fmt.Sprintf("s%03d", i), tierValue(i, size), PutOptions{}); err != nil {
			t.Fatalf("put %d after the failover: %v", i, err)
		}
	}
	for i := range n + 32 {
		got, err := reader.GetValue(ctx, fmt.Sprintf("s%03d", i))
		if err != nil || !bytes.Equal(got, tierValue(i, size)) {
			t.Fatalf("get s%03d after the failover: %v", i, err)
		}
	}
	t.Logf("%d of %d objects on local disk before the primary was killed (%d after); all %d readable under the new leader", len(before), n, len(after), n+32)
}

// offloadCopyAfterPut: --enable_offload without --offload_on_evict copies every object to its
// holder's disk right after its put: objects still in memory have a local-disk replica too,
// and a working set 3x the memory reads back byte for byte.
func offloadCopyAfterPut(t *testing.T, bins [2]string) {
	oc := startOffloadCluster(t, bins, "8MB")
	ctx := context.Background()
	const n, size = 192, 256 << 10
	for i := range n {
		if err := oc.me.PutValue(ctx, fmt.Sprintf("c%03d", i), tierValue(i, size), PutOptions{}); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	both, localOnly := 0, 0
	deadline := time.Now().Add(30 * time.Second)
	for i := n - 8; i < n; i++ { // the last puts: their copies may still be on the way
		for {
			if mem, local, _ := oc.kinds(fmt.Sprintf("c%03d", i)); local == 1 || mem == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for i := range n {
		mem, local, _ := oc.kinds(fmt.Sprintf("c%03d", i))
		switch {
		case mem == 1 && local == 1:
			both++
		case mem == 0 && local == 1:
			localOnly++
		default:
			t.Fatalf("c%03d has %d memory and %d local-disk replicas", i, mem, local)
		}
	}
	if both == 0 || localOnly == 0 {
		t.Fatalf("%d objects in memory and on disk, %d only on disk: want some of each", both, localOnly)
	}
	for i := range n {
		got, err := oc.me.GetValue(ctx, fmt.Sprintf("c%03d", i))
		if err != nil || !bytes.Equal(got, tierValue(i, size)) {
			t.Fatalf("get c%03d: %v", i, err)
		}
	}
}
