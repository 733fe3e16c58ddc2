package main

/*
#include "store_abi.h"
*/
import "C"

import (
	"context"
	"unsafe"

	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/client"
)

// Transfer sessions (store/client/sessions.go; upstream's batch_get_session_* and
// batch_put_session_* calls and their *_multi_buffer_ranges transfers). Per-key results follow
// the data calls' convention (store_data.go): codes or byte counts per key, the first failure's
// message as the last error, and 0 returned when the call ran.

// mc_store_get_session_start queries the replicas of n keys once and opens a get session for
// each; codes[i] = 0 or key i's negative code.
//
//export mc_store_get_session_start
func mc_store_get_session_start(h C.uint64_t, keys **C.char, n C.int32_t, codes *C.int32_t) C.int {
	c, ks, err := sessionKeys(h, keys, n, codes)
	if err != nil {
		return failAll(err, codes, n)
	}
	return itemCodes(c.GetSessionStart(context.Background(), ks), codes)
}

// mc_store_get_session_end closes the get sessions of n keys (keys without one are ignored).
//
//export mc_store_get_session_end
func mc_store_get_session_end(h C.uint64_t, keys **C.char, n C.int32_t) C.int {
	c, err := storeClient(h)
	if err != nil {
		return serr(err)
	}
	ks, err := cKeys(keys, n)
	if err != nil {
		return serr(err)
	}
	c.GetSessionEnd(ks)
	return 0
}

// mc_store_put_session_start reserves an object of sizes[i] bytes for each of n keys with cfg's
// placement (NULL: the defaults) and opens a put session for it; codes[i] = 0 or <0.
//
//export mc_store_put_session_start
func mc_store_put_session_start(h C.uint64_t, keys **C.char, n C.int32_t, sizes *C.uint64_t, cfgp *C.mc_replicate_config, codes *C.int32_t) C.int {
	c, ks, err := sessionKeys(h, keys, n, codes)
	if err == nil && n > 0 && sizes == nil {
		err = api.Errorf(api.INVALID_PARAMS, "sizes is NULL")
	}
	var cfg api.ReplicateConfig
	if err == nil {
		cfg, err = replicateConfig(cfgp)
	}
	if err != nil {
		return failAll(err, codes, n)
	}
	return itemCodes(c.PutSessionStart(context.Background(), ks, u64s(sizes, C.int64_t(n)), cfg), codes)
}

// mc_store_put_session_finish ends (revoke == 0: the objects become readable) or revokes (the
// objects are dropped) the put sessions of n keys; codes[i] = 0 or <0.
//
//export mc_store_put_session_finish
func mc_store_put_session_finish(h C.uint64_t, keys **C.char, n C.int32_t, revoke C.int32_t, codes *C.int32_t) C.int {
	c, ks, err := sessionKeys(h, keys, n, codes)
	if err != nil {
		return failAll(err, codes, n)
	}
	return itemCodes(c.PutSessionEnd(context.Background(), ks, revoke != 0), codes)
}

// mc_store_session_ranges moves ranges of ngroups keys through their sessions: write == 0 reads
// through get sessions, write != 0 writes through put sessions. Group i is counts[i] ranges of
// keys[i], every group's ranges one after another in offsets (in the object), addrs (local
// memory) and sizes; results[i] = the group's bytes moved, or its negative code.
//
//export mc_store_session_ranges
func mc_store_session_ranges(h C.uint64_t, write C.int32_t, ngroups C.int32_t, keys **C.char, counts *C.int64_t,
	offsets, addrs, sizes *C.uint64_t, results *C.int64_t) C.int {
	c, ks, err := sessionKeys(h, keys, ngroups, results)
	if err == nil && ngroups > 0 && counts == nil {
		err = api.Errorf(api.INVALID_PARAMS, "counts is NULL")
	}
	var total int64
	if err == nil {
		for _, k := range unsafe.Slice((*int64)(unsafe.Pointer(counts)), int(ngroups)) {
			if k < 0 {
				err = api.Errorf(api.INVALID_PARAMS, "a negative range count")
				break
			}
			total += k
		}
	}
	if err == nil && badArrays(C.int64_t(total), unsafe.Pointer(offsets), unsafe.Pointer(addrs), unsafe.Pointer(sizes)) {
		err = api.Errorf(api.INVALID_PARAMS, "bad range arrays (%d ranges)", total)
	}
	if err != nil {
		return failAll(err, results, ngroups)
	}
	offs, as, ls := u64s(offsets, C.int64_t(total)), u64s(addrs, C.int64_t(total)), u64s(sizes, C.int64_t(total))
	cs := unsafe.Slice((*int64)(unsafe.Pointer(counts)), int(ngroups))
	groups := make([]client.SpanGroup, len(ks))
	spans := make([]client.Span, total)
	for j := range spans {
		spans[j] = client.Span{Off: offs[j], Addr: uintptr(as[j]), Size: ls[j]}
	}
	off := int64(0)
	for i, k := range ks {
		groups[i] = client.SpanGroup{Key: k, Spans: spans[off : off+cs[i] : off+cs[i]]}
		off += cs[i]
	}
	var got []uint64
	var errs []error
	if write != 0 {
		got, errs = c.PutSessionRanges(context.Background(), groups)
	} else {
		got, errs = c.GetSessionRanges(context.Background(), groups)
	}
	serr(sizesOrCodes(got, errs, results))
	return 0
}

// sessionKeys returns the client of h and n keys, checking out (the per-key result array).
func sessionKeys[T any](h C.uint64_t, keys **C.char, n C.int32_t, out *T) (*client.Client, []string, error) {
	c, err := storeClient(h)
	if err == nil {
		err = needCodes(n, out)
	}
	if err != nil {
		return nil, nil, err
	}
	ks, err := cKeys(keys, n)
	return c, ks, err
}
