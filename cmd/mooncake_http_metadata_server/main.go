// Command mooncake_http_metadata_server serves the HTTP metadata protocol
// (GET|PUT|DELETE <path>?key=<url-encoded key>) from memory, for transfer engines started
// with metadata_server=http://<host>:<port><path>. It is the Go counterpart of Mooncake's
// mooncake_http_metadata_server and takes the same flags:
//
//	mooncake_http_metadata_server --host=0.0.0.0 --port=8080 --path=/metadata
//
// It logs one line "listening on http://<addr><path>" once it accepts connections
// (--port=0 picks a free port), and on SIGTERM or SIGINT stops accepting, lets requests in
// flight finish (up to 5 s), and exits 0. Everything is kept in memory: a restart forgets
// all keys, and engines re-register their segments.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mooncake-go/mooncake/engine/metadata"
	"github.com/mooncake-go/mooncake/internal/cli"
)

func main() {
	log.SetFlags(log.LstdFlags)
	log.SetPrefix("mooncake_http_metadata_server: ")
	cli.Exit("mooncake_http_metadata_server", run(os.Args[1:]))
}

func run(args []string) error {
	fs := flag.NewFlagSet("mooncake_http_metadata_server", flag.ContinueOnError)
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

	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		return fmt.Errorf("cannot listen on %s:%d: %w", *host, *port, err)
	}
	srv := &http.Server{
		Handler:           metadata.NewHTTPServer(metadata.HTTPServerConfig{Path: *path, MaxValueBytes: *maxValue}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}

	ctx, stop := cli.SignalContext()
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Printf("listening on http://%s%s", ln.Addr(), *path)

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
