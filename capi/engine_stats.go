package main

/*
#include <stdint.h>
*/
import "C"

import "fmt"

// mc_engine_transport_bytes reports how many bytes the engine has moved through one transport
// ("local", "shm" or "tcp"), so bindings in other languages (the Rust transfer_engine_bench) can
// say which transport carried a run, as cmd/transfer_engine_bench does.
//
//export mc_engine_transport_bytes
func mc_engine_transport_bytes(h C.uint64_t, transport *C.char, out *C.uint64_t) C.int {
	e, err := engineOf(h)
	if err != nil {
		return setErr(err)
	}
	if out == nil {
		return setErr(invalid("mc_engine_transport_bytes: out is NULL"))
	}
	name := goString(transport)
	n, ok := e.TransportBytes()[name]
	if !ok {
		return setErr(invalid(fmt.Sprintf("unknown transport %q (local, shm or tcp)", name)))
	}
	*out = C.uint64_t(n)
	return 0
}
