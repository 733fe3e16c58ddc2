// Command capi is the Mooncake C ABI: built with `go build -buildmode=c-shared` into
// libmooncake.so, the one shared library that the torch shim (torchext/) and the Python package
// (python/mooncake, through ctypes) load. It owns the exported C functions declared in
// include/mooncake*.h, the handle tables that stand for Go objects on the C side, and the one
// process-wide engine that the process group and the store share.
//
// Conventions: opaque uint64 handles; int status, 0 ok and negative on error; the message of the
// last error on the calling thread from mooncake_last_error(), which setErr (main.go, the one
// place a Go error becomes a code) also logs once to stderr in glog's format, at MC_LOG_LEVEL's
// severity and up (internal/glog). No Go pointer is kept by C after a call returns. A process that loaded the library must not call it from a fork()ed child.
//
// Process-group works: the shim sets mc_pg_set_held_starts and mc_pg_set_completion_hook on
// CPU groups. An op submitted then waits until the shim either runs it on the calling thread
// (mc_work_run: torch's asyncOp=False, and Work.wait on an op that has not started) or hands
// it to the group's op goroutine (mc_work_start); the hook tells the shim's completion thread
// when an op it did not run finishes. A small synchronous all_reduce takes about half the time
// per op this way (docs/performance.md).
//
// Configuration: capi reads the environment knobs through package config (libc getenv, so a knob
// Python sets after the library loaded is seen) at the moment of use — engine creation, store
// setup(), process-group creation, or library load — and passes them down as Config/Options
// fields. docs/configuration.md lists every knob.
//
// GOMAXPROCS (read at library load): when the MOONCAKE_GOMAXPROCS environment variable is set the library uses it;
// otherwise, if GOMAXPROCS is unset, it uses min(NumCPU, 4), since several ranks usually share a
// host and each has its own Go runtime.
package main
