package engine

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/engine/transport/tcp"
	"github.com/mooncake-go/mooncake/internal/futex"
	"github.com/mooncake-go/mooncake/internal/memview"
)

// Stream writes are applied in order: a signal word written after data in a later Write is
// never seen before that data; a write the target refuses over tcp fails a later Write and
// the stream stays broken.
func TestStream(t *testing.T) {
	for _, mode := range []string{"shm", "tcp"} {
		t.Run(mode, func(t *testing.T) {
			ini, tgt, seg, sh, plain, src := pair(t, mode == "tcp")
			st, err := ini.OpenStream(seg)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			word := memview.Uint32(addr(sh))
			data := sh[4096 : 4096+(1<<20)]
			ctx := context.Background()
			for round := uint32(1); round <= 20; round++ {
				// Two Writes: the data in halves, then the signal word on its own.
				for i := range 1 << 20 {
					src[i] = byte(round)
				}
				*(*uint32)(memview.Pointer(addr(src) + 2<<20)) = round
				if err := st.Write(ctx, []TransferRequest{{OpWrite, addr(src), seg, uint64(addr(data)), 512 << 10}}); err != nil {
					t.Fatal(err)
				}
				if err := st.Write(ctx, []TransferRequest{
					{OpWrite, addr(src) + 512<<10, seg, uint64(addr(data)) + 512<<10, 512 << 10},
					{OpWrite, addr(src) + 2<<20, seg, uint64(addr(sh)), 4},
				}); err != nil {
					t.Fatal(err)
				}
				deadline := time.Now().Add(5 * time.Second)
				for atomic.LoadUint32(word) != round {
					if time.Now().After(deadline) {
						t.Fatalf("round %d: the signal never came", round)
					}
					futex.Wait(word, round-1, 100*time.Millisecond)
				}
				if data[0] != byte(round) || data[len(data)-1] != byte(round) {
					t.Fatalf("round %d: signal before data", round)
				}
			}
			if st := ini.TransportBytes(); (mode == "tcp") != (st["tcp"] > 0) {
				t.Fatalf("transports %v", st)
			}
			// Sources need not be registered (Go memory here).
			goSrc := bytes.Repeat([]byte{0xA5}, 8192)
			if err := st.Write(ctx, []TransferRequest{{OpWrite, addr(goSrc), seg, uint64(addr(data)), uint64(len(goSrc))}}); err != nil {
				t.Fatal(err)
			}
			if err := st.Write(ctx, []TransferRequest{{OpWrite, addr(src) + 2<<20, seg, uint64(addr(sh)), 4}}); err != nil {
				t.Fatal(err)
			}
			// The signal word keeps its value, so the data is checked after a write that
			// follows it on the stream has surely landed: poll with a deadline.
			for end := time.Now().Add(5 * time.Second); data[8191] != 0xA5; time.Sleep(time.Millisecond) {
				if time.Now().After(end) {
					t.Fatal("a write from an unregistered source never landed")
				}
			}
			// Reads and other segments are refused up front.
			if err := st.Write(ctx, []TransferRequest{{OpRead, addr(src), seg, uint64(addr(data)), 8}}); !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("READ on a stream: %v", err)
			}
			// A write the target refuses: plain memory (tcp in both modes) that the target
			// unregisters behind the initiator's back (its cached descriptor still has it).
			if err := st.Write(ctx, []TransferRequest{{OpWrite, addr(src), seg, uint64(addr(plain)), 64}}); err != nil {
				t.Fatal(err)
			}
			if err := tgt.UnregisterLocalMemory(addr(plain)); err != nil {
				t.Fatal(err)
			}
			var failed error
			for i := 0; i < 400 && failed == nil; i++ {
				failed = st.Write(ctx, []TransferRequest{{OpWrite, addr(src), seg, uint64(addr(plain)), 64}})
				if failed == nil {
					time.Sleep(5 * time.Millisecond)
				}
			}
			var re *tcp.RemoteError
			if !errors.As(failed, &re) {
				t.Fatalf("the refused write did not fail the stream: %v", failed)
			}
			if err := st.Write(ctx, []TransferRequest{{OpWrite, addr(src), seg, uint64(addr(data)), 8}}); err == nil {
				t.Fatal("a broken stream accepted a write")
			}
		})
	}
}

