package pg_test

// End-to-end: real processes (this test binary re-executed as ranks), the real transfer engine
// (P2PHANDSHAKE, shm between processes of one host), rendezvous through files.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/collective"
	"github.com/mooncake-go/mooncake/collective/reduce"
	"github.com/mooncake-go/mooncake/config"
	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/p2p"
	"github.com/mooncake-go/mooncake/wire"
)

func TestMain(m *testing.M) {
	if os.Getenv("P2P_E2E_RANK") != "" {
		if prof := os.Getenv("P2P_E2E_CPUPROFILE"); prof != "" { // a profile per rank: PATH.rankN
			f, err := os.Create(prof + ".rank" + os.Getenv("P2P_E2E_RANK"))
			if err == nil {
				pprof.StartCPUProfile(f)
			}
		}
		err := child()
		pprof.StopCPUProfile()
		if err != nil {
			fmt.Fprintf(os.Stderr, "rank %s: %v\n", os.Getenv("P2P_E2E_RANK"), err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fileStore is the test rendezvous: one file per key, written atomically.
type fileStore struct{ dir string }

func (s fileStore) set(key string, v []byte) error {
	tmp := filepath.Join(s.dir, key+".tmp")
	if err := os.WriteFile(tmp, v, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(s.dir, key))
}

func (s fileStore) get(key string, timeout time.Duration) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	for {
		v, err := os.ReadFile(filepath.Join(s.dir, key))
		if err == nil {
			return v, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("key %q: not there after %s", key, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func child() error {
	rank, _ := strconv.Atoi(os.Getenv("P2P_E2E_RANK"))
	n, _ := strconv.Atoi(os.Getenv("P2P_E2E_SIZE"))
	mode := os.Getenv("P2P_E2E_MODE")
	st := fileStore{os.Getenv("P2P_E2E_DIR")}
	// The engine-creation and p2p knobs (MC_FORCE_TCP, MC_P2P_STREAMS, ...) as a library process
	// reads them.
	eng, err := engine.New(context.Background(), config.Engine(engine.Config{LocalServerName: "127.0.0.1", MetadataServer: "P2PHANDSHAKE"}))
	if err != nil {
		return err
	}
	defer eng.Close()
	opts := config.P2P()
	opts.Credits, opts.CellBytes = 4, 64<<10
	if mode == "bench" || mode == "pingpong" {
		opts.Credits, opts.CellBytes = envInt("P2P_E2E_CREDITS", 0), envInt("P2P_E2E_CELL_BYTES", 0) // 0: defaults
	}
	ep, err := p2p.New(p2p.EngineFabric(eng), rank, n, opts)
	if err != nil {
		return err
	}
	defer ep.Close()
	info, _ := json.Marshal(ep.Info())
	if err := st.set(fmt.Sprintf("ep.%d", rank), info); err != nil {
		return err
	}
	for r := 0; r < n; r++ {
		v, err := st.get(fmt.Sprintf("ep.%d", r), 20*time.Second)
		if err != nil {
			return err
		}
		var pi p2p.Info
		if err := json.Unmarshal(v, &pi); err != nil {
			return err
		}
		if err := ep.Connect(pi); err != nil {
			return err
		}
	}
	copts := collective.Options{ChunkBytes: 48 << 10}
	if mode == "bench" {
		copts = collective.Options{}
	}
	g, err := collective.NewGroup(ep, rank, n, 0, copts)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if os.Getenv("P2P_E2E_SHM") == "1" {
		segs := make([]string, n)
		for r := 0; r < n; r++ {
			v, _ := st.get(fmt.Sprintf("ep.%d", r), time.Second)
			var pi p2p.Info
			json.Unmarshal(v, &pi)
			segs[r] = pi.Segment
		}
		sm, _ := p2p.NewSharedMemory(p2p.EngineFabric(eng), segs)
		ok, err := g.EnableSharedMemory(ctx, sm, collective.SharedOptions{ChunkBytes: envInt("P2P_E2E_CHUNK", 0)})
		if err != nil {
			return err
		}
		fmt.Printf("shm %v\n", ok)
		defer g.Close()
	}
	switch mode {
	case "ops":
		err = runOps(ctx, g, ep, rank, n)
		fmt.Printf("transports %v\n", eng.TransportBytes())
	case "dead":
		if err := g.Barrier(ctx); err != nil {
			return err
		}
		if rank == n-1 {
			if os.Getenv("P2P_E2E_SHM") == "1" {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
			os.Exit(0) // dies without a word
		}
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		err = g.AllReduce(c, make([]byte, 4096), reduce.Float32, reduce.Sum)
		if err == nil {
			return errors.New("all_reduce with a dead rank succeeded")
		}
		fmt.Printf("RESULT %v\n", err)
		// Stay alive until every survivor has its own result: a survivor that exited at once
		// would be a second dead peer, and a slower one could rightly blame it instead.
		if err := st.set(fmt.Sprintf("reported-%d", rank), nil); err != nil {
			return err
		}
		for r := 0; r < n-1; r++ {
			if _, err := st.get(fmt.Sprintf("reported-%d", r), 10*time.Second); err != nil {
				return err
			}
		}
		return nil
	case "bench":
		if rank == 0 {
			for _, size := range []int{1 << 20, 64 << 20} {
				a, b := make([]byte, size), make([]byte, size)
				for i := range b {
					b[i] = byte(i) // touch every page: no zero-page reads
				}
				copy(a, b)
				iters := max(3, (256<<20)/size)
				start := time.Now()
				for i := 0; i < iters; i++ {
					copy(a, b)
				}
				d := time.Since(start) / time.Duration(iters)
				fmt.Printf("memcpy     %9d B: %10v/op %.2f GB/s\n", size, d, float64(size)/d.Seconds()/1e9)
			}
		}
		for _, size := range []int{8, 4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20} {
			buf := make([]byte, size)
			for i := range buf {
				// float32 1.0: a byte ramp read as float32 holds denormals, whose sums run
				// several times slower on this CPU and would hide the data path's speed.
				buf[i] = [4]byte{0, 0, 0x80, 0x3f}[i%4]
			}
			g.AllReduce(ctx, buf, reduce.Float32, reduce.Sum)
			iters := max(5, min(2000, (256<<20)/size))
			start := time.Now()
			for i := 0; i < iters; i++ {
				if err := g.AllReduce(ctx, buf, reduce.Float32, reduce.Sum); err != nil {
					return err
				}
			}
			d := time.Since(start) / time.Duration(iters)
			alg := float64(size) / d.Seconds() / 1e9
			fmt.Printf("all_reduce %9d B: %10v/op algbw %.2f GB/s busbw %.2f GB/s\n", size, d, alg, alg*2*float64(n-1)/float64(n))
		}
	case "pingpong":
		// Round trips of one message each way between ranks 0 and 1 (P2P_E2E_PINGPONG=1).
		for _, size := range []int{8, 64 << 10, 1 << 20} {
			buf := make([]byte, size)
			iters := max(20, min(2000, (64<<20)/size))
			var sendT time.Duration
			start := time.Now()
			for i := 0; i < iters; i++ {
				tag := wire.UserTag(int32(i))
				if rank == 0 {
					t0 := time.Now()
					if err := ep.Send(ctx, 1, tag, buf); err != nil {
						return err
					}
					sendT += time.Since(t0)
					if _, err := ep.Recv(ctx, 1, tag, buf); err != nil {
						return err
					}
				} else if rank == 1 {
					if _, err := ep.Recv(ctx, 0, tag, buf); err != nil {
						return err
					}
					if err := ep.Send(ctx, 0, tag, buf); err != nil {
						return err
					}
				}
			}
			d := time.Since(start) / time.Duration(iters)
			fmt.Printf("pingpong %9d B: %10v/round trip, send %v, %.2f GB/s one way\n", size, d, sendT/time.Duration(iters), 2*float64(size)/d.Seconds()/1e9)
		}
	case "enginewrite":
		// Engine writes alone (no p2p protocol): rank 0 writes into rank 1's region.
		if rank == 0 {
			v, _ := st.get("ep.1", time.Second)
			var pi p2p.Info
			json.Unmarshal(v, &pi)
			seg, err := eng.OpenSegment(pi.Segment)
			if err != nil {
				return err
			}
			src, err := eng.AllocateShared(4 << 20)
			if err != nil {
				return err
			}
			for _, size := range []int{8, 64 << 10, 256 << 10, 512 << 10} {
				reqs := []engine.TransferRequest{{Opcode: engine.OpWrite, Source: src, TargetID: seg, TargetOffset: pi.Addr + 4096, Length: uint64(size)}}
				iters := max(20, min(2000, (64<<20)/size))
				start := time.Now()
				for i := 0; i < iters; i++ {
					if err := eng.TransferSync(ctx, reqs); err != nil {
						return err
					}
				}
				d := time.Since(start) / time.Duration(iters)
				fmt.Printf("engine write %9d B: %10v/op %.2f GB/s\n", size, d, float64(size)/d.Seconds()/1e9)
			}
			// p2p's batch shape: 4 x (64 KiB slot, 4-byte word, 4-byte word).
			var reqs []engine.TransferRequest
			for k := 0; k < 4; k++ {
				reqs = append(reqs,
					engine.TransferRequest{Opcode: engine.OpWrite, Source: src, TargetID: seg, TargetOffset: pi.Addr + 4096 + uint64(k)*(64<<10), Length: 64 << 10},
					engine.TransferRequest{Opcode: engine.OpWrite, Source: src, TargetID: seg, TargetOffset: pi.Addr + 1024, Length: 4},
					engine.TransferRequest{Opcode: engine.OpWrite, Source: src, TargetID: seg, TargetOffset: pi.Addr + 1028, Length: 4})
			}
			start := time.Now()
			for i := 0; i < 200; i++ {
				if err := eng.TransferSync(ctx, reqs); err != nil {
					return err
				}
			}
			d := time.Since(start) / 200
			fmt.Printf("engine batch 4x(64K+4+4): %10v/op %.2f GB/s\n", d, float64(256<<10)/d.Seconds()/1e9)
		}
	case "mismatch":
		cnt := 10
		if rank == 1 {
			cnt = 20
		}
		err = g.AllReduce(ctx, make([]byte, 4*cnt), reduce.Float32, reduce.Sum)
		fmt.Printf("RESULT %v\n", err)
		err = nil
	}
	if err != nil {
		return err
	}
	// Stay until everybody is done, so nobody writes credits into a freed region.
	return g.Barrier(ctx)
}

func f32s(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func fillF32(b []byte, f func(i int) float32) {
	for i := 0; i < len(b)/4; i++ {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f(i)))
	}
}

func pat(n, salt int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + salt*13)
	}
	return b
}

func runOps(ctx context.Context, g *collective.Group, ep *p2p.Endpoint, rank, n int) error {
	for _, count := range []int{1, 1000, 300_001} {
		buf := make([]byte, 4*count)
		fillF32(buf, func(i int) float32 { return float32(rank + i%5) })
		if err := g.AllReduce(ctx, buf, reduce.Float32, reduce.Sum); err != nil {
			return err
		}
		for i, v := range f32s(buf) {
			want := float32(n*(n-1)/2 + n*(i%5))
			if v != want {
				return fmt.Errorf("all_reduce(%d) element %d = %v, want %v", count, i, v, want)
			}
		}
		avg := make([]byte, 4*count)
		fillF32(avg, func(int) float32 { return float32(2 * rank) })
		if err := g.AllReduce(ctx, avg, reduce.Float32, reduce.Avg); err != nil {
			return err
		}
		for i, v := range f32s(avg) {
			if v != float32(n-1) {
				return fmt.Errorf("all_reduce AVG element %d = %v", i, v)
			}
		}
	}
	for _, size := range []int{0, 5, 200_000} {
		b := pat(size, rank)
		if err := g.Broadcast(ctx, b, n-1); err != nil {
			return err
		}
		if !bytes.Equal(b, pat(size, n-1)) {
			return fmt.Errorf("broadcast(%d) differs", size)
		}
		outs := make([][]byte, n)
		for q := range outs {
			outs[q] = make([]byte, size)
		}
		if err := g.AllGather(ctx, pat(size, rank), outs); err != nil {
			return err
		}
		for q := range outs {
			if !bytes.Equal(outs[q], pat(size, q)) {
				return fmt.Errorf("all_gather(%d) block %d differs", size, q)
			}
		}
		ins := make([][]byte, n)
		for q := range ins {
			ins[q] = pat(size+q, rank*n+q)
			outs[q] = make([]byte, size+rank)
		}
		// all_to_all with uneven sizes: rank r sends size+q bytes to q.
		for q := range outs {
			outs[q] = make([]byte, size+rank)
		}
		if err := g.AllToAll(ctx, ins, outs); err != nil {
			return err
		}
		for q := range outs {
			if !bytes.Equal(outs[q], pat(size+rank, q*n+rank)) {
				return fmt.Errorf("all_to_all(%d) from %d differs", size, q)
			}
		}
	}
	// reduce_scatter int64 MAX, reduce to root, gather/scatter.
	const cnt = 50_000
	rins := make([][]byte, n)
	for q := range rins {
		rins[q] = make([]byte, 8*cnt)
		for i := 0; i < cnt; i++ {
			binary.LittleEndian.PutUint64(rins[q][8*i:], uint64((rank*31+q*7+i)%97))
		}
	}
	rout := make([]byte, 8*cnt)
	if err := g.ReduceScatter(ctx, rins, rout, reduce.Int64, reduce.Max); err != nil {
		return err
	}
	for i := 0; i < cnt; i++ {
		want := uint64(0)
		for r := 0; r < n; r++ {
			want = max(want, uint64((r*31+rank*7+i)%97))
		}
		if got := binary.LittleEndian.Uint64(rout[8*i:]); got != want {
			return fmt.Errorf("reduce_scatter element %d = %d want %d", i, got, want)
		}
	}
	// p2p: a ring of tagged sends with any-source receives at rank 0.
	msg := pat(100_000, rank)
	if err := ep.Send(ctx, (rank+1)%n, wire.UserTag(42), msg); err != nil {
		return err
	}
	in := make([]byte, len(msg))
	src := (rank - 1 + n) % n
	from := src
	if rank == 0 {
		from = wire.AnySource
	}
	k, s, err := ep.PostRecv(from, wire.UserTag(42), in).Wait(ctx)
	if err != nil {
		return err
	}
	if k != len(in) || s != src || !bytes.Equal(in, pat(100_000, src)) {
		return fmt.Errorf("p2p from %d: %d bytes from %d", src, k, s)
	}
	return g.Barrier(ctx)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func runRanks(t *testing.T, n int, mode string, env ...string) []string {
	t.Helper()
	return runRanksAllow(t, n, mode, -1, env...)
}

// runRanksAllow is runRanks where rank allowFail may exit with an error (it kills itself).
func runRanksAllow(t *testing.T, n int, mode string, allowFail int, env ...string) []string {
	t.Helper()
	dir := t.TempDir()
	var wg sync.WaitGroup
	outs := make([]string, n)
	errs := make([]error, n)
	for r := 0; r < n; r++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "P2P_E2E_RANK="+strconv.Itoa(r), "P2P_E2E_SIZE="+strconv.Itoa(n),
			"P2P_E2E_DIR="+dir, "P2P_E2E_MODE="+mode, "GOMAXPROCS=2")
		cmd.Env = append(cmd.Env, env...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := cmd.CombinedOutput()
			outs[r], errs[r] = string(out), err
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil && r != allowFail {
			t.Fatalf("rank %d: %v\n%s", r, err, outs[r])
		}
	}
	return outs
}

func TestE2EProcesses(t *testing.T) {
	if raceDetector {
		t.Skip("cross-process ordering is invisible to the race detector (see race_on_test.go); `make test` runs this test without -race")
	}
	if testing.Short() {
		t.Skip("spawns processes")
	}
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			outs := runRanks(t, n, "ops")
			t.Log(strings.TrimSpace(outs[0]))
		})
	}
	t.Run("tcp", func(t *testing.T) {
		outs := runRanks(t, 3, "ops", "MC_FORCE_TCP=1")
		t.Log(strings.TrimSpace(outs[0]))
		if !strings.Contains(outs[0], "shm:0") {
			t.Fatalf("MC_FORCE_TCP=1 still used shm: %s", outs[0])
		}
	})
}

// TestE2ESharedMemory runs the same checks on the collective same-host fast path; with
// MC_FORCE_TCP=1 the ranks agree not to take it and still pass.
func TestE2ESharedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			outs := runRanks(t, n, "ops", "P2P_E2E_SHM=1", "P2P_E2E_CHUNK=65536")
			for r, out := range outs {
				if !strings.Contains(out, "shm true") {
					t.Fatalf("rank %d did not take the fast path: %s", r, out)
				}
			}
		})
	}
	t.Run("tcp", func(t *testing.T) {
		if raceDetector {
			// Without the fast path this is the ring path of TestE2EProcesses.
			t.Skip("cross-process ordering is invisible to the race detector (see race_on_test.go); `make test` runs this test without -race")
		}
		outs := runRanks(t, 2, "ops", "P2P_E2E_SHM=1", "MC_FORCE_TCP=1")
		if !strings.Contains(outs[0], "shm false") {
			t.Fatalf("MC_FORCE_TCP=1 took the fast path: %s", outs[0])
		}
	})
	t.Run("mismatch", func(t *testing.T) {
		outs := runRanks(t, 3, "mismatch", "P2P_E2E_SHM=1")
		for r, out := range outs {
			if !strings.Contains(out, "RESULT all_reduce: rank 1 has 20 float32 elements, rank 0 has 10") {
				t.Fatalf("rank %d: %s", r, out)
			}
		}
	})
	t.Run("killed", func(t *testing.T) {
		start := time.Now()
		outs := runRanksAllow(t, 3, "dead", 2, "P2P_E2E_SHM=1")
		if d := time.Since(start); d > 15*time.Second {
			t.Fatalf("took %v", d)
		}
		for r := 0; r < 2; r++ {
			if !strings.Contains(outs[r], "rank 2 is gone: its process does not answer liveness probes") && !strings.Contains(outs[r], "gave up on the op") {
				t.Fatalf("rank %d: %s", r, outs[r])
			}
			t.Logf("rank %d: %s", r, strings.TrimSpace(outs[r]))
		}
	})
}

