package client

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"slices"
	"sort"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/master"
)

// putsInProgress is the master's count of open puts (reservations included).
func putsInProgress(srv *master.Server) int {
	var n int
	srv.View(func(s *master.State) { n = s.PutsInProgress() })
	return n
}

// TestPutsThroughReservations: single puts of small values go through reservations and read
// back exact, from the replicas (a client that sends no bytes with its puts) and from the
// master's cache, from 4 goroutines at once; the reservations are never keys, a key put twice
// keeps its first value, values over the limit and upserts take the plain path, and Close
// leaves no put open.
func TestPutsThroughReservations(t *testing.T) {
	srv, addr := startMaster(t)
	newClient(t, addr, 256<<20)          // holds the replicas (reservations may take 1 % of it)
	for _, small := range []int{-1, 0} { // no bytes with the puts (read from the replicas); the default
		t.Run(fmt.Sprintf("small_value_bytes=%d", small), func(t *testing.T) {
			c := newClientWith(t, addr, 0, Config{SmallValueBytes: small})
			ctx := context.Background()
			want := putConcurrently(t, c, 4, 150, func(g, i int) (string, []byte) {
				size := []int{4096, 100, 64 << 10, 4096}[i%4]
				return fmt.Sprintf("s%d/g%d/%d", small, g, i), pattern(size, byte(g*31+i))
			})
			if n := c.ReservedPuts(); n < 400 {
				t.Fatalf("%d of 600 puts went through reservations, want most", n)
			}
			t.Logf("%d of 600 puts went through reservations", c.ReservedPuts())
			// Over the limit, and an upsert: the plain path, same results.
			big := pattern(reserveMaxBytes+1, 9)
			before := c.ReservedPuts()
			if err := c.PutValue(ctx, fmt.Sprintf("s%d/big", small), big, PutOptions{}); err != nil {
				t.Fatal(err)
			}
			want[fmt.Sprintf("s%d/big", small)] = big
			up := fmt.Sprintf("s%d/g0/1", small)
			want[up] = pattern(100, 77)
			if err := c.PutValue(ctx, up, want[up], PutOptions{Upsert: true}); err != nil {
				t.Fatal(err)
			}
			if c.ReservedPuts() != before {
				t.Fatal("a value over the limit or an upsert went through a reservation")
			}
			// Write-once: a key put again keeps its first value (and the reservation is reused).
			again := fmt.Sprintf("s%d/g1/0", small)
			if err := c.PutValue(ctx, again, pattern(4096, 200), PutOptions{}); err != nil {
				t.Fatal(err)
			}
			// A value put through a reservation is answered by the master as a plain put's is
			// (smallvalue.go): a get of one of 100 bytes reads no replica.
			before = c.CachedReads()
			if _, err := c.GetValue(ctx, fmt.Sprintf("s%d/g2/5", small)); err != nil {
				t.Fatal(err)
			}
			if cached := c.CachedReads() - before; (small >= 0) != (cached == 1) {
				t.Fatalf("small_value_bytes %d: %d of 1 get answered from the master's cache", small, cached)
			}
			reader := newClient(t, addr, 0)
			for key, v := range want {
				for _, rc := range []*Client{c, reader} {
					got, err := rc.GetValue(ctx, key)
					if err != nil || !bytes.Equal(got, v) {
						t.Fatalf("get %s: %d bytes (want %d), %v", key, len(got), len(v), err)
					}
				}
			}
			var keys []string
			srv.View(func(s *master.State) { keys = s.Keys() })
			var mine []string
			for _, k := range keys {
				if len(k) > 3 && k[:3] == fmt.Sprintf("s%d/", small)[:3] {
					mine = append(mine, k)
				}
			}
			wantKeys := make([]string, 0, len(want))
			for k := range want {
				wantKeys = append(wantKeys, k)
			}
			sort.Strings(wantKeys)
			if !slices.Equal(mine, wantKeys) {
				t.Fatalf("the master lists %d keys of this client, want the %d put", len(mine), len(wantKeys))
			}
			if putsInProgress(srv) == 0 {
				t.Fatal("no reservation is held after 600 puts")
			}
			c.Close()
			if n := putsInProgress(srv); n != 0 {
				t.Fatalf("%d puts still open after Close", n)
			}
		})
	}
}

