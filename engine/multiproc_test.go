package engine

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

const childEnv = "MC_ENGINE_TEST_CHILD"

const (
	childShared = 256<<20 + 1<<20 // 257 MiB shared buffer
	childPlain  = 4 << 20         // plain registered memory
)

// TestHelperChild is the target process of the two-process tests: it allocates a shared
// buffer and plain registered memory, prints their addresses and waits for stdin to close.
func TestHelperChild(t *testing.T) {
	if os.Getenv(childEnv) != "1" {
		t.Skip("helper process only")
	}
	e, err := New(context.Background(), Config{LocalServerName: "127.0.0.1"})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(2)
	}
	sh, err := e.AllocateShared(childShared)
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(2)
	}
	plain := anon(t, childPlain)
	for i := range plain {
		plain[i] = 0xC3
	}
	if err := e.RegisterLocalMemory(addr(plain), childPlain-4096, "cpu:0"); err != nil {
		fmt.Println("ERROR", err)
		os.Exit(2)
	}
	fmt.Printf("READY %s %d %d\n", e.SegmentName(), sh, addr(plain))
	io.Copy(io.Discard, os.Stdin)
	e.Close()
	os.Exit(0)
}

type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	name  string
	sh    uint64
	plain uint64
}

func startChild(t *testing.T) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperChild$", "-test.v=false")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: stdin}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "READY") || strings.HasPrefix(l, "ERROR") {
				lines <- l
			}
		}
		close(lines)
	}()
	select {
	case l, ok := <-lines:
		if !ok || !strings.HasPrefix(l, "READY") {
			t.Fatalf("child failed: %q", l)
		}
		if _, err := fmt.Sscanf(l, "READY %s %d %d", &c.name, &c.sh, &c.plain); err != nil {
			t.Fatalf("child line %q: %v", l, err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("child did not start")
	}
	return c
}

func TestTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	c := startChild(t)
	for _, mode := range []string{"shm", "tcp"} {
		t.Run(mode, func(t *testing.T) {
			e := newEngine(t, Config{TransferTimeout: 20 * time.Second, ForceTCP: mode == "tcp"})
			seg, err := e.OpenSegment(c.name)
			if err != nil {
				t.Fatal(err)
			}
			const local = 256<<20 + 8192
			src := anon(t, local)
			dst := anon(t, local)
			if err := e.RegisterLocalMemoryBatch([]Buffer{{addr(src), local}, {addr(dst), local}}, "cpu:0"); err != nil {
				t.Fatal(err)
			}
			fillFast(src, 0x21)
			ctx := context.Background()
			const guard = 64
			gb := anon(t, guard)
			for i := range gb {
				gb[i] = 0xEE
			}
			if err := e.RegisterLocalMemory(addr(gb), guard, "cpu:0"); err != nil {
				t.Fatal(err)
			}
			check := func(remote uint64, n int, what string) {
				t.Helper()
				// Guard bytes on both sides, then the data; read the whole span back.
				if err := e.TransferSync(ctx, []TransferRequest{
					{OpWrite, addr(gb), seg, remote - guard, guard},
					{OpWrite, addr(gb), seg, remote + uint64(n), guard},
					{OpWrite, addr(src), seg, remote, uint64(n)},
				}); err != nil {
					t.Fatalf("%s write %d: %v", what, n, err)
				}
				clear(dst[:guard])
				clear(dst[n : n+2*guard])
				if err := e.TransferSync(ctx, []TransferRequest{{OpRead, addr(dst), seg, remote - guard, uint64(n + 2*guard)}}); err != nil {
					t.Fatalf("%s read %d: %v", what, n, err)
				}
				if !bytes.Equal(dst[:guard], gb) || !bytes.Equal(dst[guard+n:n+2*guard], gb) {
					t.Fatalf("%s size %d: guard bytes changed", what, n)
				}
				if !bytes.Equal(dst[guard:guard+n], src[:n]) {
					t.Fatalf("%s size %d: data mismatch", what, n)
				}
			}
			for _, n := range []int{1, 3, 4096, 65537, 1<<20 + 13, 256 << 20} {
				check(c.sh+4096, n, "shared")
			}
			for _, n := range []int{1, 4, 1 << 20} {
				check(c.plain+4096, n, "plain")
			}
			tb := e.TransportBytes()
			if mode == "shm" && tb["shm"] < 256<<20 {
				t.Fatalf("shared memory did not go through shm: %v", tb)
			}
			if mode == "tcp" && tb["shm"] != 0 {
				t.Fatalf("MC_FORCE_TCP ignored: %v", tb)
			}

			// Batches of 1..1024 requests, interleaved offsets, read back in one batch.
			for _, nreq := range []int{1, 7, 1024} {
				const sz = 517
				b, _ := e.AllocateBatchID(nreq)
				reqs := make([]TransferRequest, nreq)
				for i := range reqs {
					reqs[i] = TransferRequest{OpWrite, addr(src) + uintptr(i*sz), seg, c.sh + uint64(i*sz), sz}
				}
				if err := e.SubmitTransfer(b, reqs); err != nil {
					t.Fatal(err)
				}
				if st, err := e.WaitBatch(ctx, b); st != StatusCompleted {
					t.Fatal(st, err)
				}
				e.FreeBatchID(b)
				for i := range reqs {
					reqs[i] = TransferRequest{OpRead, addr(dst) + uintptr(i*sz), seg, c.sh + uint64(i*sz), sz}
				}
				clear(dst[:nreq*sz])
				if err := e.TransferSync(ctx, reqs); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(dst[:nreq*sz], src[:nreq*sz]) {
					t.Fatalf("batch of %d: mismatch", nreq)
				}
			}

			// Writes outside the target's buffers are refused before anything moves; the
			// bytes around the plain buffer's end stay as they were.
			plainEnd := c.plain + childPlain - 4096
			for _, r := range []TransferRequest{
				{OpWrite, addr(src), seg, plainEnd - 8, 16},
				{OpWrite, addr(src), seg, c.sh + childShared - 1, 2},
				{OpWrite, addr(src), seg, c.sh - 1, 1},
				{OpRead, addr(dst), seg, plainEnd, 1},
			} {
				if err := e.TransferSync(ctx, []TransferRequest{r}); Code(err) != CodeAddressNotRegistered {
					t.Fatalf("out of range %+v: %v", r, err)
				}
			}
			if err := e.TransferSync(ctx, []TransferRequest{{OpRead, addr(dst), seg, plainEnd - 8, 8}}); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dst[:8], bytes.Repeat([]byte{0xC3}, 8)) {
				t.Fatalf("bytes before the end changed: %x", dst[:8])
			}
		})
	}
}

func TestKilledPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	for _, mode := range []string{"shm", "tcp"} {
		t.Run(mode, func(t *testing.T) {
			c := startChild(t)
			e := newEngine(t, Config{TransferTimeout: 3 * time.Second, ForceTCP: mode == "tcp"})
			seg, err := e.OpenSegment(c.name)
			if err != nil {
				t.Fatal(err)
			}
			src := shared(t, e, 1<<20)
			ctx := context.Background()
			if err := e.TransferSync(ctx, []TransferRequest{{OpWrite, addr(src), seg, c.sh, 1 << 20}}); err != nil {
				t.Fatal(err)
			}
			c.cmd.Process.Signal(syscall.SIGKILL)
			c.cmd.Process.Wait()
			start := time.Now()
			b, _ := e.AllocateBatchID(2)
			if err := e.SubmitTransfer(b, []TransferRequest{
				{OpWrite, addr(src), seg, c.sh, 1 << 20},
				{OpRead, addr(src), seg, c.sh, 4},
			}); err != nil {
				t.Fatal(err)
			}
			st, err := e.WaitBatch(ctx, b)
			if st != StatusFailed || err == nil {
				t.Fatalf("dead peer: %v %v", st, err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("took %v", d)
			}
			// Every task ends; the batch can be freed.
			if st, _ := e.GetTransferStatus(b, 0); st.Status != StatusFailed && st.Status != StatusTimeout {
				t.Fatalf("task 0 %v", st.Status)
			}
			b2, _ := e.batch(b)
			b2.wait(ctx, true)
			if err := e.FreeBatchID(b); err != nil {
				t.Fatal(err)
			}
			if err := e.ProbePeer(c.name); err == nil {
				t.Fatal("probe of a dead peer succeeded")
			}
		})
	}
}
