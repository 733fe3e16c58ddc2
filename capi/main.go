package main

/*
#include <stdlib.h>
void mc_set_last_error(const char *msg, size_t len);
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/mooncake-go/mooncake/collective/reduce"
	"github.com/mooncake-go/mooncake/config"
	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/internal/gcfloor"
	"github.com/mooncake-go/mooncake/internal/glog"
	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/worker"
)

func main() {}

// init runs when the library is loaded: the knobs read at library load take effect here.
func init() {
	if config.GoMaxProcs.String() != "" {
		if n := config.GoMaxProcs.Positive(); n > 0 {
			runtime.GOMAXPROCS(n)
		}
	} else if config.GOMAXPROCS.String() == "" && runtime.NumCPU() > 4 {
		runtime.GOMAXPROCS(4)
	}
	reduce.UseKernel(config.ReduceKernel.String())
	gcfloor.Start(config.GCHeapFloor())
}

// Error codes shared by the C ABI (Mooncake's numbers where one exists).
const (
	codeOK            = 0
	codeInternal      = -1
	codeInvalidParams = -600
)

// codedError lets a Go error carry the status the C caller sees.
type codedError interface{ Code() int }

// setErr records err as the calling thread's last error, logs it (logErr) and returns its
// status code. It is the one place the C functions turn an error into a code: a function calls
// it once per failure it returns (a batch call: once, for its first failed key).
func setErr(err error) C.int {
	if err == nil {
		return codeOK
	}
	msg := err.Error()
	cs := C.CString(msg)
	C.mc_set_last_error(cs, C.size_t(len(msg)))
	C.free(unsafe.Pointer(cs))
	code := C.int(codeInternal)
	var ce codedError
	var ee *engine.Error
	if errors.As(err, &ce) && ce.Code() < 0 {
		code = C.int(ce.Code())
	} else if errors.As(err, &ee) && ee.Code < 0 {
		code = C.int(ee.Code)
	}
	logErr(err, code, msg)
	return code
}

// errLog writes the errors the C functions return to stderr in glog's format, from MC_LOG_LEVEL's
// severity on (read at library load; upstream's values TRACE, INFO, WARNING, ERROR).
var errLog = newErrLog()

func newErrLog() *glog.Logger {
	v := config.LogLevel.String()
	least, ok := glog.ParseLevel(v)
	l := glog.New(os.Stderr, least)
	if !ok {
		_, file, line, _ := runtime.Caller(0)
		l.Log(glog.Warning, file, line, fmt.Sprintf("%s=%q is not one of %s; using %v",
			config.LogLevel.Name(), v, glog.Levels, least))
	}
	return l
}

// logErr logs a failure a C function returns, where it happens: the line names the exported
// function and the line in it that set the code, then the code (a batch call's result for its
// first failed key) and the message that mooncake_last_error() gives.
func logErr(err error, code C.int, msg string) {
	s := errSeverity(err)
	if !errLog.Enabled(s) {
		return
	}
	fn, file, line := entryFrame()
	if code == codeInvalidParams && handleProbe(fn) {
		if s = glog.Trace; !errLog.Enabled(s) {
			return
		}
	}
	errLog.Log(s, file, line, fmt.Sprintf("%s: error %d: %s", fn, int(code), msg))
}

// handleProbe reports the C functions whose callers ask about a handle that another thread may
// have freed meanwhile: the torch shim's mc_work_run and mc_work_test on a work its completion
// thread finished (torchext/work.cpp). For them an unknown handle (-600) is an answer the
// caller tests for, logged at Trace.
func handleProbe(fn string) bool { return fn == "mc_work_run" || fn == "mc_work_test" }

// errSeverity is how loudly a returned error is logged, as upstream logs the same event:
// outcomes that callers test for are Trace (upstream: VLOG(1) or nothing), so they stay off
// stderr unless MC_LOG_LEVEL=TRACE — a key that is not there (OBJECT_NOT_FOUND from
// get/exists/size/remove, REPLICA_IS_NOT_READY), a put of a key that exists, a remove of a
// leased key, and a wait whose timeout passed before the outcome (mc_work_wait's "still
// running", mc_engine_wait_batch's own deadline: the bare context error, where a failure would
// wrap it). A put that finds no space is a Warning (upstream: LOG(WARNING)); the rest, Error —
// but for an unknown handle given to a function that probes for it (handleProbe, in logErr).
func errSeverity(err error) glog.Severity {
	if errors.Is(err, worker.ErrRunning) || err == context.DeadlineExceeded {
		return glog.Trace
	}
	var se *api.Error
	if errors.As(err, &se) {
		switch se.Code {
		case api.OBJECT_NOT_FOUND, api.REPLICA_IS_NOT_READY, api.OBJECT_ALREADY_EXISTS, api.OBJECT_HAS_LEASE:
			return glog.Trace
		case api.NO_AVAILABLE_HANDLE:
			return glog.Warning
		}
	}
	return glog.Error
}

// entryFrame finds the C function being called: the outermost exported function of this
// package on the stack (mc_* or mooncake_*; one may call another), with the file and line in it
// that is running. Without one (a call from elsewhere) it is setErr's caller.
func entryFrame() (fn, file string, line int) {
	var pcs [64]uintptr
	n := runtime.Callers(4, pcs[:]) // from setErr's caller on (Callers, entryFrame, logErr, setErr)
	frames := runtime.CallersFrames(pcs[:n])
	for i := 0; ; i++ {
		f, more := frames.Next()
		name, inMain := strings.CutPrefix(f.Function, "main.")
		name, _, _ = strings.Cut(name, ".") // a closure inside the function: the function
		if i == 0 {
			fn, file, line = f.Function, f.File, f.Line
		}
		if inMain && (strings.HasPrefix(name, "mc_") || strings.HasPrefix(name, "mooncake_")) {
			fn, file, line = name, f.File, f.Line
		}
		if !more {
			return fn, file, line
		}
	}
}

// paramErr is an invalid-argument error (-600).
type paramErr struct{ msg string }

func (e paramErr) Error() string { return e.msg }
func (e paramErr) Code() int     { return codeInvalidParams }

func invalid(msg string) error { return paramErr{msg} }

// handles maps the uint64 handles given to C to Go objects. Handles start at 1; 0 is never valid.
type handles[T any] struct {
	mu   sync.Mutex
	next uint64
	m    map[uint64]T
}

func (h *handles[T]) put(v T) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[uint64]T)
	}
	h.next++
	h.m[h.next] = v
	return h.next
}

func (h *handles[T]) get(id uint64) (T, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.m[id]
	return v, ok
}

func (h *handles[T]) take(id uint64) (T, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.m[id]
	delete(h.m, id)
	return v, ok
}

// copyOut copies s into the C buffer buf of buflen bytes (NUL-terminated, truncated) and returns
// len(s), so a caller can retry with a larger buffer.
func copyOut(s string, buf *C.char, buflen C.int) C.int {
	if buf != nil && buflen > 0 {
		n := len(s)
		if n > int(buflen)-1 {
			n = int(buflen) - 1
		}
		dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(buflen))
		copy(dst, s[:n])
		dst[n] = 0
	}
	return C.int(len(s))
}

//export mooncake_version
func mooncake_version() *C.char { return versionC }

var versionC = C.CString(Version)

// Version is the library version reported by mooncake_version().
const Version = "0.1.0"
