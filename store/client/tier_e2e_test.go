package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/store/api"
)

// The G3 tier end to end: a mooncake_master process with --root_fs_dir on a temporary
// directory, two mooncake_client processes contributing the memory, and the test as a third,
// pure client.

type tierCluster struct {
	t         *testing.T
	root      string
	master    *proc
	addr      string
	metrics   string
	clients   []*proc
	clientBin string
	me        *Client
}

func startTierCluster(t *testing.T, bins [2]string, segment string, masterFlags ...string) *tierCluster {
	t.Helper()
	masterBin, clientBin := bins[0], bins[1]
	tc := &tierCluster{t: t, root: t.TempDir(), clientBin: clientBin}
	args := append([]string{"--rpc_port=0", "--metrics_port=0", "--rpc_address=127.0.0.1", "--client_ttl=2",
		"--enable_metric_reporting=false", "--root_fs_dir=" + tc.root, "--eviction_high_watermark_ratio=0.8",
		"--eviction_ratio=0.1", "--default_kv_lease_ttl=200"}, masterFlags...)
	p, m := startProc(t, masterReady, masterBin, args...)
	tc.master, tc.addr, tc.metrics = p, "127.0.0.1:"+m[1], "http://127.0.0.1:"+m[2]
	for range 2 {
		c, _ := startProc(t, regexp.MustCompile(`MOONCAKE_CLIENT_READY segment=(\S+)`), clientBin,
			"--master_server_address="+tc.addr, "--host=127.0.0.1", "--port=0", "--global_segment_size="+segment, "--local_buffer_size=4MB")
		tc.clients = append(tc.clients, c)
	}
	ctx := context.Background()
	eng, err := engine.New(ctx, engine.Config{LocalServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	tc.me, err = NewWithEngine(ctx, eng, Config{MasterServerAddress: tc.addr, LocalBufferSize: 4 << 20, RPCTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.me.Close() })
	if tc.me.RootFSDir() != tc.root {
		t.Fatalf("client learnt G3 directory %q, want %q", tc.me.RootFSDir(), tc.root)
	}
	return tc
}

func (tc *tierCluster) metric(name string) float64 {
	tc.t.Helper()
	resp, err := http.Get(tc.metrics + "/metrics")
	if err != nil {
		tc.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, name+" ") {
			v, _ := strconv.ParseFloat(strings.TrimSpace(line[len(name):]), 64)
			return v
		}
	}
	tc.t.Fatalf("/metrics lacks %s", name)
	return 0
}

// replicas returns where key lives now (this grants a short lease).
func (tc *tierCluster) replicas(key string) []api.Replica {
	tc.t.Helper()
	g, _, err := tc.me.replicas(context.Background(), key)
	if err != nil {
		tc.t.Fatalf("replicas of %s: %v", key, err)
	}
	return g.Replicas
}

func diskOnly(reps []api.Replica) (api.Replica, bool) {
	if len(reps) == 1 && reps[0].IsDisk() {
		return reps[0], true
	}
	return api.Replica{}, false
}

func tierValue(i, size int) []byte {
	b := make([]byte, size)
	r := rand.New(rand.NewPCG(uint64(i), 7))
	for j := 0; j < size; j += 8 {
		v := r.Uint64()
		for k := 0; k < 8 && j+k < size; k++ {
			b[j+k] = byte(v >> (8 * k))
		}
	}
	return b
}

// TestG3 runs the G3 scenarios on one build of the binaries.
func TestG3(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	m, c := buildBinaries(t)
	bins := [2]string{m, c}
	t.Run("WorkingSetLargerThanMemory", func(t *testing.T) { g3WorkingSetLargerThanMemory(t, bins) })
	t.Run("CapacityExhausted", func(t *testing.T) { g3CapacityExhausted(t, bins) })
	t.Run("ClientKilledDuringOffload", func(t *testing.T) { g3ClientKilledDuringOffload(t, bins) })
	t.Run("MasterFailover", func(t *testing.T) { g3Failover(t, bins) })
	t.Run("PromotionOnHit", func(t *testing.T) { g3Promotion(t, bins) })
	t.Run("BelowWatermarkStaysInMemory", func(t *testing.T) { g3BelowWatermark(t, bins) })
}

// g3WorkingSetLargerThanMemory: a working set 8x the memory segments, written by four
// concurrent writers while two readers read back what is written; afterwards every key reads
// back byte for byte. Then a corrupt file, a deleted file and a removed key.
func g3WorkingSetLargerThanMemory(t *testing.T, bins [2]string) {
	tc := startTierCluster(t, bins, "8MB")
	ctx := context.Background()
	const n, size = 512, 256 << 10 // 128 MiB against 16 MiB of memory
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	written := make(chan int, n)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				if err := tc.me.PutValue(ctx, fmt.Sprintf("k%04d", i), tierValue(i, size), PutOptions{}); err != nil {
					errs <- fmt.Errorf("put %d: %w", i, err)
					return
				}
				written <- i
			}
		}()
	}
	done := make(chan struct{})
	var rwg sync.WaitGroup
	reads := 0
	var readMu sync.Mutex
	for range 2 {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			for {
				select {
				case i := <-written:
					got, err := tc.me.GetValue(ctx, fmt.Sprintf("k%04d", i))
					if err != nil || !bytes.Equal(got, tierValue(i, size)) {
						errs <- fmt.Errorf("concurrent get %d: %v (equal=%v)", i, err, bytes.Equal(got, tierValue(i, size)))
						return
					}
					readMu.Lock()
					reads++
					readMu.Unlock()
				case <-done:
					return
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	rwg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	lost := 0
	onDisk := 0
	for i := range n {
		got, err := tc.me.GetValue(ctx, fmt.Sprintf("k%04d", i))
		if err != nil || !bytes.Equal(got, tierValue(i, size)) {
			lost++
			t.Errorf("get k%04d: %v", i, err)
		}
	}
	if st := tc.me.TierStats(); st.DiskReads == 0 {
		t.Errorf("no get was served from G3: %+v", st)
	} else {
		onDisk = int(st.DiskReads)
	}
	used := tc.metric("mooncake_master_dfs_segment_used_bytes")
	t.Logf("%d keys of %d KiB, %d concurrent reads, 0 lost=%v, %d reads from G3, G3 holds %.0f MiB", n, size>>10, reads, lost == 0, onDisk, used/(1<<20))
	if used < float64(n-64)*size {
		t.Errorf("G3 holds %.0f bytes, want most of the %d-byte working set", used, n*size)
	}

	// Damage: three keys that live only in G3, in three different files; the first (to be
	// corrupted) in a file that holds other G3-only objects too, which the batch below reads
	// beside it. Which objects share a file, and which stay in memory, depends on timing.
	var files []string              // files of G3-only objects, in key order
	inFile := map[string][]string{} // file -> its G3-only keys
	for i := range n {
		key := fmt.Sprintf("k%04d", i)
		if r, ok := diskOnly(tc.replicas(key)); ok {
			if len(inFile[r.Path]) == 0 {
				files = append(files, r.Path)
			}
			inFile[r.Path] = append(inFile[r.Path], key)
		}
	}
	shares := slices.IndexFunc(files, func(f string) bool { return len(inFile[f]) > 1 })
	if len(files) < 3 || shares < 0 {
		t.Fatalf("G3-only objects in %d files, %d of them shared by several objects: want 3 files, one shared", len(files), shares+1)
	}
	files[0], files[shares] = files[shares], files[0]
	t.Logf("G3-only objects in %d files; the one to corrupt holds %d", len(files), len(inFile[files[0]]))
	var victims []string
	var reps []api.Replica
	for _, f := range files[:3] {
		r, _ := diskOnly(tc.replicas(inFile[f][0]))
		victims = append(victims, inFile[f][0])
		reps = append(reps, r)
	}
	// A corrupt payload byte.
	f, err := os.OpenFile(filepath.Join(tc.root, reps[0].Path), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0xde, 0xad, 0xbe, 0xef}, reps[0].Offset+4096+1000)
	f.Close()
	if _, err := tc.me.GetValue(ctx, victims[0]); api.CodeOf(err) != api.CHECKSUM_MISMATCH {
		t.Errorf("get of a corrupt file: %v, want CHECKSUM_MISMATCH", err)
	}
	// A deleted file.
	os.Remove(filepath.Join(tc.root, reps[1].Path))
	if _, err := tc.me.GetValue(ctx, victims[1]); api.CodeOf(err) != api.FILE_NOT_FOUND {
		t.Errorf("get of a deleted file: %v, want FILE_NOT_FOUND", err)
	}
	// A batch get of every object of the two damaged files (read with one open and one preadv
	// per run of a file): the corrupt object and those of the deleted file fail, the others
	// read byte for byte.
	var batch []string
	var want []int
	for i := range n {
		key := fmt.Sprintf("k%04d", i)
		if r, ok := diskOnly(tc.replicas(key)); ok && (r.Path == reps[0].Path || r.Path == reps[1].Path) {
			batch, want = append(batch, key), append(want, i)
		}
	}
	vals, berrs := getValues(ctx, tc.me, batch)
	shared := 0
	for j, key := range batch {
		switch r, _ := diskOnly(tc.replicas(key)); {
		case key == victims[0]:
			if api.CodeOf(berrs[j]) != api.CHECKSUM_MISMATCH {
				t.Errorf("batch get of the corrupt object: %v, want CHECKSUM_MISMATCH", berrs[j])
			}
		case r.Path == reps[1].Path:
			if api.CodeOf(berrs[j]) != api.FILE_NOT_FOUND {
				t.Errorf("batch get of %s in the deleted file: %v, want FILE_NOT_FOUND", key, berrs[j])
			}
		default:
			shared++
			if berrs[j] != nil || !bytes.Equal(vals[j], tierValue(want[j], size)) {
				t.Errorf("batch get of %s beside the corrupt one: %v", key, berrs[j])
			}
		}
	}
	if shared == 0 {
		t.Errorf("the corrupt object's file holds no other object (%d in the batch)", len(batch))
	}
	// Removing every object stored in a file deletes the file (small objects share bucket files).
	for i := range n {
		key := fmt.Sprintf("k%04d", i)
		if r, ok := diskOnly(tc.replicas(key)); ok && r.Path == reps[2].Path {
			if err := tc.me.Remove(ctx, []string{key}, true)[0]; err != nil {
				t.Fatal(err)
			}
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(tc.root, reps[2].Path)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("file %s of a removed key still there", reps[2].Path)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if tmp, _ := filepath.Glob(filepath.Join(tc.root, "*", "*", "*.tmp")); len(tmp) != 0 {
		t.Errorf("temporary files left behind: %v", tmp)
	}
}

// g3CapacityExhausted: with --global_file_segment_size and the refuse policy, moves stop
// when G3 is full, puts then fail with NO_AVAILABLE_HANDLE, the refusals show in the metrics,
// and everything stored stays readable.
func g3CapacityExhausted(t *testing.T, bins [2]string) {
	tc := startTierCluster(t, bins, "4MB", "--global_file_segment_size=4MB")
	ctx := context.Background()
	const size = 256 << 10
	stored := 0
	var perr error
	for i := range 64 {
		if perr = tc.me.PutValue(ctx, fmt.Sprintf("c%03d", i), tierValue(i, size), PutOptions{}); perr != nil {
			break
		}
		stored++
	}
	if api.CodeOf(perr) != api.NO_AVAILABLE_HANDLE || !strings.Contains(perr.Error(), "G3 tier is full") {
		t.Fatalf("after %d puts: %v, want NO_AVAILABLE_HANDLE naming the full G3 tier", stored, perr)
	}
	if used, c := tc.metric("mooncake_master_dfs_segment_used_bytes"), tc.metric("mooncake_master_dfs_segment_capacity_bytes"); used > c || c != 4<<20 {
		t.Fatalf("G3 used %v of %v", used, c)
	}
	if v := tc.metric(`mooncake_master_tier_moves_total{result="dfs_refused"}`); v == 0 {
		t.Errorf("no refusal counted")
	}
	for i := range stored {
		got, err := tc.me.GetValue(ctx, fmt.Sprintf("c%03d", i))
		if err != nil || !bytes.Equal(got, tierValue(i, size)) {
			t.Fatalf("get c%03d: %v", i, err)
		}
	}
	t.Logf("%d puts of %d KiB stored (16 in G3, the rest in memory) before: %v", stored, size>>10, perr)
}

// g3ClientKilledDuringOffload: a client process is SIGKILLed while objects move from its
// memory to G3. Every key then reads back exactly or is cleanly gone (its only copy was in the
// dead client's memory); the keys already in G3 before the kill all read back.
func g3ClientKilledDuringOffload(t *testing.T, bins [2]string) {
	tc := startTierCluster(t, bins, "8MB")
	ctx := context.Background()
	const n, size = 160, 256 << 10
	for i := range n {
		if err := tc.me.PutValue(ctx, fmt.Sprintf("x%03d", i), tierValue(i, size), PutOptions{}); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
	}
	safe := map[string]bool{}
	for i := range n {
		key := fmt.Sprintf("x%03d", i)
		if _, ok := diskOnly(tc.replicas(key)); ok {
			safe[key] = true
		}
	}
	// Keep moves going and kill a client in the middle of them.
	go func() {
		for i := n; i < n+40; i++ {
			tc.me.PutValue(ctx, fmt.Sprintf("x%03d", i), tierValue(i, size), PutOptions{})
		}
	}()
	time.Sleep(150 * time.Millisecond)
	tc.clients[0].cmd.Process.Kill()
	time.Sleep(3 * time.Second) // client_ttl 2 s: its segment is dropped
	lost := 0
	for i := range n + 40 {
		key := fmt.Sprintf("x%03d", i)
		got, err := tc.me.GetValue(ctx, key)
		switch {
		case err == nil && bytes.Equal(got, tierValue(i, size)):
		case err == nil:
			t.Fatalf("get %s: wrong bytes", key)
		case api.CodeOf(err) == api.OBJECT_NOT_FOUND && !safe[key]:
			lost++
		default:
			t.Fatalf("get %s: %v (in G3 before the kill: %v)", key, err, safe[key])
		}
	}
	if len(safe) < n/2 {
		t.Errorf("only %d of %d keys were in G3 before the kill", len(safe), n)
	}
	t.Logf("%d keys in G3 before the kill all readable; %d keys whose only copy was in the killed client's memory gone", len(safe), lost)
}
