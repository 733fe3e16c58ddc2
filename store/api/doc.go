// Package api is the wire contract between Mooncake Store clients and mooncake_master: the
// error codes (Mooncake's numbers), the descriptors (segments, replicas, replicate configs), the
// request/response messages of every master RPC, and the gRPC service that carries them.
//
// # Why no .proto
//
// The service is declared by hand as a grpc.ServiceDesc (service.go) and its messages are plain
// Go structs encoded with a JSON codec registered under the content-subtype "json"
// (codec.go). We chose this over protoc-generated code because:
//
//   - the build and CI need no protoc, no protoc-gen-go plugins and no generated files to keep
//     in step with a .proto;
//   - the messages are small metadata records (keys, sizes, addresses); the data itself never
//     crosses the master, so the codec is not on the data path and JSON's cost is irrelevant;
//   - the same structs are the state machine's log entries (store/master), so one encoding serves
//     RPC, the HA operation log and snapshots, and is readable with curl/jq when debugging.
//
// Everything else is real gRPC: HTTP/2 framing, deadlines, status codes, interceptors. A peer
// that sends protobuf-encoded requests (or garbage) gets a gRPC error, never a crash. Clients must
// dial with [DialOptions] (which selects the codec); [Dial] does that.
//
// # The framed RPC
//
// The store's own clients call the same service over the framed RPC (framed.go) unless
// told to use gRPC (client.Config.GRPC, MC_STORE_RPC=grpc): framed requests on a plain TCP connection to the same port, told apart from
// HTTP/2 by their first 8 bytes, answered by the very handlers and interceptor gRPC runs, with
// gRPC status codes for errors. It exists for latency: a gRPC unary call between processes costs
// several times a framed call (measured figures in docs/performance.md), and every put is two
// calls. A client's framed sockets are kept out of Go's network poller (rawsys.Detached): a call
// is one write, one poll(2) and one read on the calling thread, with no wake-up of the
// runtime's epoll thread. The server reads and writes its connections with raw system calls
// (package rawsys), so that serving a request does not wake the runtime's monitor thread, and
// reads each request into the frame buffer of the connection's last one and writes each answer
// from the buffer of its last answer (what a request decodes into is copied out of its frame:
// strings, and attached values), which spares the master's collector a request's and an
// answer's bytes per call. A
// small value carried with its metadata (a PutEnd, a GetReplicaList answer from the master's
// value cache) travels after the JSON as a binary attachment (attach.go), not as base64 inside
// it. What the master serves, how it counts requests in /metrics, and how clients fail over
// are the same on both; the framed RPC only replaces HTTP/2 framing.
//
// # Security
//
// Both protocols share one connection set-up (secure.go): optional TLS, then, when the master
// has a token (MC_AUTH_TOKEN), the challenge-response of package auth, then the protocol's first
// bytes. [NewSecureListener] runs the master's side, [DialFramedSecure] and [DialSecure] the
// client's; the master's interceptor refuses calls on connections that did not prove the
// token ([RequireAuthenticated]). See docs/security-store.md.
//
// # Conventions
//
// Every response carries a Code ([ErrorCode], 0 = OK) and a Message for users. Transport
// failures surface as Go errors (mapped to RPC_FAIL / RPC_TIMEOUT by [CodeOf]). Batch RPCs answer
// per item, in request order.
//
// This package must not import the master or the client; both import it.
package api
