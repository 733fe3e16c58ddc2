// Package clientcmd is the command mooncake_client, which contributes memory to Mooncake Store
// without an application: it starts a transfer engine, allocates --global_segment_size bytes of
// shared memory, mounts it on mooncake_master and keeps it alive (heartbeat, re-mount after a
// master restart) until SIGINT or SIGTERM, when it unmounts.
//
// Flags keep Mooncake's names: --master_server_address=127.0.0.1:50051, --host, --port=50052,
// --protocol=tcp, --device_names, --metadata_server, --global_segment_size="4 GB",
// --local_buffer_size="0" (16 MB of staging), and, accepted as upstream's, --threads,
// --enable_offload (true is refused: no client-local SSD offload here) and --tenant_id
// ("default" only). --port is the transfer-engine port here (upstream: the port of the RPC
// service dummy clients use, which this build does not have). Sizes take units (KB, MB, GB,
// TB; binary).
//
// cmd/mooncake_client runs it as a program of its own, and the multi-call binary cmd/mooncake runs
// it when called by that name.
package clientcmd