func TestE2EMismatch(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	outs := runRanks(t, 3, "mismatch")
	for r, out := range outs {
		if !strings.Contains(out, "RESULT all_reduce: rank 1 has 20 float32 elements, rank 0 has 10") {
			t.Fatalf("rank %d: %s", r, out)
		}
	}
}

func TestE2EDeadRank(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	outs := runRanks(t, 3, "dead")
	for r := 0; r < 2; r++ {
		if !strings.Contains(outs[r], "rank 2") {
			t.Fatalf("rank %d: %s", r, outs[r])
		}
		t.Logf("rank %d: %s", r, strings.TrimSpace(outs[r]))
	}
}

// TestE2EBench prints all_reduce bandwidth between processes (P2P_E2E_BENCH=1; not a timed test).
func TestE2EBench(t *testing.T) {
	if os.Getenv("P2P_E2E_BENCH") == "" {
		t.Skip("set P2P_E2E_BENCH=1")
	}
	ns, shms := []int{2, 4}, []string{"0", "1"}
	if v := os.Getenv("P2P_E2E_BENCH_RANKS"); v != "" { // e.g. 2
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("P2P_E2E_BENCH_RANKS=%q: %v", v, err)
		}
		ns = []int{n}
	}
	if v := os.Getenv("P2P_E2E_BENCH_SHM"); v != "" { // 0: the p2p path only
		shms = []string{v}
	}
	if os.Getenv("P2P_E2E_PINGPONG") != "" {
		outs := runRanks(t, 2, "enginewrite")
		t.Logf("engine writes:\n%s", outs[0])
		outs = runRanks(t, 2, "pingpong")
		t.Logf("ping-pong:\n%s", outs[0])
		return
	}
	for _, n := range ns {
		for _, shm := range shms {
			outs := runRanks(t, n, "bench", "P2P_E2E_SHM="+shm)
			t.Logf("%d ranks, shm=%s:\n%s", n, shm, outs[0])
		}
	}
}
