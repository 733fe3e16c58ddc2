package metadatacmd

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/mooncake-go/mooncake/config"
	"github.com/mooncake-go/mooncake/engine/metadata"
	"github.com/mooncake-go/mooncake/internal/cli"
	"github.com/mooncake-go/mooncake/internal/gcfloor"
)

// Name is the command's name, the one the multi-call binary answers to.
const Name = "mooncake_http_metadata_server"

// Main runs the server with args (the command line after the program name) until SIGINT or
// SIGTERM, and returns the exit status: 0, 1 when it failed, 2 for a bad command line.
func Main(args []string) int {
	gcfloor.Start(config.GCHeapFloor()) // internal/gcfloor
	log.SetFlags(log.LstdFlags)
	log.SetPrefix(Name + ": ")
	return cli.Code(Name, run(args))
}

func run(args []string) error {
	fs := flag.NewFlagSet(Name, flag.ContinueOnError)
	host := fs.String("host", "0.0.0.0", "address to listen on")
	port := fs.Int("port", 8080, "TCP port to listen on (0 picks a free one)")
	path := fs.String("path", metadata.DefaultHTTPPath, "URL path of the metadata endpoint")
	maxValue := fs.Int64("max_value_bytes", metadata.MaxValueSize, "largest value a PUT may store")
	if err := fs.Parse(args); err != nil {
		return cli.Usage(err)
	}
	if fs.NArg() > 0 {
		return cli.Usagef("unexpected arguments %q (all options are flags, e.g. --port=8080)", fs.Args())
	}
	if *port < 0 || *port > 65535 {
		return cli.Usagef("--port=%d is not a TCP port (0..65535)", *port)
	}
	if !strings.HasPrefix(*path, "/") {
		return cli.Usagef("--path=%q must start with '/'", *path)
	}

	token, err := config.Token()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		return fmt.Errorf("cannot listen on %s:%d: %w", *host, *port, err)
	}
	srv := &http.Server{
		Handler:           metadata.NewHTTPServer(metadata.HTTPServerConfig{Path: *path, MaxValueBytes: *maxValue, AuthToken: token}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}

	ctx, stop := cli.SignalContext()
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Printf("listening on http://%s%s", ln.Addr(), *path)
	if token != nil {
		log.Printf("every request must be signed with MC_AUTH_TOKEN (docs/security-store.md)")
	}

	select {
	case err := <-errc:
		return fmt.Errorf("serving HTTP: %w", err)
	case <-ctx.Done():
	}
	stop() // a second signal kills the process the usual way
	log.Print("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("graceful shutdown: %w", err)
	}
	return nil
}
