package main

/*
#include "store_abi.h"
*/
import "C"

import (
	"context"
	"unsafe"

	"github.com/mooncake-go/mooncake/internal/memview"
	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/client"
)

// The data calls of the store section, one entry per family for any number of items or keys:
// mc_store_put, mc_store_get, mc_store_is_exist and mc_store_remove (store/client's Put, Get,
// Exists and Remove), and the removals by pattern.
//
// Their convention (the C ABI's for batches): codes[i] gets item i's status, 0 or a negative
// code, and the first failure's message is kept as the last error; the call returns 0 when it
// ran, even if items failed. A call that cannot run at all (unknown handle, bad arrays) returns
// that error's code and gives it to every item too.

// request is a C item array converted: the items to send, the C index of each, and an error
// per C item (set for an item that could not be converted; the others' come from the call).
type request struct {
	items []client.Item
	idx   []int
	errs  []error
}

// What a request's items hold: a value to put, buffers to get into, nothing (a get with an
// allocator).
const (
	putItems = iota
	getIntoItems
	getAllocItems
)

// cRequest converts n C items of a request of that kind.
func cRequest(p *C.mc_store_item, n C.int32_t, kind int) (*request, error) {
	if n < 0 || (n > 0 && p == nil) {
		return nil, api.Errorf(api.INVALID_PARAMS, "bad item array (n=%d)", int(n))
	}
	r := &request{errs: make([]error, int(n))}
	for i, ci := range unsafe.Slice(p, int(n)) {
		it, err := cItem(&ci, i, kind)
		if err != nil {
			r.errs[i] = err
			continue
		}
		r.items = append(r.items, it)
		r.idx = append(r.idx, i)
	}
	return r, nil
}

// cItem converts C item i: its key, and its parts as slices over the caller's memory.
func cItem(ci *C.mc_store_item, i int, kind int) (client.Item, error) {
	if ci.key == nil {
		return client.Item{}, api.Errorf(api.INVALID_KEY, "item %d: key is NULL", i)
	}
	key := C.GoString(ci.key)
	n := int(ci.nparts)
	switch {
	case n < 0 || (n > 0 && (ci.addrs == nil || ci.lens == nil)):
		return client.Item{}, api.Errorf(api.INVALID_PARAMS, "item %d (%q): bad part arrays (nparts=%d)", i, key, n)
	case n > 0 && kind == getAllocItems:
		return client.Item{}, api.Errorf(api.INVALID_PARAMS, "item %d (%q): buffers and an allocator: give one or the other", i, key)
	}
	addrs, lens := unsafe.Slice(ci.addrs, n), unsafe.Slice(ci.lens, n)
	parts := make([][]byte, n)
	room := 0
	for k := range parts {
		if addrs[k] == 0 && lens[k] > 0 {
			return client.Item{}, api.Errorf(api.INVALID_PARAMS, "item %d (%q): buffer %d is NULL", i, key, k)
		}
		parts[k] = memview.Bytes(uintptr(addrs[k]), int(lens[k]))
		room += len(parts[k])
	}
	if kind == getIntoItems && room == 0 {
		return client.Item{}, api.Errorf(api.INVALID_PARAMS, "item %d (%q): no buffer to read the value into", i, key)
	}
	return client.Item{Key: key, Parts: parts}, nil
}

// merge writes the errors of the items sent to their C items.
func (r *request) merge(errs []error) {
	for j, err := range errs {
		r.errs[r.idx[j]] = err
	}
}

// itemCodes writes each item's code to codes, keeps the first failure's message as the last
// error, and returns 0: the call ran.
func itemCodes(errs []error, codes *C.int32_t) C.int {
	out := unsafe.Slice(codes, len(errs))
	for i, err := range errs {
		out[i] = C.int32_t(int32(api.CodeOf(err)))
	}
	serr(firstErr(errs))
	return 0
}

// needCodes is the error of a call on n items without the array for their codes.
func needCodes[T any](n C.int32_t, codes *T) error {
	if n > 0 && codes == nil {
		return api.Errorf(api.INVALID_PARAMS, "the array for the %d items' codes is NULL", int(n))
	}
	return nil
}

// failAll reports err, a call that could not run, for the call and for each of its n items
// (codes: an array of C int32_t or int64_t, or NULL).
func failAll[T ~int32 | ~int64](err error, codes *T, n C.int32_t) C.int {
	rc := serr(err)
	if codes != nil && n > 0 {
		out := unsafe.Slice(codes, int(n))
		for i := range out {
			out[i] = T(rc)
		}
	}
	return rc
}

// sizesOrCodes writes each item's byte count, or its negative code when it failed, to
// results[0..len(errs)) and returns the first failure.
func sizesOrCodes(got []uint64, errs []error, results *C.int64_t) error {
	res := unsafe.Slice(results, len(errs))
	for i, err := range errs {
		if err != nil {
			res[i] = C.int64_t(api.CodeOf(err))
		} else {
			res[i] = C.int64_t(got[i])
		}
	}
	return firstErr(errs)
}

