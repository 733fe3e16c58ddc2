package benchcmd

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
	"github.com/mooncake-go/mooncake/internal/cli"
	"github.com/mooncake-go/mooncake/internal/gcfloor"
	"github.com/mooncake-go/mooncake/internal/memview"
)

// Name is the command's name, the one the multi-call binary answers to.
const Name = "transfer_engine_bench"

// options are the command's flags.
type options struct {
	mode, metaServer, localName, segmentID, protocol, deviceName, operation, reportUnit string
	bufferSize, blockSize                                                               uint64
	batchSize, threads                                                                  int
	duration                                                                            float64
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet(Name, flag.ContinueOnError)
	fs.StringVar(&o.mode, "mode", "initiator", "initiator, target or baseline")
	fs.StringVar(&o.metaServer, "metadata_server", "P2PHANDSHAKE", "metadata connection string")
	fs.StringVar(&o.localName, "local_server_name", "", "local segment name (host or host:port)")
	fs.StringVar(&o.segmentID, "segment_id", "", "target segment name (initiator)")
	fs.StringVar(&o.protocol, "protocol", "tcp", "transport protocol")
	fs.StringVar(&o.deviceName, "device_name", "", "device name (unused by tcp)")
	fs.StringVar(&o.operation, "operation", "write", "read or write")
	fs.Uint64Var(&o.bufferSize, "buffer_size", 1<<30, "buffer size in bytes")
	fs.IntVar(&o.batchSize, "batch_size", 128, "requests per batch")
	fs.Uint64Var(&o.blockSize, "block_size", 65536, "bytes per request")
	fs.IntVar(&o.threads, "threads", 1, "initiator goroutines")
	fs.Float64Var(&o.duration, "duration", 10, "test duration in seconds")
	fs.StringVar(&o.reportUnit, "report_unit", "GB", "GB|GiB|Gb|MB|MiB|Mb|KB|KiB|Kb")
	if err := fs.Parse(args); err != nil {
		return nil, cli.Usagef("bad command line: %w", err)
	}
	if fs.NArg() > 0 {
		return nil, cli.Usagef("unexpected argument %q", fs.Arg(0))
	}
	return o, nil
}

var units = map[string]float64{
	"GB": 1e9, "GiB": 1 << 30, "Gb": 1e9 / 8,
	"MB": 1e6, "MiB": 1 << 20, "Mb": 1e6 / 8,
	"KB": 1e3, "KiB": 1 << 10, "Kb": 1e3 / 8,
}

func (o *options) rate(bytes uint64, d time.Duration) string {
	u, ok := units[o.reportUnit]
	if !ok {
		u, o.reportUnit = 1e9, "GB"
	}
	return fmt.Sprintf("%.2f %s/s", float64(bytes)/d.Seconds()/u, o.reportUnit)
}

func die(format string, args ...any) {
	fmt.Fprintf(os.Stderr, Name+": "+format+"\n", args...)
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

// Main runs transfer_engine_bench with args (the command line after the program name) and
// returns the exit status: 0, 1 when it failed, 2 for a bad command line.
func Main(args []string) int {
	gcfloor.Start(config.GCHeapFloor()) // internal/gcfloor
	o, err := parseFlags(args)
	if err != nil {
		return cli.Code(Name, err)
	}
	switch o.mode {
	case "target":
		o.target()
	case "initiator":
		o.initiator()
	case "baseline":
		o.baseline()
	default:
		return cli.Code(Name, cli.Usagef("unknown --mode %q (initiator, target or baseline)", o.mode))
	}
	return 0
}

func (o *options) newEngine() *engine.Engine {
	e, err := engine.New(context.Background(), config.Engine(engine.Config{
		LocalServerName: o.localName, MetadataServer: o.metaServer, Protocol: o.protocol, DeviceName: o.deviceName,
	}))
	if err != nil {
		die("%v", err)
	}
	return e
}

func (o *options) target() {
	e := o.newEngine()
	defer e.Close()
	a, err := e.AllocateShared(o.bufferSize)
	if err != nil {
		die("%v", err)
	}
	b := memview.Bytes(a, int(o.bufferSize))
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1 // fault the pages in once, as a long-running target would have
	}
	fmt.Printf("Transfer segment: %s\n", e.SegmentName())
	fmt.Printf("READY %s\n", e.SegmentName())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
}