// putConcurrently puts through c from goroutines at once, each making each puts: the key and
// value kv(g, i) for goroutine g's i-th put. Returns what was put.
func putConcurrently(t *testing.T, c *Client, goroutines, each int, kv func(g, i int) (string, []byte)) map[string][]byte {
	t.Helper()
	want := map[string][]byte{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				key, v := kv(g, i)
				if err := c.PutValue(context.Background(), key, v, PutOptions{}); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				want[key] = v
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return want
}

// oldMaster is a master that predates reservations: PutEndReserved (and what came after it,
// PutEndUnconfirmed and ConfirmPuts) are unknown methods.
type oldMaster struct{ *master.Server }

func (oldMaster) PutEndReserved(context.Context, *api.KeyRequest) (*api.Status, error) {
	return nil, unknownMethod("PutEndReserved")
}

func (oldMaster) PutEndUnconfirmed(context.Context, *api.KeyRequest) (*api.Status, error) {
	return nil, unknownMethod("PutEndUnconfirmed")
}

func (oldMaster) ConfirmPuts(context.Context, *api.BatchKeysRequest) (*api.Status, error) {
	return nil, unknownMethod("ConfirmPuts")
}

// unknownMethod is a master's answer to a method it does not have.
func unknownMethod(name string) error {
	return status.Errorf(codes.Unimplemented, "unknown method %q", "/mooncake.store.MasterService/"+name)
}

// serveAs starts a master whose service is wrap(its server), the server with some methods
// replaced, over framed RPC; the server and its address.
func serveAs(t *testing.T, wrap func(*master.Server) api.MasterServer) (*master.Server, string) {
	t.Helper()
	cfg := master.DefaultConfig()
	cfg.EnableMetricReporting = false
	srv := master.NewServer(cfg)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	framed := api.NewFramedServer(&api.ServiceDesc, wrap(srv), nil)
	fl := api.NewFramedListener(lis, framed)
	ctx, cancel := context.WithCancel(context.Background())
	go srv.Run(ctx)
	t.Cleanup(func() { cancel(); framed.Close(); fl.Close() })
	return srv, lis.Addr().String()
}

// TestReservationsWithAnOlderMaster: against a master without PutEndReserved, puts fall back to
// the plain path for good, every value is stored, and no reservation stays open.
func TestReservationsWithAnOlderMaster(t *testing.T) {
	srv, addr := serveAs(t, func(s *master.Server) api.MasterServer { return oldMaster{s} })
	ctx := context.Background()
	newClient(t, addr, 64<<20)
	c := newClient(t, addr, 0)
	for i := range 40 {
		if err := c.PutValue(ctx, fmt.Sprintf("k%d", i), pattern(4096, byte(i)), PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 40 {
		got, err := c.GetValue(ctx, fmt.Sprintf("k%d", i))
		if err != nil || !bytes.Equal(got, pattern(4096, byte(i))) {
			t.Fatalf("get k%d: %d bytes, %v", i, len(got), err)
		}
	}
	if n := c.ReservedPuts(); n != 0 {
		t.Fatalf("%d puts went through reservations on a master without them", n)
	}
	c.resv.mu.Lock()
	off := c.resv.off
	c.resv.mu.Unlock()
	if !off {
		t.Fatal("the client never tried a reservation (or did not notice the master lacks them)")
	}
	c.Close()
	if n := putsInProgress(srv); n != 0 {
		t.Fatalf("%d puts still open after Close", n)
	}
}
