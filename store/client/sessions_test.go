package client

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/internal/memview"
	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/master"
)

func span(buf []byte, at int, off, size uint64) Span {
	return Span{Off: off, Addr: memview.Addr(buf) + uintptr(at), Size: size}
}

// TestSessionsLayerwise: a writer fills objects on the other client's segment a layer at a time
// through a put session (registered and unregistered sources), a reader reads them back a layer
// at a time through a get session (registered and unregistered destinations); over shared
// memory and over tcp (the engine's batches).
func TestSessionsLayerwise(t *testing.T) {
	for _, tcp := range []bool{false, true} {
		t.Run(fmt.Sprintf("forceTCP=%v", tcp), func(t *testing.T) {
			_, addr := startMaster(t)
			base := Config{Engine: engine.Config{ForceTCP: tcp}}
			writer := newClientWith(t, addr, 16<<20, base)
			reader := newClientWith(t, addr, 16<<20, base)
			ctx := context.Background()
			const page, layers = 64 << 10, 4
			keys := []string{"a", "b"}
			want := [][]byte{pattern(page*layers, 1), pattern(page*layers, 2)}
			reg := registeredBuf(t, writer, page*layers, 0)
			copy(reg, want[0])
			plain := bytes.Clone(want[1]) // not registered: staged
			cfg := api.ReplicateConfig{ReplicaNum: 1, PreferredSegments: []string{reader.Hostname()}}
			for i, err := range writer.PutSessionStart(ctx, keys, []uint64{page * layers, page * layers}, cfg) {
				if err != nil {
					t.Fatalf("start %s: %v", keys[i], err)
				}
			}
			for l := layers - 1; l >= 0; l-- {
				off := uint64(l * page)
				got, errs := writer.PutSessionRanges(ctx, []SpanGroup{
					{Key: "a", Spans: []Span{span(reg, l*page, off, page/2), span(reg, l*page+page/2, off+page/2, page/2)}},
					{Key: "b", Spans: []Span{span(plain, l*page, off, page)}},
				})
				for i := range got {
					if errs[i] != nil || got[i] != page {
						t.Fatalf("layer %d key %d: %d %v", l, i, got[i], errs[i])
					}
				}
			}
			if _, err := reader.GetValue(ctx, "a"); !api.Is(err, api.REPLICA_IS_NOT_READY) {
				t.Fatalf("get before the end: %v", err)
			}
			for i, err := range writer.PutSessionEnd(ctx, keys, false) {
				if err != nil {
					t.Fatalf("end %s: %v", keys[i], err)
				}
			}
			for i, err := range reader.GetSessionStart(ctx, keys) {
				if err != nil {
					t.Fatalf("get session %s: %v", keys[i], err)
				}
			}
			out := registeredBuf(t, reader, page*layers, 0)
			outPlain := make([]byte, page*layers)
			for l := 0; l < layers; l++ {
				off := uint64(l * page)
				got, errs := reader.GetSessionRanges(ctx, []SpanGroup{
					{Key: "a", Spans: []Span{span(out, l*page, off, page)}},
					{Key: "b", Spans: []Span{span(outPlain, l*page, off, page/4), span(outPlain, l*page+page/4, off+page/4, 3*page/4)}},
				})
				for i := range got {
					if errs[i] != nil || got[i] != page {
						t.Fatalf("read layer %d key %d: %d %v", l, i, got[i], errs[i])
					}
				}
			}
			if !bytes.Equal(out, want[0]) || !bytes.Equal(outPlain, want[1]) {
				t.Fatal("the bytes read differ from the bytes written")
			}
			reader.GetSessionEnd(keys)
			_, errs := reader.GetSessionRanges(ctx, []SpanGroup{{Key: "a", Spans: []Span{span(out, 0, 0, 1)}}})
			wantCode(t, "read after the end", errs[0], api.INVALID_PARAMS)
		})
	}
}

