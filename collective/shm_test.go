package collective

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/collective/reduce"
	"github.com/mooncake-go/mooncake/wire"
)

// memShared is an in-process SharedMemory: anonymous shared mappings, unmapped by close.
type memShared struct {
	mu    sync.Mutex
	bufs  map[uint64][]byte
	next  uint64
	noMap int // Map fails for this rank (-1: never)
}

func newMemShared() *memShared { return &memShared{bufs: map[uint64][]byte{}, next: 1, noMap: -1} }

func (m *memShared) Alloc(n int) ([]byte, uint64, error) {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_ANONYMOUS)
	if err != nil {
		return nil, 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.next
	m.next++
	m.bufs[h] = b
	return b, h, nil
}

func (m *memShared) RanksShareProcess() bool { return true }

func (m *memShared) Free([]byte, uint64) {} // unmapped by close, once every group is closed

func (m *memShared) Map(rank int, h uint64, n int) ([]byte, func(), bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rank == m.noMap {
		return nil, nil, false, nil
	}
	b := m.bufs[h]
	if len(b) < n {
		return nil, nil, false, fmt.Errorf("no buffer %d of %d bytes", h, n)
	}
	return b[:n], func() {}, true, nil
}

func (m *memShared) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for h, b := range m.bufs {
		syscall.Munmap(b)
		delete(m.bufs, h)
	}
}

// shmTest, when set, makes runOn enable the fast path on every group before running fn.
var shmTest *SharedOptions

func enableShm(ctx context.Context, g *Group, sm SharedMemory, opts Options) error {
	so := *shmTest
	if opts == tinyOpts {
		so.ChunkBytes, so.CopyBytes = 192, 1024 // many chunks, per-member parts of a few bytes
	}
	ok, err := g.EnableSharedMemory(ctx, sm, so)
	if err != nil {
		return err
	}
	if !ok && len(g.Members()) > 1 {
		return errors.New("fast path not enabled")
	}
	return nil
}

// TestShm runs the whole correctness suite again on the same-host fast path.
func TestShm(t *testing.T) {
	shmTest = &SharedOptions{ChunkBytes: 8 << 10, CopyBytes: 32 << 10}
	defer func() { shmTest = nil }()
	t.Run("AllReduce", TestAllReduce)
	t.Run("Reduce", TestReduce)
	t.Run("ReduceScatter", TestReduceScatter)
	t.Run("Broadcast", TestBroadcast)
	t.Run("AllGatherGatherScatter", TestAllGatherGatherScatter)
	t.Run("AllToAll", TestAllToAll)
	t.Run("ManyOpsInSequence", TestManyOpsInSequence)
	t.Run("Mismatch", TestMismatchFailsEverywhere)
}

