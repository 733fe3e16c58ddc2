// Command mooncake_master runs the metadata service of Mooncake Store: the gRPC master service
// (--rpc_port, default 50051), the admin HTTP API with Prometheus metrics (--metrics_port,
// default 9003) and, with --enable_http_metadata_server, the transfer engine's HTTP metadata
// server (--http_metadata_server_port, default 8080) so a store needs no other service.
//
// Flags keep Mooncake's names and defaults; --config_path reads the same names from a JSON or
// YAML file, and command-line flags override it. Run with -h for the list.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/mooncake-go/mooncake/engine/metadata"
	"github.com/mooncake-go/mooncake/store/master"
)

func main() {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	cfg, err := master.ParseFlags("mooncake_master", os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "mooncake_master: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "mooncake_master: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg master.Config) error {
	rpcLis, err := net.Listen("tcp", net.JoinHostPort(cfg.RPCAddress, strconv.Itoa(cfg.RPCPort)))
	if err != nil {
		return fmt.Errorf("listen for rpc on %s:%d: %w", cfg.RPCAddress, cfg.RPCPort, err)
	}
	cfg.RPCPort = rpcLis.Addr().(*net.TCPAddr).Port
	srv := master.NewServer(cfg)

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
	if err != nil {
		rpcLis.Close()
		return err
	}
	if cfg.EnableHTTPMetadataServer {
		md := metadata.NewHTTPServer(metadata.HTTPServerConfig{})
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
	err = srv.Serve(ctx, rpcLis)
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, hs := range httpServers {
		hs.Shutdown(sctx)
	}
	log.Printf("mooncake_master: stopped")
	return err
}
