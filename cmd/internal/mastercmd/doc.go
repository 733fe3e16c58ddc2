// Package mastercmd is the command mooncake_master, which runs the metadata service of Mooncake
// Store: the gRPC master service (--port, alias --rpc_port, default 50051), the admin HTTP API with Prometheus
// metrics (--metrics_port, default 9003) and, with --enable_http_metadata_server, the transfer
// engine's HTTP metadata server (--http_metadata_server_port, default 8080) so a store needs no
// other service.
//
// Flags keep Mooncake's names and defaults; --config_path reads the same names from a JSON or YAML
// file, and command-line flags override it. Run with -h for the list.
//
// cmd/mooncake_master runs it as a program of its own, and the multi-call binary cmd/mooncake runs
// it when called by that name.
package mastercmd
