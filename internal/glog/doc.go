// Package glog writes log lines the way upstream Mooncake's C++ code does through Google's glog:
// one line per message, "E1206 01:23:45.678901 12345 file.go:123] message" (severity letter,
// month and day, local time to the microsecond, thread id, source file and line), to a writer
// (the library's stderr), dropping those below a minimum severity.
//
// The minimum comes from upstream's MC_LOG_LEVEL values (ParseLevel): TRACE, INFO (the default),
// WARNING and ERROR. TRACE also shows the detail that upstream logs with VLOG(1), such as a get
// of a key that is not there; those lines carry glog's I, as VLOG lines do.
//
// The package formats and filters only; which events are logged, and at what severity, is the
// caller's decision (capi logs the errors its C functions return).
package glog
