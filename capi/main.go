package main

/*
#include <stdlib.h>
void mc_set_last_error(const char *msg, size_t len);
*/
import "C"

import (
	"errors"
	"runtime"
	"sync"
	"unsafe"

	"github.com/mooncake-go/mooncake/collective/reduce"
	"github.com/mooncake-go/mooncake/config"
	"github.com/mooncake-go/mooncake/engine"
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
}

// Error codes shared by the C ABI (Mooncake's numbers where one exists).
const (
	codeOK            = 0
	codeInternal      = -1
	codeInvalidParams = -600
)

// codedError lets a Go error carry the status the C caller sees.
type codedError interface{ Code() int }

// setErr records err as the calling thread's last error and returns its status code.
func setErr(err error) C.int {
	if err == nil {
		return codeOK
	}
	msg := err.Error()
	cs := C.CString(msg)
	C.mc_set_last_error(cs, C.size_t(len(msg)))
	C.free(unsafe.Pointer(cs))
	var ce codedError
	if errors.As(err, &ce) && ce.Code() < 0 {
		return C.int(ce.Code())
	}
	var ee *engine.Error
	if errors.As(err, &ee) && ee.Code < 0 {
		return C.int(ee.Code)
	}
	return codeInternal
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
