// Package rawsys reads and writes sockets of package net with raw system calls: a server's
// reads and writes then no longer wake the Go runtime's monitor thread each time the process
// goes from idle to busy.
//
// Why: Go's monitor thread (sysmon) sleeps while every P of the process is idle and is woken
// by the next system call that enters the scheduler's syscall path (read and write on a
// net.Conn do); awake, it then polls every 20 µs until the process is idle again. A server that
// answers one small request at a time (the master's framed RPC, the engine's tcp server)
// goes idle between requests, so each request woke it: measured on the store's master under
// batch gets of 64 keys (2-core VM, 2026-12-07), the monitor thread made 3.8 of the master's
// 4.5 context switches per call and a sixth of its CPU. Read and Write of a [Wrap]ped
// connection make their system calls raw (they do not enter the syscall path) on the
// non-blocking descriptor the runtime's poller already watches, and park on that poller only
// when the socket is not ready, exactly as package net does; deadlines, Close from another
// goroutine and the poller's wake-ups work as for the connection itself.
//
// [Conn.ReadFull] reads a large payload with a receive low-water mark (SO_RCVLOWAT), so that the
// reading goroutine is woken once per 256 KiB rather than at every few segments (the engine's
// tcp server reads WRITE payloads so; [Detached.ReadFull] does the same in poll(2)).
//
// [WriteBuffers] writes a list of buffers with one raw writev(2) as far as the socket takes
// them: the engine's tcp client sends its frames that way. A long system call made through the
// syscall path has a second cost: once it has run across two of the monitor's ticks (20 µs or
// more) while other goroutines wait, the monitor hands its P to another thread, which it wakes,
// and keeps ticking every 20 µs; a write of a 256 KiB chunk takes that long.
//
// [Detached] goes further for a socket whose caller reads its answers itself: it takes the
// socket out of the runtime's poller altogether, and a read or write that would block waits in
// poll(2) on the calling thread (the store's calls to its master, the engine's tcp runs).
//
// A raw system call holds its P for as long as it runs, so only calls that cannot block are
// made raw: reads and writes of a non-blocking socket, which copy at most what the socket's
// buffers hold and return.
//
// Built with the race detector, reads and writes (writev too) are the ordinary system calls of
// package syscall instead (race.go), so that the detector keeps seeing socket I/O as ordering
// its two sides.
package rawsys
