// Package metadata is the transfer engine's central metadata store: where segment
// descriptors (mooncake/[<cluster>/]ram/<segment>) and RPC endpoints
// (mooncake/.../rpc_meta/<name>) live when peers do not hand them to each other directly.
//
// # Connection strings
//
// Open takes the string users pass as MC_METADATA_SERVER / metadata_server, with the same
// meaning as in Mooncake:
//
//	P2PHANDSHAKE                      no central store: Open returns (nil, nil) and peers
//	                                  exchange descriptors through the engine's listener
//	http://host:port/metadata         the HTTP metadata protocol (also https://)
//	etcd://host:port[,host:port...]   etcd v3 (a bare "host:port[,host:port]" also means etcd)
//	redis://[:password@]host:port[/db] Redis; Options (MC_REDIS_PASSWORD, MC_REDIS_DB_INDEX)
//	                                  fill in the password and database when the URL has none
//
// Every operation whose context has no deadline gets DefaultTimeout (3 s), so a store that
// is down turns into an error, never a hang. Get reports a missing key with an error that
// wraps ErrNotFound; Delete of a missing key is not an error on any backend. The etcd
// client retries, within the deadline, the errors a cluster gives while it elects a new
// leader (each try capped at 2 s), so a caller with a deadline of a few seconds rides
// through the loss of one member. All operations are idempotent, which makes that safe.
//
// # HTTP metadata protocol
//
//	GET    <uri>?key=<url-encoded key>   200 + value, 404 when the key is missing
//	PUT    <uri>?key=<url-encoded key>   body is the value (JSON in practice, opaque to us); 200
//	DELETE <uri>?key=<url-encoded key>   200, 404 when the key is missing
//
// A request without a key gets 400. HTTPServer is an in-memory implementation of the server
// side as an http.Handler, used by cmd/mooncake_http_metadata_server and by mooncake_master's
// --enable_http_metadata_server; it is compatible with Mooncake's own servers and clients.
//
// # What this package does not do
//
// It does not know what the values mean (that is the engine's descriptor code), it has no
// watches, leases or elections (store/ha talks to etcd and Redis itself), and it does not
// implement the P2P handshake (the engine's listener does). The clients are thin wrappers
// over go.etcd.io/etcd/client/v3, github.com/redis/go-redis/v9 and net/http; the HTTP
// server is written by hand because it is a locked map behind forty lines of net/http.
package metadata
