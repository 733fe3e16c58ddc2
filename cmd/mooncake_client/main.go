// Command mooncake_client contributes memory to Mooncake Store without an application: it
// starts a transfer engine, allocates --global_segment_size bytes of shared memory, mounts it on
// mooncake_master and keeps it alive (heartbeat, re-mount after a master restart) until SIGINT or
// SIGTERM, when it unmounts.
//
// Flags keep Mooncake's names: --master_server_address=127.0.0.1:50051, --host, --port=50052,
// --protocol=tcp, --device_names, --metadata_server, --global_segment_size="4 GB",
// --local_buffer_size. Sizes take units (KB, MB, GB, TB; binary).
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"strconv"

	"github.com/mooncake-go/mooncake/config"
	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/internal/cli"
	"github.com/mooncake-go/mooncake/store/client"
)

func main() {
	fs := flag.NewFlagSet("mooncake_client", flag.ContinueOnError)
	master := fs.String("master_server_address", "127.0.0.1:50051", "host:port of mooncake_master")
	host := fs.String("host", "127.0.0.1", "address peers reach this client at")
	port := fs.Int("port", 50052, "transfer-engine port (0 picks a free one)")
	protocol := fs.String("protocol", "tcp", "transfer protocol")
	devices := fs.String("device_names", "", "NICs for rdma-like protocols (comma-separated)")
	meta := fs.String("metadata_server", engine.P2PHandshake, "metadata server: P2PHANDSHAKE, http://h:p/metadata, etcd://h:p, redis://h:p")
	segSize := fs.String("global_segment_size", "4 GB", "memory contributed to the store")
	bufSize := fs.String("local_buffer_size", "16 MB", "staging buffer")
	if err := fs.Parse(os.Args[1:]); err != nil {
		cli.Exit("mooncake_client", cli.Usagef("bad command line: %w", err))
	}
	fail := func(format string, args ...any) { cli.Exit("mooncake_client", cli.Usagef(format, args...)) }
	if fs.NArg() > 0 {
		fail("unexpected argument %q", fs.Arg(0))
	}
	seg, err := client.ParseSize(*segSize)
	if err != nil {
		fail("--global_segment_size: %v", err)
	}
	if seg == 0 {
		fail("--global_segment_size must be > 0: a mooncake_client only contributes memory")
	}
	buf, err := client.ParseSize(*bufSize)
	if err != nil {
		fail("--local_buffer_size: %v", err)
	}
	if *port < 0 || *port > 65535 {
		fail("--port=%d is not a valid port", *port)
	}
	ctx, stop := cli.SignalContext()
	defer stop()
	name := net.JoinHostPort(*host, strconv.Itoa(*port))
	if *port == 0 {
		name = *host // the engine (or client.EngineConfig) picks the port
	}
	cfg := config.StoreClient(client.Config{
		LocalHostname: name, MetadataServer: *meta,
		GlobalSegmentSize: seg, LocalBufferSize: buf, Protocol: *protocol, DeviceName: *devices,
		MasterServerAddress: *master,
	})
	c, err := client.New(ctx, cfg)
	cli.Exit("mooncake_client", err)
	log.Printf("mooncake_client: segment %s (%d bytes) mounted on master %s", c.Hostname(), seg, *master)
	fmt.Printf("MOONCAKE_CLIENT_READY segment=%s\n", c.Hostname())
	os.Stdout.Sync()
	<-ctx.Done()
	if err := c.Close(); err != nil {
		log.Printf("mooncake_client: close: %v", err)
	}
	log.Printf("mooncake_client: stopped")
}
