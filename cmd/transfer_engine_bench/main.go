// Command transfer_engine_bench measures the transfer engine, like Mooncake's
// transfer_engine_bench.
//
//	transfer_engine_bench --mode=target --local_server_name=127.0.0.1
//	transfer_engine_bench --mode=initiator --segment_id=127.0.0.1:15123 --operation=write --block_size=67108864
//	transfer_engine_bench --mode=baseline --block_size=67108864   # memcpy and plain Go socket copy
//
// The target allocates one shared buffer (--buffer_size) and serves until interrupted. The
// initiator writes or reads --batch_size blocks of --block_size per batch from --threads
// goroutines for --duration seconds, and prints "throughput X GB/s". A same-host target is
// reached through shared memory; set MC_FORCE_TCP=1 to force tcp.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/config"
	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/internal/memview"
)

var (
	mode       = flag.String("mode", "initiator", "initiator, target or baseline")
	metaServer = flag.String("metadata_server", "P2PHANDSHAKE", "metadata connection string")
	localName  = flag.String("local_server_name", "", "local segment name (host or host:port)")
	segmentID  = flag.String("segment_id", "", "target segment name (initiator)")
	protocol   = flag.String("protocol", "tcp", "transport protocol")
	deviceName = flag.String("device_name", "", "device name (unused by tcp)")
	operation  = flag.String("operation", "write", "read or write")
	bufferSize = flag.Uint64("buffer_size", 1<<30, "buffer size in bytes")
	batchSize  = flag.Int("batch_size", 128, "requests per batch")
	blockSize  = flag.Uint64("block_size", 65536, "bytes per request")
	threads    = flag.Int("threads", 1, "initiator goroutines")
	duration   = flag.Float64("duration", 10, "test duration in seconds")
	reportUnit = flag.String("report_unit", "GB", "GB|GiB|Gb|MB|MiB|Mb|KB|KiB|Kb")
)

var units = map[string]float64{
	"GB": 1e9, "GiB": 1 << 30, "Gb": 1e9 / 8,
	"MB": 1e6, "MiB": 1 << 20, "Mb": 1e6 / 8,
	"KB": 1e3, "KiB": 1 << 10, "Kb": 1e3 / 8,
}

func rate(bytes uint64, d time.Duration) string {
	u, ok := units[*reportUnit]
	if !ok {
		u, *reportUnit = 1e9, "GB"
	}
	return fmt.Sprintf("%.2f %s/s", float64(bytes)/d.Seconds()/u, *reportUnit)
}

func die(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "transfer_engine_bench: "+format+"\n", args...)
	os.Exit(1)
}

func anon(n uint64) []byte {
	b, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		die("mmap %d bytes: %v", n, err)
	}
	for i := 0; i < len(b); i += 4096 {
		b[i] = byte(i >> 12)
	}
	return b
}

func main() {
	flag.Parse()
	switch *mode {
	case "target":
		target()
	case "initiator":
		initiator()
	case "baseline":
		baseline()
	default:
		die("unknown --mode %q (initiator, target or baseline)", *mode)
	}
}

func newEngine() *engine.Engine {
	e, err := engine.New(context.Background(), config.Engine(engine.Config{
		LocalServerName: *localName, MetadataServer: *metaServer, Protocol: *protocol, DeviceName: *deviceName,
	}))
	if err != nil {
		die("%v", err)
	}
	return e
}

func target() {
	e := newEngine()
	defer e.Close()
	a, err := e.AllocateShared(*bufferSize)
	if err != nil {
		die("%v", err)
	}
	b := memview.Bytes(a, int(*bufferSize))
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1 // fault the pages in once, as a long-running target would have
	}
	fmt.Printf("Transfer segment: %s\n", e.SegmentName())
	fmt.Printf("READY %s\n", e.SegmentName())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
}

