// Package metadatacmd is the command mooncake_http_metadata_server: it serves the HTTP metadata
// protocol (GET|PUT|DELETE <path>?key=<url-encoded key>) from memory, for transfer engines started
// with metadata_server=http://<host>:<port><path>. It is the Go counterpart of Mooncake's
// mooncake_http_metadata_server and takes the same flags:
//
//	mooncake_http_metadata_server --host=0.0.0.0 --port=8080 --path=/metadata
//
// It logs one line "listening on http://<addr><path>" once it accepts connections (--port=0 picks
// a free port), and on SIGTERM or SIGINT stops accepting, lets requests in flight finish (up to 5
// s), and exits 0. Everything is kept in memory: a restart forgets all keys, and engines
// re-register their segments.
//
// cmd/mooncake_http_metadata_server runs it as a program of its own, and the multi-call binary
// cmd/mooncake runs it when called by that name.
package metadatacmd