func (o *options) initiator() {
	if o.segmentID == "" {
		die("--segment_id is required for the initiator")
	}
	if o.threads <= 0 || o.batchSize <= 0 || o.blockSize == 0 {
		die("--threads, --batch_size and --block_size must be positive")
	}
	op := engine.OpWrite
	switch o.operation {
	case "write":
	case "read":
		op = engine.OpRead
	default:
		die("unknown --operation %q", o.operation)
	}
	e := o.newEngine()
	defer e.Close()
	seg, err := e.OpenSegment(o.segmentID)
	if err != nil {
		die("%v", err)
	}
	d, err := e.SegmentDescriptor(seg)
	if err != nil || len(d.Buffers) == 0 {
		die("segment %q has no buffers: %v", o.segmentID, err)
	}
	remote := d.Buffers[0]
	size := min(o.bufferSize, remote.Length)
	perThread := size / uint64(o.threads)
	if perThread < o.blockSize {
		die("--buffer_size %d is too small for %d threads of --block_size %d", size, o.threads, o.blockSize)
	}
	local := anon(size)
	if err := e.RegisterLocalMemory(memview.Addr(local), size, "cpu:0"); err != nil {
		die("%v", err)
	}
	// Warm-up: one pass over the buffer maps the target's pages (shm) and opens connections.
	var warm []engine.TransferRequest
	for off := uint64(0); off+o.blockSize <= size; off += o.blockSize {
		warm = append(warm, engine.TransferRequest{Opcode: op, Source: memview.Addr(local) + uintptr(off), TargetID: seg, TargetOffset: remote.Addr + off, Length: o.blockSize})
	}
	if err := e.TransferSync(context.Background(), warm); err != nil {
		die("warm-up: %v", err)
	}
	var total atomic.Uint64
	var batches atomic.Uint64
	var failed atomic.Bool
	stop := time.Now().Add(time.Duration(o.duration * float64(time.Second)))
	start := time.Now()
	var wg sync.WaitGroup
	for th := 0; th < o.threads; th++ {
		wg.Add(1)
		go func(th int) {
			defer wg.Done()
			base := uint64(th) * perThread
			blocks := perThread / o.blockSize
			reqs := make([]engine.TransferRequest, o.batchSize)
			next := uint64(0)
			for time.Now().Before(stop) && !failed.Load() {
				for i := range reqs {
					off := base + (next%blocks)*(o.blockSize)
					next++
					reqs[i] = engine.TransferRequest{Opcode: op, Source: memview.Addr(local) + uintptr(off), TargetID: seg, TargetOffset: remote.Addr + off, Length: o.blockSize}
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
				total.Add(uint64(len(reqs)) * o.blockSize)
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
	fmt.Printf("Test completed: duration %.2f, batch count %d, transport %s, throughput %s\n", el.Seconds(), batches.Load(), via, o.rate(total.Load(), el))
}

// baseline measures single-thread memcpy of --block_size blocks and a plain Go loopback
// socket copy, the yardsticks for shm and tcp.
func (o *options) baseline() {
	size := max(o.bufferSize, o.blockSize)
	src, dst := anon(size), anon(size)
	blocks := size / o.blockSize
	dur := time.Duration(o.duration * float64(time.Second))
	var n uint64
	start := time.Now()
	for i := uint64(0); i%64 != 0 || time.Since(start) < dur; i++ {
		off := (i % blocks) * o.blockSize
		copy(dst[off:off+o.blockSize], src[off:off+o.blockSize])
		n += o.blockSize
	}
	fmt.Printf("memcpy throughput %s\n", o.rate(n, time.Since(start)))

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
			off := (i % blocks) * o.blockSize
			if _, err := io.ReadFull(c, dst[off:off+o.blockSize]); err != nil {
				return
			}
			got.Add(o.blockSize)
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		die("%v", err)
	}
	start = time.Now()
	for i := uint64(0); time.Since(start) < dur; i++ {
		off := (i % blocks) * o.blockSize
		if _, err := c.Write(src[off : off+o.blockSize]); err != nil {
			die("%v", err)
		}
	}
	c.Close()
	<-done
	fmt.Printf("socket throughput %s\n", o.rate(got.Load(), time.Since(start)))
}