func initiator() {
	if *segmentID == "" {
		die("--segment_id is required for the initiator")
	}
	if *threads <= 0 || *batchSize <= 0 || *blockSize == 0 {
		die("--threads, --batch_size and --block_size must be positive")
	}
	op := engine.OpWrite
	switch *operation {
	case "write":
	case "read":
		op = engine.OpRead
	default:
		die("unknown --operation %q", *operation)
	}
	e := newEngine()
	defer e.Close()
	seg, err := e.OpenSegment(*segmentID)
	if err != nil {
		die("%v", err)
	}
	d, err := e.SegmentDescriptor(seg)
	if err != nil || len(d.Buffers) == 0 {
		die("segment %q has no buffers: %v", *segmentID, err)
	}
	remote := d.Buffers[0]
	size := min(*bufferSize, remote.Length)
	perThread := size / uint64(*threads)
	if perThread < *blockSize {
		die("--buffer_size %d is too small for %d threads of --block_size %d", size, *threads, *blockSize)
	}
	local := anon(size)
	if err := e.RegisterLocalMemory(memview.Addr(local), size, "cpu:0"); err != nil {
		die("%v", err)
	}
	// Warm-up: one pass over the buffer maps the target's pages (shm) and opens connections.
	var warm []engine.TransferRequest
	for off := uint64(0); off+*blockSize <= size; off += *blockSize {
		warm = append(warm, engine.TransferRequest{Opcode: op, Source: memview.Addr(local) + uintptr(off), TargetID: seg, TargetOffset: remote.Addr + off, Length: *blockSize})
	}
	if err := e.TransferSync(context.Background(), warm); err != nil {
		die("warm-up: %v", err)
	}
	var total atomic.Uint64
	var batches atomic.Uint64
	var failed atomic.Bool
	stop := time.Now().Add(time.Duration(*duration * float64(time.Second)))
	start := time.Now()
	var wg sync.WaitGroup
	for th := 0; th < *threads; th++ {
		wg.Add(1)
		go func(th int) {
			defer wg.Done()
			base := uint64(th) * perThread
			slots := perThread / *blockSize
			reqs := make([]engine.TransferRequest, *batchSize)
			next := uint64(0)
			for time.Now().Before(stop) && !failed.Load() {
				for i := range reqs {
					off := base + (next%slots)*(*blockSize)
					next++
					reqs[i] = engine.TransferRequest{Opcode: op, Source: memview.Addr(local) + uintptr(off), TargetID: seg, TargetOffset: remote.Addr + off, Length: *blockSize}
				}
				b, err := e.AllocateBatchID(len(reqs))
				if err != nil {
					die("%v", err)
				}
				if err := e.SubmitTransfer(b, reqs); err != nil {
					die("%v", err)
				}
				st, err := e.WaitBatch(context.Background(), b)
				if st != engine.StatusCompleted {
					fmt.Fprintf(os.Stderr, "batch failed: %v\n", err)
					failed.Store(true)
				}
				for e.FreeBatchID(b) != nil {
					time.Sleep(time.Millisecond)
				}
				total.Add(uint64(len(reqs)) * *blockSize)
				batches.Add(1)
			}
		}(th)
	}
	wg.Wait()
	el := time.Since(start)
	if failed.Load() {
		os.Exit(1)
	}
	tb := e.TransportBytes()
	via := "tcp"
	if tb["shm"] > tb["tcp"] {
		via = "shm"
	}
	fmt.Printf("Test completed: duration %.2f, batch count %d, transport %s, throughput %s\n", el.Seconds(), batches.Load(), via, rate(total.Load(), el))
}

// baseline measures single-thread memcpy of --block_size blocks and a plain Go loopback
// socket copy, the yardsticks for shm and tcp.
func baseline() {
	size := max(*bufferSize, *blockSize)
	src, dst := anon(size), anon(size)
	slots := size / *blockSize
	dur := time.Duration(*duration * float64(time.Second))
	var n uint64
	start := time.Now()
	for i := uint64(0); i%64 != 0 || time.Since(start) < dur; i++ {
		off := (i % slots) * *blockSize
		copy(dst[off:off+*blockSize], src[off:off+*blockSize])
		n += *blockSize
	}
	fmt.Printf("memcpy throughput %s\n", rate(n, time.Since(start)))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		die("%v", err)
	}
	var got atomic.Uint64
	done := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			die("%v", err)
		}
		defer close(done)
		for i := uint64(0); ; i++ {
			off := (i % slots) * *blockSize
			if _, err := io.ReadFull(c, dst[off:off+*blockSize]); err != nil {
				return
			}
			got.Add(*blockSize)
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		die("%v", err)
	}
	start = time.Now()
	for i := uint64(0); time.Since(start) < dur; i++ {
		off := (i % slots) * *blockSize
		if _, err := c.Write(src[off : off+*blockSize]); err != nil {
			die("%v", err)
		}
	}
	c.Close()
	<-done
	fmt.Printf("socket throughput %s\n", rate(got.Load(), time.Since(start)))
}
