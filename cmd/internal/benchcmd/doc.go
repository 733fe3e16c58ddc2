// Package benchcmd is the command transfer_engine_bench: it measures the transfer engine, like
// Mooncake's transfer_engine_bench.
//
//	transfer_engine_bench --mode=target --local_server_name=127.0.0.1
//	transfer_engine_bench --mode=initiator --segment_id=127.0.0.1:15123 --operation=write --block_size=67108864
//	transfer_engine_bench --mode=baseline --block_size=67108864   # memcpy and plain Go socket copy
//
// The target allocates one shared buffer (--buffer_size) and serves until interrupted. The
// initiator writes or reads --batch_size blocks of --block_size per batch from --threads
// goroutines for --duration seconds, and prints "throughput X GB/s". A same-host target is reached
// through shared memory; set MC_FORCE_TCP=1 to force tcp.
//
// cmd/transfer_engine_bench runs it as a program of its own, and the multi-call binary
// cmd/mooncake runs it when called by that name.
package benchcmd
