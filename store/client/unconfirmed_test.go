package client

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/internal/memview"
	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/master"
)

// waitConfirmed waits until the master holds no unconfirmed put (the clients' confirmations
// arrived), failing after 5 s.
func waitConfirmed(t *testing.T, srv *master.Server) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var n int
		srv.View(func(s *master.State) { n = s.UnconfirmedPuts() })
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d puts still unconfirmed after 5 s", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSmallPutsEndUnconfirmedThenConfirmed: single small puts over tcp end while their writes are
// under way (framed RPC; over gRPC the same values, ended before the write), each is read back
// exact by another client at once, every one is confirmed without a call of its own while puts
// follow each other, and once confirmed each replica holds the exact bytes (read from the
// holder's memory, and by a ranged read).
func TestSmallPutsEndUnconfirmedThenConfirmed(t *testing.T) {
	srv, addr := startMaster(t)
	newClient(t, addr, 256<<20) // holds the replicas
	reader := newClient(t, addr, 0)
	for _, rpc := range []string{"framed", "grpc"} {
		t.Run(rpc, func(t *testing.T) {
			w := newClientWith(t, addr, 0, Config{GRPC: rpc == "grpc", Engine: engine.Config{ForceTCP: true}})
			ctx := context.Background()
			want := map[string][]byte{}
			for i := range 200 {
				key := fmt.Sprintf("%s/%d", rpc, i)
				v := pattern([]int{4096, 100, 4096, 1}[i%4], byte(i))
				if err := w.PutValue(ctx, key, v, PutOptions{}); err != nil {
					t.Fatal(err)
				}
				got, err := reader.GetValue(ctx, key)
				if err != nil || !bytes.Equal(got, v) {
					t.Fatalf("%s read right after its put: %d bytes (%v), want %d", key, len(got), err, len(v))
				}
				want[key] = v
			}
			if n := w.UnconfirmedPuts(); n < 150 {
				t.Fatalf("%d of 200 puts ended unconfirmed, want most", n)
			}
			waitConfirmed(t, srv)
			for key, v := range want {
				var info master.ObjectInfo
				srv.View(func(s *master.State) { info, _ = s.Query(key) })
				if len(info.Replicas) != 1 || info.Replicas[0].Status != api.ReplicaComplete {
					t.Fatalf("%s confirmed: replicas %+v", key, info.Replicas)
				}
				if got := memview.Bytes(uintptr(info.Replicas[0].Addr), len(v)); !bytes.Equal(got, v) {
					t.Fatalf("%s: its replica holds other bytes than its value", key)
				}
			}
			// A ranged read, answered from the master's bytes.
			buf := make([]byte, 64<<10)
			base := memview.Addr(buf)
			if err := reader.RegisterBuffer(base, uint64(len(buf))); err != nil {
				t.Fatal(err)
			}
			defer reader.UnregisterBuffer(base)
			key := rpc + "/2"
			got, errs := reader.GetRanges(ctx, key, []Range{{Src: 100, Dst: base, Size: 1000}})
			if errs[0] != nil || got[0] != 1000 || !bytes.Equal(buf[:1000], want[key][100:1100]) {
				t.Fatalf("ranged read of %s: %d bytes (%v)", key, got[0], errs[0])
			}
		})
	}
}