// TestPutSessionEndWaitsForWrites: an end that starts while writes are in flight seals the
// session (a write starting after it is refused) and waits for them: the object it makes
// readable holds every byte those writes wrote.
func TestPutSessionEndWaitsForWrites(t *testing.T) {
	_, addr := startMaster(t)
	c := newClient(t, addr, 64<<20)
	ctx := context.Background()
	const n = 8 << 20
	src := pattern(n, 7)
	if err := c.PutSessionStart(ctx, []string{"k"}, []uint64{n}, api.ReplicateConfig{ReplicaNum: 1})[0]; err != nil {
		t.Fatal(err)
	}
	// a write is in flight: its count is held while end starts
	s := c.sessionsLocked()
	s.put["k"].inflight++
	s.mu.Unlock()
	ended := make(chan error, 1)
	go func() { ended <- c.PutSessionEnd(ctx, []string{"k"}, false)[0] }()
	for sealed := false; !sealed; {
		s = c.sessionsLocked()
		sealed = s.put["k"].sealed
		s.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	_, errs := c.PutSessionRanges(ctx, []SpanGroup{{Key: "k", Spans: []Span{span(src, 0, 0, 1)}}})
	wantCode(t, "a write after the seal", errs[0], api.INVALID_PARAMS)
	select {
	case err := <-ended:
		t.Fatalf("end returned (%v) with a write in flight", err)
	default:
	}
	// the write in flight completes (every byte), then releases its count
	s = c.sessionsLocked()
	ps := s.put["k"]
	s.mu.Unlock()
	if _, err := c.writeSpans(ctx, ps, []Span{span(src, 0, 0, n)}, c.regionTable()); err != nil {
		t.Fatal(err)
	}
	s = c.sessionsLocked()
	ps.inflight--
	s.idle.Broadcast()
	s.mu.Unlock()
	if err := <-ended; err != nil {
		t.Fatal(err)
	}
	got, err := c.GetValue(ctx, "k")
	if err != nil || !bytes.Equal(got, src) {
		t.Fatalf("get after the end: %d bytes, %v", len(got), err)
	}
}

// TestSessionsConcurrentKeys: goroutines each run a whole put session and get session on their
// own keys at once; every object reads back exactly.
func TestSessionsConcurrentKeys(t *testing.T) {
	_, addr := startMaster(t, func(c *master.Config) { c.DefaultKVLeaseTTL = 5 * time.Second })
	c := newClient(t, addr, 64<<20)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			key := fmt.Sprintf("w%d", w)
			val := pattern(300000+w, byte(w))
			if err := c.PutSessionStart(ctx, []string{key}, []uint64{uint64(len(val))}, api.ReplicateConfig{ReplicaNum: 1})[0]; err != nil {
				errs <- err
				return
			}
			for off := 0; off < len(val); off += 70000 {
				end := min(off+70000, len(val))
				got, e := c.PutSessionRanges(ctx, []SpanGroup{{Key: key, Spans: []Span{span(val, off, uint64(off), uint64(end-off))}}})
				if e[0] != nil || got[0] != uint64(end-off) {
					errs <- fmt.Errorf("%s write at %d: %d %v", key, off, got[0], e[0])
					return
				}
			}
			if err := c.PutSessionEnd(ctx, []string{key}, false)[0]; err != nil {
				errs <- err
				return
			}
			if err := c.GetSessionStart(ctx, []string{key})[0]; err != nil {
				errs <- err
				return
			}
			out := make([]byte, len(val))
			got, e := c.GetSessionRanges(ctx, []SpanGroup{{Key: key, Spans: []Span{span(out, 0, 0, uint64(len(out)))}}})
			if e[0] != nil || got[0] != uint64(len(out)) || !bytes.Equal(out, val) {
				errs <- fmt.Errorf("%s read: %d %v", key, got[0], e[0])
			}
			c.GetSessionEnd([]string{key})
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
