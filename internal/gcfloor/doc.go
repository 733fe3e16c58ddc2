// Package gcfloor keeps the Go garbage collector of a process whose live heap is small from
// collecting every few megabytes.
//
// Go starts a collection when the heap has grown by GOGC percent (100) of what the last one
// found live, and at 4 MiB at least. The master, a holder and a store client keep a few
// megabytes live and allocate for every request (decoded keys, the answer's buffer), so at a
// few hundred thousand keys a second they collected every 10-20 ms, and the collector's idle
// and background workers took a quarter to a third of the master's CPU. With a floor, after
// every collection the GC percent is set so that the next one starts at
// max(2 x live, live + floor): a process with a small heap collects once per floor bytes
// allocated, and one with a large heap paces as before. The memory this costs is at most the
// floor, in garbage not yet collected.
//
// Start is called once by each process (libmooncake.so's init, each Go binary's main) with
// the floor config reads (MOONCAKE_GC_HEAP_FLOOR; none when GOGC is set: the runtime's own
// setting is kept). A memory limit (GOMEMLIMIT) still applies: the runtime collects at
// whichever goal comes first.
package gcfloor
