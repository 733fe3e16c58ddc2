// Package config owns the library's configuration knobs: the environment variables (MC_*,
// MOONCAKE_* and a few AWS_* and GOMAXPROCS) that tune the engine, the store, the process
// group and the master. It holds one registry of them (name, default, kind, when it is read,
// a one-line description; docs/configuration.md shows the same table and a test keeps the two
// in step) and reads them through the C library's getenv.
//
// Why getenv: Go's os.Getenv reads a copy of the environment taken when the Go runtime
// started. In libmooncake.so that is when Python loaded the library, so a knob a script sets
// afterwards with os.environ[...] = ... (which calls putenv) was invisible to Go. The C
// environment is the one putenv changes, so reading it at the moment of use (engine
// creation, store setup(), init_process_group, master start) sees what the user set, as
// upstream Mooncake does. In a cgo program os.Setenv (and so testing's t.Setenv) also writes
// the C environment, so Go tests keep setting knobs the usual way. Built without cgo, the
// package falls back to os.Getenv.
//
// Only the layers that convert (capi/ and cmd/) call this package: they read the knobs and
// hand the values to the library packages (engine, store, collective, p2p, ...) as fields
// of their Config/Options structs, whose zero value means the default. Library packages never
// read the environment themselves.
//
// A knob is an exported *Knob variable of this package; there is no lookup by name, so code
// cannot read a knob that is not registered.
package config