// mc_store_put stores each item's value (the concatenation of its parts) under its key, with
// cfg's placement; flags MC_STORE_UPSERT replaces values keys have (else write-once).
//
//export mc_store_put
func mc_store_put(h C.uint64_t, items *C.mc_store_item, n C.int32_t, cfgp *C.mc_replicate_config, flags C.uint32_t, codes *C.int32_t) C.int {
	c, err := storeClient(h)
	if err == nil {
		err = needCodes(n, codes)
	}
	var opts client.PutOptions
	if err == nil {
		opts.Config, err = replicateConfig(cfgp)
	}
	if err == nil && flags&^C.MC_STORE_UPSERT != 0 {
		err = api.Errorf(api.INVALID_PARAMS, "unknown put flags %#x (MC_STORE_UPSERT is %#x)", uint32(flags), uint32(C.MC_STORE_UPSERT))
	}
	var r *request
	if err == nil {
		r, err = cRequest(items, n, putItems)
	}
	if err != nil {
		return failAll(err, codes, n)
	}
	opts.Upsert = flags&C.MC_STORE_UPSERT != 0
	r.merge(c.Put(context.Background(), r.items, opts))
	return itemCodes(r.errs, codes)
}

// mc_store_get reads each item's value into its parts, or, with alloc, into memory from
// alloc(ctx, i, size); sizes[i] (when not NULL) gets item i's size, 0 when it failed.
//
//export mc_store_get
func mc_store_get(h C.uint64_t, items *C.mc_store_item, n C.int32_t, alloc C.mc_store_alloc_fn, actx unsafe.Pointer, sizes *C.uint64_t, codes *C.int32_t) C.int {
	c, err := storeClient(h)
	if err == nil {
		err = needCodes(n, codes)
	}
	var r *request
	if err == nil {
		kind := getIntoItems
		if alloc != nil {
			kind = getAllocItems
		}
		r, err = cRequest(items, n, kind)
	}
	var out []C.uint64_t
	if sizes != nil && n > 0 {
		out = unsafe.Slice(sizes, int(n))
		clear(out)
	}
	if err != nil {
		return failAll(err, codes, n)
	}
	var opts client.GetOptions
	if alloc != nil {
		opts.Alloc = func(j int, size uint64) ([]byte, error) {
			return callerMemory(size, func() unsafe.Pointer {
				return C.mc_store_call_alloc(alloc, actx, C.int32_t(r.idx[j]), C.uint64_t(size))
			})
		}
	}
	got, errs := c.Get(context.Background(), r.items, opts)
	r.merge(errs)
	if out != nil {
		for j, i := range r.idx {
			out[i] = C.uint64_t(got[j])
		}
	}
	return itemCodes(r.errs, codes)
}

// callerMemory is the size bytes a caller's allocator returns for a value: none, without
// asking, for an empty value; an error when it gives up.
func callerMemory(size uint64, alloc func() unsafe.Pointer) ([]byte, error) {
	if size == 0 {
		return nil, nil
	}
	p := alloc()
	if p == nil {
		return nil, api.Errorf(api.INTERNAL_ERROR, "the caller could not allocate %d bytes", size)
	}
	return memview.Bytes(uintptr(p), int(size)), nil
}

// mc_store_malloc is an mc_store_alloc_fn over malloc: ctx is an array of void* that gets the
// memory of item i at index i (free it with mc_store_free, also when the item then failed).
//
//export mc_store_malloc
func mc_store_malloc(ctx unsafe.Pointer, i C.int32_t, n C.uint64_t) unsafe.Pointer {
	p := C.malloc(C.size_t(n))
	if ctx != nil && i >= 0 {
		unsafe.Slice((*unsafe.Pointer)(ctx), int(i)+1)[i] = p
	}
	return p
}

// mc_store_is_exist looks keys up: results[i] is keys[i]'s value size (> 0) when it is stored,
// 0 when it is not, or a negative code.
//
//export mc_store_is_exist
func mc_store_is_exist(h C.uint64_t, keys **C.char, n C.int32_t, results *C.int64_t) C.int {
	c, ks, err := batchArgs(h, keys, n)
	if err == nil {
		err = needCodes(n, results)
	}
	if err != nil {
		return failAll(err, results, n)
	}
	sizes, errs := c.Exists(context.Background(), ks)
	serr(sizesOrCodes(sizes, errs, results))
	return 0
}

// mc_store_remove removes keys; force removes leased and hard-pinned ones too.
//
//export mc_store_remove
func mc_store_remove(h C.uint64_t, keys **C.char, n C.int32_t, force C.int32_t, codes *C.int32_t) C.int {
	c, ks, err := batchArgs(h, keys, n)
	if err == nil {
		err = needCodes(n, codes)
	}
	if err != nil {
		return failAll(err, codes, n)
	}
	return itemCodes(c.Remove(context.Background(), ks, force != 0), codes)
}

//export mc_store_remove_by_regex
func mc_store_remove_by_regex(h C.uint64_t, pattern *C.char, force C.int32_t) C.int64_t {
	c, err := storeClient(h)
	if err != nil {
		return C.int64_t(serr(err))
	}
	if pattern == nil {
		return C.int64_t(serr(api.Errorf(api.INVALID_PARAMS, "pattern is NULL")))
	}
	n, err := c.RemoveByRegex(context.Background(), C.GoString(pattern), force != 0)
	if err != nil {
		return C.int64_t(serr(err))
	}
	return C.int64_t(n)
}

// mc_store_remove_all removes every key of the store's tenant; keepHeld leaves those a plain
// remove would refuse (leased, hard-pinned).
//
//export mc_store_remove_all
func mc_store_remove_all(h C.uint64_t, keepHeld C.int32_t) C.int64_t {
	c, err := storeClient(h)
	if err != nil {
		return C.int64_t(serr(err))
	}
	n, err := c.RemoveAll(context.Background(), keepHeld != 0)
	if err != nil {
		return C.int64_t(serr(err))
	}
	return C.int64_t(n)
}
