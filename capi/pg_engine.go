package main

/*
#include <stdint.h>
*/
import "C"

import (
	"fmt"

	"github.com/mooncake-go/mooncake/engine"
)

// Choosing the process-wide engine (pg.set_transfer_engine): upstream lets a program hand the
// process groups a TransferEngine it created, so the groups and its own transfers (and a store
// given the same engine) share one engine and one segment. Here the process-wide engine is
// already the first one the process created; this makes another engine handle that engine, or
// (0) returns to the default: one made from the environment on first need.

// count returns the number of live handles.
func (h *handles[T]) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.m)
}

// mc_set_process_engine makes engine handle h (0: none, the default) the process-wide engine
// that process groups created afterwards (and the process's first store) run on. Refused while
// a process group or a store runs on the current one: they cannot move.
//
//export mc_set_process_engine
func mc_set_process_engine(h C.uint64_t) C.int {
	var e *engine.Engine
	if h != 0 {
		var err error
		if e, err = engineOf(h); err != nil {
			return setErr(fmt.Errorf("set_transfer_engine: %w", err))
		}
	}
	procMu.Lock()
	defer procMu.Unlock()
	if procEngine == e {
		return 0
	}
	if n := pgs.count(); n > 0 || procStores > 0 {
		return setErr(invalid(fmt.Sprintf("set_transfer_engine: %d process groups and %d stores of this process run on its current transfer engine (%s); call it before the process's first group and store",
			n, procStores, procEngine.SegmentName())))
	}
	procEngine = e
	return 0
}