// TestShmChunkBoundaries: float32/int32 results at sizes around multiples of the chunk, with
// world sizes 2..4, against the kernels' own reduction.
func TestShmChunkBoundaries(t *testing.T) {
	shmTest = &SharedOptions{ChunkBytes: 4096}
	defer func() { shmTest = nil }()
	rng := rand.New(rand.NewSource(1))
	for n := 2; n <= 4; n++ {
		for _, count := range []int{1023, 1024, 1025, 2047, 3 * 1024, 3*1024 + 5, 10000} {
			for _, c := range []struct {
				dt reduce.DType
				op reduce.Op
			}{{reduce.Float32, reduce.Sum}, {reduce.Int32, reduce.Max}, {reduce.Float64, reduce.Avg}, {reduce.BFloat16, reduce.Sum}} {
				t.Run(fmt.Sprintf("n%d/c%d/%s/%s", n, count, c.dt, c.op), func(t *testing.T) {
					salt := rng.Intn(100)
					ins := make([][]byte, n)
					ar := make([][]byte, n)
					rd := make([][]byte, n)
					for r := range ins {
						ins[r] = fill(c.dt, c.op, r, count, salt)
						ar[r] = append([]byte(nil), ins[r]...)
						rd[r] = append([]byte(nil), ins[r]...)
					}
					want := expect(t, ins, c.dt, c.op)
					es, _ := reduce.ElemSize(c.dt)
					rsOut := make([][]byte, n)
					agOut := make([][][]byte, n)
					for r := range rsOut {
						rsOut[r] = make([]byte, count*es)
						agOut[r] = make([][]byte, n)
						for q := range agOut[r] {
							agOut[r][q] = make([]byte, count*es)
						}
					}
					root := count % n
					noErrs(t, runGroups(t, n, Options{}, 20*time.Second, func(ctx context.Context, g *Group) error {
						r := g.Rank()
						if !g.SharedMemoryEnabled() {
							return errors.New("not on the fast path")
						}
						if err := g.AllReduce(ctx, ar[r], c.dt, c.op); err != nil {
							return err
						}
						if err := g.Reduce(ctx, rd[r], c.dt, c.op, root); err != nil {
							return err
						}
						rsIn := make([][]byte, n)
						for q := range rsIn {
							rsIn[q] = ins[(r+q)%n]
						}
						if err := g.ReduceScatter(ctx, rsIn, rsOut[r], c.dt, c.op); err != nil {
							return err
						}
						return g.AllGather(ctx, ins[r], agOut[r])
					}))
					for r := 0; r < n; r++ {
						if !bytes.Equal(ar[r], want) {
							t.Fatalf("all_reduce rank %d differs", r)
						}
						if r == root && !bytes.Equal(rd[r], want) || r != root && !bytes.Equal(rd[r], ins[r]) {
							t.Fatalf("reduce rank %d differs", r)
						}
						var contrib [][]byte
						for q := 0; q < n; q++ {
							contrib = append(contrib, ins[(q+r)%n])
						}
						if !bytes.Equal(rsOut[r], expect(t, contrib, c.dt, c.op)) {
							t.Fatalf("reduce_scatter rank %d differs", r)
						}
						for q := 0; q < n; q++ {
							if !bytes.Equal(agOut[r][q], ins[q]) {
								t.Fatalf("all_gather rank %d block %d differs", r, q)
							}
						}
					}
				})
			}
		}
	}
}

// shmGroups makes n ranks with the fast path on.
func shmGroups(t testing.TB, n int, chunk int) ([]*Group, *memShared) {
	t.Helper()
	net := NewMemNetwork(n)
	sm := newMemShared()
	gs := make([]*Group, n)
	for r := range gs {
		gs[r], _ = NewGroup(net.Conn(r), r, n, 0, Options{})
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := gs[r].EnableSharedMemory(context.Background(), sm, SharedOptions{ChunkBytes: chunk})
			if err == nil && !ok {
				err = errors.New("not enabled")
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	noErrs(t, errs)
	t.Cleanup(func() {
		for _, g := range gs {
			g.Close()
		}
		sm.close()
	})
	return gs, sm
}

func runEach(gs []*Group, timeout time.Duration, fn func(ctx context.Context, g *Group) error) []error {
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for r, g := range gs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			errs[r] = fn(ctx, g)
		}()
	}
	wg.Wait()
	return errs
}

func TestShmNotEnabledWhenOneRankCannotMap(t *testing.T) {
	net := NewMemNetwork(3)
	sm := newMemShared()
	sm.noMap = 2
	defer sm.close()
	errs := runEach([]*Group{mustGroup(t, net, 0, 3), mustGroup(t, net, 1, 3), mustGroup(t, net, 2, 3)}, 5*time.Second,
		func(ctx context.Context, g *Group) error {
			ok, err := g.EnableSharedMemory(ctx, sm, SharedOptions{ChunkBytes: 4096})
			if err != nil || ok {
				return fmt.Errorf("enable: %v %v", ok, err)
			}
			b := fill(reduce.Int32, reduce.Sum, g.Rank(), 10, 0)
			if err := g.AllReduce(ctx, b, reduce.Int32, reduce.Sum); err != nil {
				return err
			}
			g.Close()
			return nil
		})
	noErrs(t, errs)
}

