// Package tcp is the engine's network transport and listener: framed one-sided READ and
// WRITE of registered memory plus the small control calls of the P2P handshake (descriptor,
// notify, ping), all on one port.
//
// Wire format (little-endian). A request is a 32-byte header
//
//	magic u32 "MCTQ" | version u8 | op u8 | flags u16 | seq u32 | reserved u32 | addr u64 | length u64
//
// followed, for WRITE and control ops, by length payload bytes. A request gets one 24-byte
// response header
//
//	magic u32 "MCTR" | status i32 | seq u32 | reserved u32 | length u64
//
// followed by length bytes: the data of a READ, the answer of a control op, or an error
// message when status != 0. A WRITE with FlagQuiet (flags bit 0) is answered only when it
// fails: the client sets it on every WRITE of a run but the last, whose answer confirms them
// all. Requests on one connection are applied (and answered) in order; the client pipelines
// them, and the engine sends the requests of one batch to one target over one connection,
// which is how submission order is kept even though large requests are cut into chunks
// (Client.ChunkSize). Different batches and targets use different pooled connections in
// parallel.
//
// A run's frames leave in one writev: headers and small payloads are gathered, large payloads
// are written from the caller's memory; the server reads a large payload straight from the
// socket into the target memory once its read buffer is drained (no copy through a buffer on
// either side).
//
// The connections of runs are detached from the runtime's network poller (rawsys.Detached):
// the caller writes its frames and waits for the answers in poll(2) on its own thread, often a
// foreign one (Python's) that called into the library, so the kernel wakes it directly, with no
// hand-off from the runtime's epoll thread; a large payload is read with a low-water mark
// (Detached.ReadFull), one wake-up per 256 KiB. Measured from Python (2026-12-07): a 64-key batch
// get of 4 KiB values made about 3.6-4.2 context switches in the caller instead of 5.2-5.5,
// docs/performance.md. A Stream's connection stays with the poller: its answers are read by a
// goroutine of its own.
//
// The server reads and writes its connections with raw system calls (package rawsys): serving
// a request does not wake the runtime's monitor thread, which slept while the process was idle.
// The client does the same for its frames (one raw writev per flush): a write of a 256 KiB
// chunk takes longer than the monitor's 20 µs tick, and made through the scheduler's syscall
// path it had its P handed to another thread, woken for it, while the caller copied (across two
// network namespaces, a 64 MiB all_reduce's context switches per op and rank went from about
// 880 to about 760 with the raw writes; docs/performance.md).
//
// The server reads a large WRITE payload with a receive low-water mark too
// (rawsys.Conn.ReadFull), so that its goroutine is woken once per 256 KiB rather than at every
// few segments. Across two network namespaces (2026-12-07, alternated with the build before,
// three runs each): all_reduce at 16 and 64 MiB went from 1.00-1.24x gloo to 1.06-1.33x, at
// 68-85 % of the TCP bound instead of 59-76 %, and all_to_all from 0.94-1.05x to 1.02-1.12x,
// with about a quarter fewer context switches per op (docs/performance.md).
//
// The server (Server) checks every range against the Handler (the engine's registered
// buffers) and answers an error for a range outside them; a malformed frame (bad magic,
// version, op or an oversized length) closes that connection only. After applying a WRITE of
// exactly 4 bytes to a 4-aligned address it wakes futex waiters on that word (and tells a
// Handler that implements Signaler). A Handler that implements Lander may give the payload of
// a WRITE of 16 KiB or more another destination before it is read.
//
// Authentication (auth.go, package auth): with Server.Auth set, a connection may start with
// one or more handshakes (magic "MCAU") before its first frame; the tokens it proved go with
// every Handler call on it. A connection that starts with a frame is served only when
// ServerAuth.Required says so; a failed handshake closes the connection before any frame is
// read. Client.Tokens names the tokens a new connection proves; idle connections are pooled
// per peer and set of tokens.
//
// The codec is written by hand (not gRPC or encoding/gob) because the data path must read
// straight into the destination memory with no copies or allocations per request.
package tcp