// TestUnconfirmedPutWhoseWriteFailsIsTakenBack: when the holder's engine stops answering while
// its segment stays mounted, a small put fails, and the key it made readable for a moment is
// gone afterwards (no put left unconfirmed or in progress but the reservations).
func TestUnconfirmedPutWhoseWriteFailsIsTakenBack(t *testing.T) {
	srv, addr := startMaster(t)
	ctx := context.Background()
	eng, err := engine.New(ctx, engine.Config{LocalServerName: "127.0.0.1", MetadataServer: engine.P2PHandshake})
	if err != nil {
		t.Fatal(err)
	}
	holder, err := NewWithEngine(ctx, eng, Config{MasterServerAddress: addr, GlobalSegmentSize: 64 << 20, LocalBufferSize: 1 << 20, RPCTimeout: 3 * time.Second})
	if err != nil {
		eng.Close()
		t.Fatal(err)
	}
	defer holder.Close()
	w := newClientWith(t, addr, 0, Config{Engine: engine.Config{ForceTCP: true}})
	for i := range 20 { // reservations made, some puts ended unconfirmed
		if err := w.PutValue(ctx, fmt.Sprintf("ok/%d", i), pattern(4096, byte(i)), PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if w.UnconfirmedPuts() == 0 {
		t.Fatal("no put ended unconfirmed")
	}
	eng.Close() // the holder's segment stays mounted; writes to it fail
	err = w.PutValue(ctx, "lost", pattern(4096, 9), PutOptions{})
	if err == nil {
		t.Fatal("a put to a holder that cannot be reached succeeded")
	}
	t.Logf("the put failed: %v", err)
	var exists bool
	srv.View(func(s *master.State) { exists, _ = s.Exists("lost") })
	if exists {
		t.Fatal("the failed put's key is readable after the put returned its error")
	}
	waitConfirmed(t, srv) // the puts before it were confirmed
}

// takenOver serves one unconfirmed end, then answers as a master of the version before
// unconfirmed puts, as one that took over after the client connected would (the client learned
// UnconfirmedPuts from the master it connected to).
type takenOver struct {
	*master.Server
	ends atomic.Int32 // PutEndUnconfirmed calls
}

func (m *takenOver) PutEndUnconfirmed(ctx context.Context, r *api.KeyRequest) (*api.Status, error) {
	if m.ends.Add(1) == 1 {
		return m.Server.PutEndUnconfirmed(ctx, r)
	}
	return nil, unknownMethod("PutEndUnconfirmed")
}

func (m *takenOver) ConfirmPuts(ctx context.Context, r *api.BatchKeysRequest) (*api.Status, error) {
	if m.ends.Load() <= 1 {
		return m.Server.ConfirmPuts(ctx, r)
	}
	return nil, unknownMethod("ConfirmPuts")
}

// TestUnconfirmedPutsWithAMasterThatPredatesThem: a master that does not know
// PutEndUnconfirmed, though the client was told it did, refuses the end as an unknown method and
// changes nothing; the client ends that put and every later one after its write (through its
// reservations still), drops the confirmations it held, and every value reads back exact, each
// replica complete and holding its bytes.
func TestUnconfirmedPutsWithAMasterThatPredatesThem(t *testing.T) {
	var m *takenOver
	srv, addr := serveAs(t, func(s *master.Server) api.MasterServer { m = &takenOver{Server: s}; return m })
	ctx := context.Background()
	newClient(t, addr, 64<<20)
	reader := newClient(t, addr, 0)
	w := newClientWith(t, addr, 0, Config{Engine: engine.Config{ForceTCP: true}})
	if !w.confirms.on.Load() {
		t.Fatal("the master's ServiceStatus did not offer unconfirmed ends")
	}
	const n = 60
	for i := range n {
		key := fmt.Sprintf("k%d", i)
		v := pattern(4096, byte(i))
		if err := w.PutValue(ctx, key, v, PutOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := reader.GetValue(ctx, key)
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("%s read right after its put: %d bytes (%v), want %d", key, len(got), err, len(v))
		}
	}
	if w.confirms.on.Load() {
		t.Fatal("the client still sends unconfirmed ends to a master that refused them")
	}
	if got := m.ends.Load(); got < 1 || got > 2 {
		// the first served, then at most one refused (a refused ConfirmPuts may come first)
		t.Fatalf("%d PutEndUnconfirmed calls, want 1 or 2", got)
	}
	if got := w.UnconfirmedPuts(); got != 1 {
		t.Fatalf("%d puts ended unconfirmed, want the one the master served", got)
	}
	w.resv.mu.Lock()
	off := w.resv.off
	w.resv.mu.Unlock()
	if off || w.ReservedPuts() < 2 {
		t.Fatalf("reservations off %v, %d puts through them: the refusal turned them off", off, w.ReservedPuts())
	}
	unconfirmed := 0
	for i := range n {
		key := fmt.Sprintf("k%d", i)
		var info master.ObjectInfo
		srv.View(func(s *master.State) { info, _ = s.Query(key) })
		if info.Unconfirmed && unconfirmed == 0 {
			unconfirmed++ // the one served: its confirmation went to the "older" master, dropped
			continue
		}
		if info.Unconfirmed || len(info.Replicas) != 1 || info.Replicas[0].Status != api.ReplicaComplete {
			t.Fatalf("%s: unconfirmed %v, replicas %+v", key, info.Unconfirmed, info.Replicas)
		}
		if got := memview.Bytes(uintptr(info.Replicas[0].Addr), 4096); !bytes.Equal(got, pattern(4096, byte(i))) {
			t.Fatalf("%s: its replica holds other bytes than its value", key)
		}
	}
}

// unheard takes no confirmation: ConfirmPuts answers OK and applies nothing, and the keys an end
// carries for confirmation are dropped, as if the client had died right after its puts.
type unheard struct{ *master.Server }

func (m unheard) ConfirmPuts(context.Context, *api.BatchKeysRequest) (*api.Status, error) {
	return &api.Status{}, nil
}

func (m unheard) PutEndUnconfirmed(ctx context.Context, r *api.KeyRequest) (*api.Status, error) {
	r.Confirmed = nil
	return m.Server.PutEndUnconfirmed(ctx, r)
}

// TestUnconfirmedPutsOutliveTheirClient: puts acknowledged but never confirmed (the client
// gone before its confirmations reached the master) stay readable, exact, after the master
// expires their client, from their values alone.
func TestUnconfirmedPutsOutliveTheirClient(t *testing.T) {
	srv, addr := serveAs(t, func(s *master.Server) api.MasterServer { return unheard{s} })
	ctx := context.Background()
	newClient(t, addr, 64<<20)
	w := newClientWith(t, addr, 0, Config{Engine: engine.Config{ForceTCP: true}})
	want := map[string][]byte{}
	for i := range 30 {
		key := fmt.Sprintf("k%d", i)
		want[key] = pattern(4096, byte(i))
		if err := w.PutValue(ctx, key, want[key], PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	srv.View(func(s *master.State) { n = s.UnconfirmedPuts() })
	if n == 0 || uint64(n) != w.UnconfirmedPuts() {
		t.Fatalf("%d puts unconfirmed on the master, %d ended so by the client", n, w.UnconfirmedPuts())
	}
	if _, err := srv.Propose(ctx, master.Entry{Op: master.OpExpireClient, ClientID: w.ID()}); err != nil {
		t.Fatal(err)
	}
	reader := newClient(t, addr, 0)
	for key, v := range want {
		got, err := reader.GetValue(ctx, key)
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("%s after its client expired: %d bytes (%v), want %d", key, len(got), err, len(v))
		}
	}
}
