package pg

// The test harness: every rank of a group in this process, each with its own transfer engine
// (as separate processes have), sharing an in-memory rendezvous store. Killing a rank closes
// its group and its engine without telling anyone: its peers see a process that no longer
// answers, as they do when a rank's process dies.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/p2p"
	"github.com/mooncake-go/mooncake/worker"
)

// cluster is a group's ranks in this process.
type cluster struct {
	t    *testing.T
	kv   *MemStore
	base Config
	mu   sync.Mutex
	pgs  []*Group // by rank; nil: not started or killed
	engs []*engine.Engine
}

// newCluster starts ranks [0, base.Size) of a group configured as base (Rank is set per
// rank; Name defaults to the test's name) and waits for all of them.
func newCluster(t *testing.T, base Config) *cluster {
	t.Helper()
	if base.Name == "" {
		base.Name = t.Name()
	}
	if base.MaxSize == 0 {
		base.MaxSize = base.Size
	}
	c := &cluster{t: t, kv: NewMemStore(), base: base, pgs: make([]*Group, base.MaxSize), engs: make([]*engine.Engine, base.MaxSize)}
	t.Cleanup(c.closeAll)
	ranks := make([]int, base.Size)
	for r := range ranks {
		ranks[r] = r
	}
	c.start(func(cfg *Config) {}, ranks...)
	return c
}

// start starts a process for each of ranks (a replacement when the rank ran before, or a
// joiner) with mod applied to its config, and waits until New returned on all of them.
func (c *cluster) start(mod func(cfg *Config), ranks ...int) {
	c.t.Helper()
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for i, r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			eng, err := engine.New(context.Background(), engine.Config{LocalServerName: "127.0.0.1", MetadataServer: "P2PHANDSHAKE"})
			if err != nil {
				errs[i] = err
				return
			}
			cfg := c.base
			cfg.Rank = r
			mod(&cfg)
			g, err := New(cfg, c.kv, p2p.EngineFabric(eng))
			if err != nil {
				eng.Close()
				errs[i] = err
				return
			}
			c.mu.Lock()
			c.pgs[r], c.engs[r] = g, eng
			c.mu.Unlock()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			c.t.Fatalf("starting rank %d: %v", ranks[i], err)
		}
	}
}

// kill ends rank r's process as a crash would look to its peers.
func (c *cluster) kill(r int) {
	c.mu.Lock()
	g, eng := c.pgs[r], c.engs[r]
	c.pgs[r], c.engs[r] = nil, nil
	c.mu.Unlock()
	if g != nil {
		g.Close()
	}
	if eng != nil {
		eng.Close()
	}
}

func (c *cluster) closeAll() {
	for r := range c.pgs {
		c.kill(r)
	}
}

// groups returns the cluster's groups by rank.
func (c *cluster) groups() []*Group {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Group(nil), c.pgs...)
}

// groups makes n ranks of one group, each on its own engine.
func groups(t *testing.T, n int, timeout time.Duration) []*Group {
	t.Helper()
	return newCluster(t, Config{Size: n, Timeout: timeout}).groups()
}

// must returns the work of an op that must be accepted.
func must(t *testing.T) func(w *worker.Work, err error) *worker.Work {
	return func(w *worker.Work, err error) *worker.Work {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
}

func waitAll(t *testing.T, ws ...*worker.Work) {
	t.Helper()
	for i, w := range ws {
		if err := w.Wait(20 * time.Second); err != nil {
			t.Fatalf("work %d (%s): %v", i, w.Op(), err)
		}
	}
}

// newOn makes another group (a subgroup) on rank r's engine; the cluster closes it.
func (c *cluster) newOn(r int, cfg Config) (*Group, error) {
	c.mu.Lock()
	eng := c.engs[r]
	c.mu.Unlock()
	g, err := New(cfg, c.kv, p2p.EngineFabric(eng))
	if err == nil {
		c.t.Cleanup(func() { g.Close() })
	}
	return g, err
}

// each runs f for every rank of ranks at once and returns the answers by rank.
func each[T any](ranks []int, f func(r int) T) map[int]T {
	out := map[int]T{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := f(r)
			mu.Lock()
			out[r] = v
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// reinit closes rank r's group and, after between runs, creates it again on the same engine
// (the same process calling init_process_group again).
func (c *cluster) reinit(r int, between func()) {
	c.t.Helper()
	c.mu.Lock()
	g, eng := c.pgs[r], c.engs[r]
	c.mu.Unlock()
	g.Close()
	between()
	cfg := c.base
	cfg.Rank = r
	g, err := New(cfg, c.kv, p2p.EngineFabric(eng))
	if err != nil {
		c.t.Fatalf("re-initialising rank %d: %v", r, err)
	}
	c.mu.Lock()
	c.pgs[r] = g
	c.mu.Unlock()
}
