package master

import (
	"fmt"
	"testing"

	"github.com/mooncake-go/mooncake/store/api"
)

// BenchmarkTieredPut is the master's cost per put in a store whose memory holds n objects and
// stays full, with the G3 tier taking the overflow: each put may start moves (an eviction pass)
// and each finished move frees room, as in bench/tier_bench.py's put phase at scale. With
// g3 > 0, that many objects already live in G3 only (a long-running store: G3 holds many times
// what memory does).
func BenchmarkTieredPut(b *testing.B) {
	for _, c := range []struct{ n, g3 int }{{4096, 0}, {65536, 0}, {262144, 0}, {4096, 65536}, {4096, 262144}} {
		n := c.n
		name := fmt.Sprintf("objects=%d", n)
		if c.g3 > 0 {
			name = fmt.Sprintf("objects=%d/g3=%d", n, c.g3)
		}
		b.Run(name, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.RootFSDir = "/g3"
			cfg.EvictionRatio = 0.1
			cfg.EvictionHighWatermarkRatio = 0.9
			s, apply := benchState(cfg)
			const size = 4096
			apply(Entry{Op: OpMountSegment, ClientID: "c1", Segment: &api.Segment{ID: "s1", Name: "h:1", Base: 1 << 30, Size: uint64(n) * size}})
			next := 0
			put := func() {
				for {
					cfg := api.ReplicateConfig{}
					key := fmt.Sprintf("k%09d", next)
					r := apply(Entry{Op: OpPutStart, ClientID: "c1", Key: key, Size: size, Config: &cfg})
					if r.Code == api.OK {
						apply(Entry{Op: OpPutEnd, ClientID: "c1", Key: key})
						next++
						return
					}
					// Memory full: finish the moves in progress, as the client would.
					for _, t := range s.OffloadTasks("c1") {
						apply(Entry{Op: OpOffloadDone, ClientID: "c1", Key: t.Key, Path: t.Path, Checksum: 1})
					}
				}
			}
			for range n + c.g3 {
				put()
			}
			b.ResetTimer()
			for range b.N {
				put()
			}
		})
	}
}

// BenchmarkEvictPass is one eviction pass over n objects in memory (plain eviction, 5 % of
// them): the time the master holds its state for. Building the state takes seconds at a
// million objects; run it with -benchtime=3x.
func BenchmarkEvictPass(b *testing.B) {
	for _, n := range []int{65536, 1 << 20} {
		b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				cfg := DefaultConfig()
				cfg.EvictionRatio = 0.05
				s := NewState(cfg)
				now := int64(1e18)
				s.Apply(Entry{Op: OpMountSegment, Now: now, ClientID: "c1", Segment: &api.Segment{ID: "s1", Name: "h:1", Base: 1 << 30, Size: uint64(n) * 4096}})
				for i := range n {
					now += 1000
					c := api.ReplicateConfig{}
					key := fmt.Sprintf("k%09d", i)
					s.Apply(Entry{Op: OpPutStart, Now: now, ClientID: "c1", Key: key, Size: 4096, Config: &c})
					s.Apply(Entry{Op: OpPutEnd, Now: now, ClientID: "c1", Key: key})
				}
				b.StartTimer()
				if freed, _ := s.evictPass(now); freed != n/20+1 && freed != n/20 {
					b.Fatalf("a pass over %d objects freed %d", n, freed)
				}
			}
		})
	}
}

// BenchmarkStats is one Stats call (a metrics scrape holds the master for it) with n objects,
// 5 % of them soft-pinned and 5 % leased.
func BenchmarkStats(b *testing.B) {
	for _, n := range []int{65536, 1 << 20} {
		b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) {
			s := NewState(DefaultConfig())
			now := int64(1e18)
			s.Apply(Entry{Op: OpMountSegment, Now: now, ClientID: "c1", Segment: &api.Segment{ID: "s1", Name: "h:1", Base: 1 << 30, Size: uint64(n) * 4096}})
			ttl := uint64(3600_000)
			for i := range n {
				now += 1000
				c := api.ReplicateConfig{}
				if i%20 == 0 {
					c.WithSoftPin, c.SoftPinTTLMs = true, &ttl
				}
				key := fmt.Sprintf("k%09d", i)
				s.Apply(Entry{Op: OpPutStart, Now: now, ClientID: "c1", Key: key, Size: 4096, Config: &c})
				s.Apply(Entry{Op: OpPutEnd, Now: now, ClientID: "c1", Key: key})
				if i%20 == 1 {
					s.Apply(Entry{Op: OpGrantLease, Now: now, ClientID: "c1", Key: key})
				}
			}
			b.ResetTimer()
			for range b.N {
				if st := s.Stats(now); st.Objects != n {
					b.Fatalf("%d objects counted, %d stored", st.Objects, n)
				}
			}
		})
	}
}