func mustGroup(t *testing.T, net *MemNetwork, r, n int) *Group {
	g, err := NewGroup(net.Conn(r), r, n, 0, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestShmDeadPeer: rank 2 stops taking part; the survivors fail within their timeout, the
// hint names rank 2, and the group goes on (over Conn) for the survivors' later ops.
var noAnswer = regexp.MustCompile(`peer rank 2 did not answer within [0-9]+ms`)

func TestShmDeadPeer(t *testing.T) {
	gs, _ := shmGroups(t, 3, 4096)
	start := time.Now()
	errs := runEach(gs, 300*time.Millisecond, func(ctx context.Context, g *Group) error {
		if g.Rank() == 2 {
			return nil
		}
		return g.AllReduce(ctx, make([]byte, 64<<10), reduce.Float32, reduce.Sum)
	})
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("took %v", d)
	}
	for r := 0; r < 2; r++ {
		var pe *PeerError
		if !errors.As(errs[r], &pe) {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if fr := pe.FailedRanks(); len(fr) != 1 || fr[0] != 2 {
			t.Fatalf("rank %d: failed-ranks hint %v (%v)", r, fr, errs[r])
		}
		// The budget named is what was left of the 300ms when the op started: a few ms less
		// on a loaded machine.
		if !noAnswer.MatchString(errs[r].Error()) && !strings.Contains(errs[r].Error(), "gave up on the op") {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if gs[r].SharedMemoryEnabled() {
			t.Fatalf("rank %d still on the fast path after a failure", r)
		}
		t.Log(errs[r])
	}
}

// TestShmAbortReachesPeers: rank 0 gives up after 200ms; rank 1 fails at once with rank 0's
// hint instead of waiting for its own 20s timeout.
func TestShmAbortReachesPeers(t *testing.T) {
	gs, _ := shmGroups(t, 3, 4096)
	start := time.Now()
	errs := runEach(gs, 20*time.Second, func(ctx context.Context, g *Group) error {
		switch g.Rank() {
		case 2:
			return nil
		case 0:
			c, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			ctx = c
		}
		return g.Broadcast(ctx, make([]byte, 100), 0)
	})
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("rank 1 waited %v", d)
	}
	var ae *wire.AbortError
	if !errors.As(errs[1], &ae) || ae.Peer != 0 || len(ae.Failed) != 1 || ae.Failed[0] != 2 {
		t.Fatalf("rank 1: %v", errs[1])
	}
	var pe *PeerError
	if !errors.As(errs[1], &pe) || len(pe.FailedRanks()) != 1 || pe.FailedRanks()[0] != 2 {
		t.Fatalf("rank 1 hint: %v", errs[1])
	}
	t.Log(errs[0])
	t.Log(errs[1])
}

// TestShmTwoLaggards names every rank that did not arrive.
func TestShmTwoLaggards(t *testing.T) {
	gs, _ := shmGroups(t, 4, 4096)
	errs := runEach(gs[:2], 200*time.Millisecond, func(ctx context.Context, g *Group) error {
		if g.Rank() == 0 {
			return g.Barrier(ctx)
		}
		time.Sleep(100 * time.Millisecond) // rank 0 times out first
		return g.Barrier(ctx)
	})
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "peer ranks 1, 2, 3 did not answer") && !strings.Contains(errs[0].Error(), "peer ranks 2, 3 did not answer") {
		t.Fatalf("rank 0: %v", errs[0])
	}
	var pe *PeerError
	errors.As(errs[0], &pe)
	t.Log(errs[0], pe.FailedRanks())
}

// TestShmMismatchThenWorks: a mismatch fails the op on every rank and keeps the fast path.
func TestShmMismatchThenWorks(t *testing.T) {
	gs, _ := shmGroups(t, 3, 4096)
	errs := runEach(gs, 5*time.Second, func(ctx context.Context, g *Group) error {
		r := g.Rank()
		err := g.AllReduce(ctx, make([]byte, 4*(1+r)<<12), reduce.Int32, reduce.Sum)
		var me *MismatchError
		if !errors.As(err, &me) || !strings.Contains(err.Error(), "all_reduce: rank 1 has 8192 int32 elements, rank 0 has 4096") {
			return fmt.Errorf("first op: %v", err)
		}
		if !g.SharedMemoryEnabled() {
			return errors.New("mismatch left the fast path")
		}
		b := fill(reduce.Int32, reduce.Sum, r, 5000, 0)
		if err := g.AllReduce(ctx, b, reduce.Int32, reduce.Sum); err != nil {
			return err
		}
		want := expect(t, [][]byte{fill(reduce.Int32, reduce.Sum, 0, 5000, 0), fill(reduce.Int32, reduce.Sum, 1, 5000, 0), fill(reduce.Int32, reduce.Sum, 2, 5000, 0)}, reduce.Int32, reduce.Sum)
		if !bytes.Equal(b, want) {
			return errors.New("wrong result after the mismatch")
		}
		return nil
	})
	noErrs(t, errs)
}

// TestShmSubgroups: two groups with their own arenas run interleaved on the same ranks.
func TestShmSubgroups(t *testing.T) {
	a, _ := shmGroups(t, 3, 4096)
	b, _ := shmGroups(t, 3, 8192)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for i := 0; i < 20; i++ {
				x := fill(reduce.Float32, reduce.Sum, r, 3000+i, 0)
				y := fill(reduce.Int64, reduce.Max, r, 10+i, 1)
				if err := a[r].AllReduce(ctx, x, reduce.Float32, reduce.Sum); err != nil {
					errs[r] = err
					return
				}
				if err := b[r].AllReduce(ctx, y, reduce.Int64, reduce.Max); err != nil {
					errs[r] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	noErrs(t, errs)
}

// TestShmNoAllocs: the hot path of a small all_reduce does not allocate.
func TestShmNoAllocs(t *testing.T) {
	gs, _ := shmGroups(t, 2, 1<<20)
	ctx := context.Background()
	bufs := [][]byte{make([]byte, 4096), make([]byte, 4096)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 1+2*1001; i++ {
			if err := gs[1].AllReduce(ctx, bufs[1], reduce.Float32, reduce.Sum); err != nil {
				panic(err)
			}
		}
	}()
	gs[0].AllReduce(ctx, bufs[0], reduce.Float32, reduce.Sum)
	allocs := testing.AllocsPerRun(1000, func() {
		gs[0].AllReduce(ctx, bufs[0], reduce.Float32, reduce.Sum)
		gs[0].AllReduce(ctx, bufs[0], reduce.Float32, reduce.Sum)
	})
	<-done
	if allocs > 0.5 {
		t.Fatalf("%v allocations per op pair", allocs)
	}
}

// TestShmAllReduceOrRestore: rank 1 gives up in round 10 of a 40-round all_reduce, after
// rank 0 has written the results of the first chunks into its buffer; both fail and both
// buffers hold their inputs again. Without a save buffer rank 0's input is half overwritten.
func TestShmAllReduceOrRestore(t *testing.T) {
	for _, withSave := range []bool{true, false} {
		t.Run(fmt.Sprint("save=", withSave), func(t *testing.T) {
			gs, _ := shmGroups(t, 2, 256) // 128-byte chunks: 40 rounds for 5120 bytes
			gs[1].shm.Load().testRound = func(r int) error {
				if r == 10 {
					return errors.New("rank 1 gives up")
				}
				return nil
			}
			ins, bufs := restoreInputs(2, 1280)
			errs := runEach(gs, 10*time.Second, func(ctx context.Context, g *Group) error {
				return allReduceMaybeSave(ctx, g, bufs[g.Rank()], withSave)
			})
			checkRestored(t, errs, ins, bufs, withSave, 0)
			var ae *wire.AbortError
			if !errors.As(errs[0], &ae) || ae.Peer != 1 {
				t.Fatalf("rank 0: %v", errs[0])
			}
		})
	}
	gs, _ := shmGroups(t, 2, 256)
	if err := gs[0].AllReduceOrRestore(context.Background(), make([]byte, 64), make([]byte, 60), reduce.Float32, reduce.Sum); err == nil || !strings.Contains(err.Error(), "restore buffer has 60 bytes") {
		t.Fatalf("short save buffer: %v", err)
	}
}

// TestShmAllToAllStreamed: all_to_all pieces copied out with non-temporal stores (the large
// output path) arrive exact, pieces of unequal sizes and not multiples of 64 included.
func TestShmAllToAllStreamed(t *testing.T) {
	shmTest = &SharedOptions{ChunkBytes: 32 << 10, StreamOutBytes: 1}
	defer func() { shmTest = nil }()
	checkAllToAll(t, 3, Options{}, func(from, to int) int { return 20000 + from*4099 + to*77 })
}

// TestShmOptionsDefaults: zero fields take the defaults; a negative Spin means no polling
// (MC_PG_SHM_SPIN_US=0).
func TestShmOptionsDefaults(t *testing.T) {
	got := SharedOptions{}.withDefaults(1)
	want := SharedOptions{ChunkBytes: DefaultShmChunkBytes, CopyBytes: DefaultShmCopyBytes, StreamOutBytes: DefaultShmStreamOutBytes, Spin: 20 * time.Microsecond}
	if got != want {
		t.Fatalf("defaults = %+v, want %+v", got, want)
	}
	if got := (SharedOptions{Spin: -1}).withDefaults(1).Spin; got != 0 {
		t.Fatalf("Spin -1: %v, want 0 (no polling)", got)
	}
	if got := (SharedOptions{}).withDefaults(runtime.NumCPU() + 1).Spin; got != 2*time.Microsecond {
		t.Fatalf("ranks > CPUs: Spin %v, want 2µs", got)
	}
	if got := (SharedOptions{ChunkBytes: 1000}).withDefaults(1); got.ChunkBytes != 1024 || got.CopyBytes != 1024 {
		t.Fatalf("ChunkBytes only: %+v, want chunk = copy = 1024", got)
	}
}

// probingConn is a Conn whose liveness probe of one peer blocks until that peer finished its
// op and then reports it dead, as a probe of a process that finished and exited does.
type probingConn struct {
	Conn
	peer    int
	probing chan struct{} // closed when the probe of peer starts
	exited  chan struct{} // closed when peer finished its op and "exited"
	once    sync.Once
}

func (c *probingConn) PeerAlive(ctx context.Context, rank int) error {
	if rank != c.peer {
		return nil
	}
	c.once.Do(func() { close(c.probing) })
	<-c.exited
	return fmt.Errorf("rank %d is gone: %w", rank, wire.ErrPeerDead)
}

// TestShmPeerExitsWhileProbed: rank 1 arrives late, so rank 0 probes it; meanwhile rank 1
// publishes its input, finishes the all_reduce and exits, and the probe finds it dead. Rank 0
// still has everything the op needs (rank 1's arena stays mapped) and must complete with the
// full sum, not fail with rank 1 as a dead peer (the CI flake of test_elastic_parity: a rank
// that finished an op and exited counted as failed in it).
func TestShmPeerExitsWhileProbed(t *testing.T) {
	net := NewMemNetwork(2)
	sm := newMemShared()
	defer sm.close()
	pc := &probingConn{Conn: net.Conn(0), peer: 1, probing: make(chan struct{}), exited: make(chan struct{})}
	g0, err := NewGroup(pc, 0, 2, 0, Options{})
	if err != nil {
		t.Fatal(err)
	}
	gs := []*Group{g0, mustGroup(t, net, 1, 2)}
	noErrs(t, runEach(gs, 10*time.Second, func(ctx context.Context, g *Group) error {
		ok, err := g.EnableSharedMemory(ctx, sm, SharedOptions{ChunkBytes: 4096})
		if err == nil && !ok {
			err = errors.New("not enabled")
		}
		return err
	}))
	errs := runEach(gs, 10*time.Second, func(ctx context.Context, g *Group) error {
		b := fill(reduce.Int32, reduce.Sum, g.Rank(), 16, 0)
		if g.Rank() == 1 {
			<-pc.probing
			defer close(pc.exited)
		}
		if err := g.AllReduce(ctx, b, reduce.Int32, reduce.Sum); err != nil {
			return err
		}
		want := fill(reduce.Int32, reduce.Sum, 0, 16, 0)
		other := fill(reduce.Int32, reduce.Sum, 1, 16, 0)
		reduce.Reduce(want, other, reduce.Int32, reduce.Sum)
		if !bytes.Equal(b, want) {
			return fmt.Errorf("rank %d: wrong sum", g.Rank())
		}
		return nil
	})
	noErrs(t, errs)
}
