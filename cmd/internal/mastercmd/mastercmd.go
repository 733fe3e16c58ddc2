package mastercmd

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mooncake-go/mooncake/config"
	"github.com/mooncake-go/mooncake/engine/metadata"
	"github.com/mooncake-go/mooncake/internal/cli"
	"github.com/mooncake-go/mooncake/internal/gcfloor"
	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/dfs"
	"github.com/mooncake-go/mooncake/store/ha"
	"github.com/mooncake-go/mooncake/store/master"
	"github.com/mooncake-go/mooncake/store/snapshot"
	"github.com/mooncake-go/mooncake/store/tlsconf"
)

// Name is the command's name, the one the multi-call binary answers to.
const Name = "mooncake_master"

// Main runs mooncake_master with args (the command line after the program name) until SIGINT
// or SIGTERM, and returns the exit status: 0, 1 when it failed, 2 for a bad command line.
func Main(args []string) int {
	gcfloor.Start(config.GCHeapFloor()) // internal/gcfloor
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	cfg, err := master.ParseFlags(Name, args)
	if err != nil {
		return cli.Code(Name, cli.Usage(err))
	}
	ctx, stop := cli.SignalContext()
	defer stop()
	return cli.Code(Name, run(ctx, cfg))
}

func run(ctx context.Context, cfg master.Config) error {
	if cfg.RootFSDir != "" {
		if err := dfs.CheckRoot(cfg.RootFSDir); err != nil {
			return fmt.Errorf("--root_fs_dir: %w", err)
		}
		log.Printf("mooncake_master: G3 file tier at %s (capacity %s, when full: %s)", cfg.RootFSDir,
			capacityText(cfg.GlobalFileSegmentSize), cfg.DFSFullPolicy)
	}
	if cfg.RPCInterface != "" {
		ip, err := interfaceIPv4(cfg.RPCInterface)
		if err != nil {
			return fmt.Errorf("--rpc_interface=%s: %w", cfg.RPCInterface, err)
		}
		cfg.RPCAddress = ip
	}
	if cfg.MemoryAllocator == "cachelib" {
		log.Printf("mooncake_master: --memory_allocator=cachelib: this master has one segment allocator, the offset (first-fit range) one; using it")
	}
	rpcLis, err := net.Listen("tcp", net.JoinHostPort(cfg.RPCAddress, strconv.Itoa(cfg.RPCPort)))
	if err != nil {
		return fmt.Errorf("listen for rpc on %s:%d: %w", cfg.RPCAddress, cfg.RPCPort, err)
	}
	cfg.RPCPort = rpcLis.Addr().(*net.TCPAddr).Port
	sec, err := security(&cfg)
	if err != nil {
		rpcLis.Close()
		return err
	}
	opts := []master.Option{master.WithSecurity(sec)}
	var md *metadata.HTTPServer
	if cfg.EnableHTTPMetadataServer {
		md = metadata.NewHTTPServer(metadata.HTTPServerConfig{AuthToken: cfg.AuthToken})
		if cfg.EnableMetadataCleanupOnTimeout {
			opts = append(opts, master.WithClientExpired(func(id string, engines []string) {
				n := 0
				for _, name := range engines {
					n += md.ForgetEngine(name)
				}
				log.Printf("mooncake_master: client %s timed out: removed %d http metadata entries of %s", id, n, strings.Join(engines, ", "))
			}))
		}
	}
	srv := master.NewServer(cfg, opts...)

	// Snapshots and HA.
	var snaps *snapshot.Manager
	snapOpts := config.SnapshotBackend(cfg.SnapshotBackupDir)
	if cfg.EnableSnapshot || cfg.EnableSnapshotRestore || (cfg.EnableHA && cfg.HotStandby.EnableSnapshotBootstrap) {
		be, err := snapshot.OpenBackend(ctx, cfg.SnapshotBackendType, snapOpts)
		if err != nil {
			rpcLis.Close()
			return err
		}
		note := ""
		if _, local := be.(*snapshot.Local); local && snapOpts.LocalRoot == "" {
			note = " (the default: choose another with --snapshot_backup_dir or MOONCAKE_SNAPSHOT_LOCAL_PATH)"
		}
		log.Printf("mooncake_master: snapshots in %s%s", be, note)
		sm := snapshot.NewMetrics()
		sm.Register(srv.Metrics().Registry())
		snaps, err = snapshot.NewManager(snapshot.Config{Backend: be, ClusterID: cfg.ClusterID, Retention: cfg.SnapshotRetentionCount, Metrics: sm})
		if err != nil {
			rpcLis.Close()
			return err
		}
		if !cfg.EnableHA && cfg.EnableSnapshotRestore {
			if _, err := srv.RestoreSnapshot(ctx, snaps); err != nil {
				rpcLis.Close()
				return err
			}
		}
	}
	var haParts master.HA
	var closeHA func()
	if cfg.EnableHA {
		conn, err := ha.DialWith(ctx, cfg.EtcdEndpoints, config.HA(ha.Options{}))
		if err != nil {
			rpcLis.Close()
			return fmt.Errorf("ha store %s: %w", cfg.EtcdEndpoints, err)
		}
		if want := strings.ToLower(cfg.HotStandby.OplogStoreType); want != "" && want != string(conn.Kind()) {
			conn.Close()
			rpcLis.Close()
			return fmt.Errorf("--oplog_store_type=%s but --etcd_endpoints is a %s store", want, conn.Kind())
		}
		el, err := conn.NewElector(ha.ElectorConfig{ClusterID: cfg.ClusterID, Address: srv.AdvertiseAddress(), TTL: cfg.HALeaseTTL})
		if err != nil {
			conn.Close()
			rpcLis.Close()
			return err
		}
		oplog, err := conn.NewOpLog(ha.OpLogConfig{ClusterID: cfg.ClusterID})
		if err != nil {
			conn.Close()
			rpcLis.Close()
			return err
		}
		haParts = master.HA{Elector: el, Log: oplog, Snapshots: snaps}
		closeHA = func() {
			el.Close()
			conn.Close()
		}
		log.Printf("mooncake_master: HA on %s store %s: standing as %s", conn.Kind(), cfg.EtcdEndpoints, srv.AdvertiseAddress())
	}

	var httpServers []*http.Server
	serveHTTP := func(what, addr string, h http.Handler) (int, error) {
		lis, err := net.Listen("tcp", addr)
		if err != nil {
			return 0, fmt.Errorf("listen for %s on %s: %w", what, addr, err)
		}
		hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		httpServers = append(httpServers, hs)
		go func() {
			if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Printf("mooncake_master: %s server: %v", what, err)
			}
		}()
		return lis.Addr().(*net.TCPAddr).Port, nil
	}
	metricsPort, err := serveHTTP("admin/metrics", net.JoinHostPort(cfg.RPCAddress, strconv.Itoa(cfg.MetricsPort)), srv.AdminHandler())
	if err != nil && !cfg.MetricsPortSet && cfg.MetricsPort != 0 && errors.Is(err, syscall.EADDRINUSE) {
		// The default port is taken, typically by another mooncake_master on this host (a
		// standby started as docs/ha.md's walkthrough does): use the next free port.
		for p := cfg.MetricsPort + 1; p <= cfg.MetricsPort+metricsPortTries && err != nil; p++ {
			metricsPort, err = serveHTTP("admin/metrics", net.JoinHostPort(cfg.RPCAddress, strconv.Itoa(p)), srv.AdminHandler())
		}
		if err == nil {
			log.Printf("mooncake_master: metrics port %d is in use (another mooncake_master on this host?): serving /metrics on port %d instead; pass --metrics_port to choose", cfg.MetricsPort, metricsPort)
		}
	}
	if err != nil {
		rpcLis.Close()
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("%w: pass a free --metrics_port (another mooncake_master on this host uses port %d?)", err, cfg.MetricsPort)
		}
		return err
	}
	if md != nil {
		port, err := serveHTTP("http metadata", net.JoinHostPort(cfg.HTTPMetadataServerHost, strconv.Itoa(cfg.HTTPMetadataServerPort)), md)
		if err != nil {
			rpcLis.Close()
			return err
		}
		log.Printf("mooncake_master: http metadata server on %s:%d%s", cfg.HTTPMetadataServerHost, port, md.Path())
	}
	log.Printf("mooncake_master: cluster %s serving rpc on %s, admin http on port %d", cfg.ClusterID, rpcLis.Addr(), metricsPort)
	// A machine-readable line for scripts and tests that start the master on free ports.
	fmt.Printf("MOONCAKE_MASTER_READY rpc_port=%d metrics_port=%d\n", cfg.RPCPort, metricsPort)
	os.Stdout.Sync()

	go srv.Run(ctx)
	haDone := make(chan struct{})
	if cfg.EnableHA {
		go func() {
			defer close(haDone)
			if err := srv.RunHA(ctx, haParts); err != nil && ctx.Err() == nil {
				log.Printf("mooncake_master: ha: %v", err)
			}
		}()
	} else {
		close(haDone)
		if snaps != nil && cfg.EnableSnapshot {
			go srv.SnapshotLoop(ctx, snaps)
		}
	}
	err = srv.Serve(ctx, rpcLis)
	<-haDone
	if closeHA != nil {
		closeHA()
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, hs := range httpServers {
		hs.Shutdown(sctx)
	}
	log.Printf("mooncake_master: stopped")
	return err
}