// BenchmarkWriteBehindPut: master cost per put with SSD offload copying every put to its
// client's local disk (--enable_offload), the disk at its quota: each copy's reservation drops
// old local copies now and then (down to 90% of the quota, a walk over every object).
func BenchmarkWriteBehindPut(b *testing.B) {
	for _, c := range []struct{ n, quota int }{{262144, 1 << 30}, {65536, 16384}, {262144, 65536}, {262144, 4096}} {
		b.Run(fmt.Sprintf("objects=%d/disk=%d", c.n, c.quota), func(b *testing.B) {
			const size = 4096
			cfg := DefaultConfig()
			cfg.EnableOffload = true
			cfg.QuotaBytes = uint64(c.quota) * size
			s, apply := benchState(cfg)
			apply(Entry{Op: OpMountSegment, ClientID: "c1", Segment: &api.Segment{ID: "s1", Name: "h:1", Base: 1 << 30,
				Size: 1 << 42, OffloadEndpoint: "h:2"}})
			next := 0
			put := func() {
				cfg := api.ReplicateConfig{}
				key := fmt.Sprintf("k%09d", next)
				next++
				if r := apply(Entry{Op: OpPutStart, ClientID: "c1", Key: key, Size: size, Config: &cfg}); r.Code != api.OK {
					b.Fatalf("put %s: %v", key, r.Err())
				}
				apply(Entry{Op: OpPutEnd, ClientID: "c1", Key: key})
				for _, t := range s.OffloadTasks("c1") {
					apply(Entry{Op: OpOffloadDone, ClientID: "c1", Key: t.Key, Path: t.Path, Checksum: 1})
				}
			}
			for range c.n {
				put()
			}
			b.ResetTimer()
			for range b.N {
				put()
			}
			b.StopTimer()
			if u := s.diskUse("c1"); u.used == 0 || u.used > cfg.QuotaBytes {
				b.Fatalf("disk use %+v past the quota %d", u, cfg.QuotaBytes)
			}
		})
	}
}

// benchState is a state with cfg and an apply that stamps entries 1 µs apart.
func benchState(cfg Config) (*State, func(Entry) Result) {
	s := NewState(cfg)
	now := int64(1e18)
	return s, func(e Entry) Result {
		now += 1000
		e.Now = now
		return s.Apply(e)
	}
}

// BenchmarkChainedPut is the master's cost per put of a KV-cache block (keys "NAME|PARENT",
// chains of 16) into a full memory of n blocks, under each eviction policy, with the trace
// bench's eviction settings (a pass per 0.1 % of the blocks when a put finds no room): the
// prefix policy's price over lru's.
func BenchmarkChainedPut(b *testing.B) {
	for _, n := range []int{2048, 20480} {
		for _, policy := range []string{EvictionLRU, EvictionPrefix} {
			b.Run(fmt.Sprintf("blocks=%d/%s", n, policy), func(b *testing.B) {
				cfg := DefaultConfig()
				cfg.EvictionPolicy = policy
				cfg.EvictionRatio = 0.001
				cfg.EvictionHighWatermarkRatio = 1
				_, apply := benchState(cfg)
				const size = 4096
				apply(Entry{Op: OpMountSegment, ClientID: "c1", Segment: &api.Segment{ID: "s1", Name: "h:1", Base: 1 << 30, Size: uint64(n) * size}})
				next := 0
				put := func() {
					key := fmt.Sprintf("b%d", next)
					if next%16 > 0 {
						key += fmt.Sprintf("|b%d", next-1)
					}
					next++
					for range 2 {
						cfg := api.ReplicateConfig{}
						if apply(Entry{Op: OpPutStart, ClientID: "c1", Key: key, Size: size, Config: &cfg}).Code == api.OK {
							apply(Entry{Op: OpPutEnd, ClientID: "c1", Key: key})
							return
						}
					}
					b.Fatalf("put %s failed twice", key)
				}
				for range 2 * n {
					put()
				}
				b.ResetTimer()
				for range b.N {
					put()
				}
			})
		}
	}
}