// TestWatchWord: a signal write that arrives over tcp to a watched word leaves a token on its
// channel after the word is stored; writes to other words and larger writes do not; after
// stop the word is no longer watched. A hook runs after the store, and its write leaves a
// token only when the hook does not take it.
func TestWatchWord(t *testing.T) {
	ini, tgt, seg, sh, _, src := pair(t, true)
	ch, stop := tgt.WatchWord(addr(sh), nil)
	other, stopOther := tgt.WatchWord(addr(sh)+64, nil)
	defer stopOther()
	hooked := make(chan uint32, 4)
	hookCh, stopHooked := tgt.WatchWord(addr(sh)+192, func() bool {
		v := atomic.LoadUint32(memview.Uint32(addr(sh) + 192))
		hooked <- v
		return v%2 == 1 // odd values: handled, no token
	})
	defer stopHooked()
	st, err := ini.OpenStream(seg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	write := func(off uint64, n uint64, v uint32) {
		t.Helper()
		*(*uint32)(memview.Pointer(addr(src))) = v
		if err := st.Write(ctx, []TransferRequest{{OpWrite, addr(src), seg, uint64(addr(sh)) + off, n}}); err != nil {
			t.Fatal(err)
		}
	}
	for v := uint32(1); v <= 3; v++ {
		write(0, 4, v)
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("write %d: no token", v)
		}
		if got := atomic.LoadUint32(memview.Uint32(addr(sh))); got != v {
			t.Fatalf("token before the store: word %d, want %d", got, v)
		}
	}
	write(4096, 8, 9) // not a signal write
	write(128, 4, 9)  // a signal write to an unwatched word
	write(64, 4, 9)   // ... and to the other watched one: the streams order it after the two above
	select {
	case <-other:
	case <-time.After(5 * time.Second):
		t.Fatal("no token for the other word")
	}
	select {
	case <-ch:
		t.Fatal("a token for writes elsewhere")
	default:
	}
	stop()
	write(0, 4, 10)
	write(64, 4, 10)
	<-other // the second write came after the first
	select {
	case <-ch:
		t.Fatal("a token after stop")
	default:
	}
	for _, v := range []uint32{7, 8} {
		write(192, 4, v)
		if got := <-hooked; got != v {
			t.Fatalf("the hook saw %d, want %d (it runs after the store)", got, v)
		}
		write(64, 4, 11+v) // ordered after the hooked write, whose hook has returned by its token
		<-other
		select {
		case <-hookCh:
			if v%2 == 1 {
				t.Fatalf("a token for %d, which the hook took", v)
			}
		default:
			if v%2 == 0 {
				t.Fatalf("no token for %d, which the hook did not take", v)
			}
		}
	}
}

// TestLandOn: a large write over tcp into a registered zone goes where the zone's hook says (a
// Go buffer here), and the target keeps its bytes; a write the hook declines, one outside the
// zone and any after stop reach their target.
func TestLandOn(t *testing.T) {
	ini, tgt, seg, sh, _, src := pair(t, true)
	fillFast(src, 3)
	zone := addr(sh) + 1<<20
	alt := make([]byte, 64<<10)
	offers := make(chan uintptr, 8)
	stop := tgt.LandOn(zone, 1<<20, func(a uintptr, n int, interrupt func()) ([]byte, func(bool)) {
		offers <- a
		if a != zone || n != len(alt) {
			return nil, nil
		}
		return alt, func(ok bool) {
			if !ok {
				t.Error("the redirected read failed")
			}
		}
	})
	ctx := context.Background()
	write := func(dst uintptr, n int) {
		t.Helper()
		if err := ini.TransferSync(ctx, []TransferRequest{{OpWrite, addr(src), seg, uint64(dst), uint64(n)}}); err != nil {
			t.Fatal(err)
		}
	}
	write(zone, len(alt))
	if <-offers != zone || !bytes.Equal(alt, src[:len(alt)]) || sh[1<<20] != 0 || sh[1<<20+len(alt)-1] != 0 {
		t.Fatal("the write into the zone did not go to the hook's buffer alone")
	}
	write(zone+128<<10, len(alt)) // declined
	if <-offers != zone+128<<10 || !bytes.Equal(sh[1<<20+128<<10:][:len(alt)], src[:len(alt)]) {
		t.Fatal("a declined write did not reach its target")
	}
	write(addr(sh), len(alt)) // outside the zone
	stop()
	write(zone, len(alt)) // after stop
	select {
	case a := <-offers:
		t.Fatalf("offered a write to %#x outside the zone or after stop", a)
	default:
	}
	if !bytes.Equal(sh[:len(alt)], src[:len(alt)]) || !bytes.Equal(sh[1<<20:][:len(alt)], src[:len(alt)]) {
		t.Fatal("a write outside the zone or after stop did not reach its target")
	}
}
