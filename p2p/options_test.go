package p2p

import (
	"bytes"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/wire"
)

// TestOptions: the zero Options take the defaults, and the knobs the configuration layer
// sets (NoStreams, ProbeInterval) reach the endpoint.
func TestOptions(t *testing.T) {
	for _, c := range []struct {
		opts       Options
		credits    int
		cellBytes  int
		probeEvery time.Duration
	}{
		{Options{}, DefaultCredits, DefaultCellBytes, 200 * time.Millisecond},
		{Options{Credits: 2, CellBytes: 100, ProbeInterval: 30 * time.Millisecond}, 2, 128, 30 * time.Millisecond},
		{Options{Credits: -1, CellBytes: -1, ProbeInterval: -time.Second}, DefaultCredits, DefaultCellBytes, 200 * time.Millisecond},
	} {
		ep, err := New(newHub().fabric("rank0"), 0, 1, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		if ep.lay.K != c.credits || ep.lay.S != c.cellBytes || ep.probeEvery != c.probeEvery {
			t.Errorf("%+v: credits %d, cell bytes %d, probe interval %v; want %d, %d, %v",
				c.opts, ep.lay.K, ep.lay.S, ep.probeEvery, c.credits, c.cellBytes, c.probeEvery)
		}
		ep.Close()
	}

	// NoStreams: plain writes even where the fabric opens streams (so the peers do not count
	// as reached over the network), and messages still go through.
	for _, noStreams := range []bool{false, true} {
		opts := small
		opts.NoStreams = noStreams
		eps, _ := mkEndpointsOn(t, 2, opts, func(h *memHub, name string) Fabric { return h.netFabric(name) })
		hasStream := eps[0].peers[1].link.Load().stream != nil
		if hasStream == noStreams || eps[0].netPeers.Load() == noStreams {
			t.Fatalf("NoStreams %v: stream %v, every peer over the network %v", noStreams, hasStream, eps[0].netPeers.Load())
		}
		ctx := ctxT(t, 10*time.Second)
		want := data(1000, 7)
		if err := eps[0].Send(ctx, 1, wire.UserTag(1), want); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1000)
		if n, err := eps[1].Recv(ctx, 0, wire.UserTag(1), buf); err != nil || n != 1000 || !bytes.Equal(buf, want) {
			t.Fatalf("NoStreams %v: n=%d err=%v, data equal: %v", noStreams, n, err, bytes.Equal(buf, want))
		}
	}
}
