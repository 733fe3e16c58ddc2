package client

import (
	"bytes"
	"context"
	"fmt"
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