// security loads what the RPC port asks of connections: TLS (--tls_cert_file, --tls_key_file,
// --tls_ca_file) and the token (MC_AUTH_TOKEN / MC_AUTH_TOKEN_FILE, stored in cfg.AuthToken
// for the admin and metadata HTTP servers), and logs what is on.
func security(cfg *master.Config) (api.ServerSecurity, error) {
	var sec api.ServerSecurity
	tc, err := tlsconf.Server{CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile, CAFile: cfg.TLSCAFile}.Config()
	if err != nil {
		return sec, err
	}
	sec.TLS = tc
	token, err := config.Token()
	if err != nil {
		return sec, err
	}
	cfg.AuthToken, sec.Token = token, token
	switch {
	case tc != nil && cfg.TLSCAFile != "":
		log.Printf("mooncake_master: rpc over TLS; clients must present a certificate signed by %s", cfg.TLSCAFile)
	case tc != nil:
		log.Printf("mooncake_master: rpc over TLS")
	}
	if token != nil {
		log.Printf("mooncake_master: clients must prove MC_AUTH_TOKEN (rpc, key-revealing admin routes, http metadata)")
	} else {
		log.Printf("mooncake_master: no MC_AUTH_TOKEN: any client that reaches the rpc port is served (docs/security-store.md)")
	}
	return sec, nil
}

// metricsPortTries is how many ports after the default --metrics_port a master tries when the
// default is taken.
const metricsPortTries = 16

func capacityText(n uint64) string {
	if n == 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%d bytes", n)
}

// interfaceIPv4 is the first IPv4 address of the network interface name (--rpc_interface).
func interfaceIPv4(name string) (string, error) {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return "", fmt.Errorf("no such network interface: %w", err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return "", fmt.Errorf("addresses of %s: %w", name, err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			return n.IP.To4().String(), nil
		}
	}
	return "", fmt.Errorf("interface %s has no IPv4 address", name)
}
