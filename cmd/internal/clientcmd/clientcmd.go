package clientcmd

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"strconv"
	"syscall"

	"github.com/mooncake-go/mooncake/config"
	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/internal/cli"
	"github.com/mooncake-go/mooncake/internal/gcfloor"
	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/client"
	"github.com/mooncake-go/mooncake/store/realclient"
)

// Name is the command's name, the one the multi-call binary answers to.
const Name = "mooncake_client"

// Main runs mooncake_client with args (the command line after the program name) until SIGINT
// or SIGTERM, and returns the exit status: 0, 1 when it failed, 2 for a bad command line.
func Main(args []string) int {
	gcfloor.Start(config.GCHeapFloor()) // internal/gcfloor
	return cli.Code(Name, run(args))
}

func run(args []string) error {
	fs := flag.NewFlagSet(Name, flag.ContinueOnError)
	master := fs.String("master_server_address", "127.0.0.1:50051", "host:port of mooncake_master")
	host := fs.String("host", "127.0.0.1", "address peers reach this client at")
	port := fs.Int("port", 50052, "real client service port: dummy clients attach here with setup_dummy(..., \"host:port\") (0 picks a free one); the transfer engine picks its own")
	protocol := fs.String("protocol", "tcp", "transfer protocol")
	devices := fs.String("device_names", "", "NICs for rdma-like protocols (comma-separated)")
	meta := fs.String("metadata_server", engine.P2PHandshake, "metadata server: P2PHANDSHAKE, http://h:p/metadata, etcd://h:p, redis://h:p")
	segSize := fs.String("global_segment_size", "4 GB", "memory contributed to the store")
	bufSize := fs.String("local_buffer_size", "0", "staging buffer (0: 16 MB)")
	fs.Int("threads", 1, "accepted for compatibility with upstream's mooncake_client (its RPC service threads; here each attached dummy client has its own goroutine)")
	offload := fs.Bool("enable_offload", false, "SSD offload to MOONCAKE_OFFLOAD_FILE_STORAGE_PATH (with mooncake_master --enable_offload)")
	tenant := fs.String("tenant_id", "default", "key namespace of the dummy clients attached here (setup_dummy)")
	if err := fs.Parse(args); err != nil {
		return cli.Usagef("bad command line: %w", err)
	}
	if fs.NArg() > 0 {
		return cli.Usagef("unexpected argument %q", fs.Arg(0))
	}
	seg, err := client.ParseSize(*segSize)
	if err != nil {
		return cli.Usagef("--global_segment_size: %w", err)
	}
	if seg == 0 {
		return cli.Usagef("--global_segment_size must be > 0: a mooncake_client only contributes memory")
	}
	buf, err := client.ParseSize(*bufSize)
	if err != nil {
		return cli.Usagef("--local_buffer_size: %w", err)
	}
	if _, err := api.NormalizeTenant(*tenant); err != nil {
		return cli.Usagef("--tenant_id=%q: %v", *tenant, err)
	}
	if *port < 0 || *port > 65535 {
		return cli.Usagef("--port=%d is not a valid port", *port)
	}
	ctx, stop := cli.SignalContext()
	defer stop()
	portSet := false
	fs.Visit(func(f *flag.Flag) { portSet = portSet || f.Name == "port" })
	svcAddr := net.JoinHostPort(*host, strconv.Itoa(*port))
	l, err := net.Listen("tcp", svcAddr)
	if err != nil && !portSet && errors.Is(err, syscall.EADDRINUSE) {
		// The default port is taken, e.g. by a standby mooncake_master started with
		// --rpc_port=50052 on this host (docs/ha.md): serve on a free one.
		log.Printf("mooncake_client: port %d on %s is in use (a mooncake_master's --rpc_port?): using a free port instead; pass --port to choose", *port, *host)
		l, err = net.Listen("tcp", net.JoinHostPort(*host, "0"))
	}
	if err != nil {
		return fmt.Errorf("real client service on %s (--port): %w", svcAddr, err)
	}
	defer l.Close()
	name := *host // the engine picks its port (client.EngineConfig)
	cfg := config.StoreClient(client.Config{
		LocalHostname: name, MetadataServer: *meta,
		GlobalSegmentSize: seg, LocalBufferSize: buf, Protocol: *protocol, DeviceName: *devices,
		MasterServerAddress: *master,
	})
	if *offload {
		cfg.Offload = config.StoreOffload("")
	}
	c, err := client.New(ctx, cfg)
	if err != nil {
		return err
	}
	log.Printf("mooncake_client: segment %s (%d bytes) mounted on master %s", c.Hostname(), seg, *master)
	svc := realclient.NewServer(realclient.Info{MasterServerAddress: cfg.MasterServerAddress, ClusterID: cfg.ClusterID,
		MetadataServer: *meta, Protocol: cfg.Protocol, Host: *host, Segment: c.Hostname(), TenantID: *tenant}, cfg.AuthToken, log.Printf)
	served := make(chan error, 1)
	go func() { served <- svc.Serve(ctx, l) }()
	log.Printf("mooncake_client: real client service on %s: dummy clients attach with setup_dummy(mem_pool_size, local_buffer_size, %q)", l.Addr(), l.Addr().String())
	fmt.Printf("MOONCAKE_CLIENT_READY segment=%s service=%s\n", c.Hostname(), l.Addr())
	os.Stdout.Sync()
	<-ctx.Done()
	if err := <-served; err != nil {
		log.Printf("mooncake_client: %v", err)
	}
	if err := c.Close(); err != nil {
		log.Printf("mooncake_client: close: %v", err)
	}
	log.Printf("mooncake_client: stopped")
	return nil
}
