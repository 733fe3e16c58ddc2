package main

/*
#include <stdint.h>
*/
import "C"

import (
	"context"
	"unsafe"

	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/client"
)

// Session-based ranged reads (store/client/ranges_snapshot.go, ranges_plan.go): snapshots,
// templates and plans live here behind handles; a batch passes handles and flat arrays, and the
// per-range work runs in Go.

// snapshotHandle is a snapshot and the store handle that prepared it.
type snapshotHandle struct {
	store uint64
	snap  *client.Snapshot
}

var (
	snapshots      handles[*snapshotHandle]
	rangeTemplates handles[*client.RangeTemplate]
	rangePlans     handles[*client.RangePlan]
)

// u64s views n C uint64s as a Go slice (valid for the call only); nil when n is 0.
func u64s(p *C.uint64_t, n C.int64_t) []uint64 {
	if n <= 0 || p == nil {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(p)), int(n))
}

// badArrays reports whether an array of n entries is missing or n is negative.
func badArrays(n C.int64_t, ps ...unsafe.Pointer) bool {
	if n < 0 {
		return true
	}
	for _, p := range ps {
		if n > 0 && p == nil {
			return true
		}
	}
	return false
}

// storeSnapshot returns the client of store h and snapshot snap, which h must have prepared.
func storeSnapshot(h, snap C.uint64_t) (*client.Client, *client.Snapshot, error) {
	c, err := storeClient(h)
	if err != nil {
		return nil, nil, err
	}
	sh, ok := snapshots.get(uint64(snap))
	if !ok {
		return nil, nil, api.Errorf(api.INVALID_PARAMS, "unknown or closed RangedReadSnapshot %d", uint64(snap))
	}
	if sh.snap.Client() != c {
		return nil, nil, api.Errorf(api.INVALID_PARAMS, "this RangedReadSnapshot was prepared by another Store; prepare one with this store")
	}
	return c, sh.snap, nil
}

// mc_store_snapshot_prepare queries the replicas of n keys once and returns a snapshot handle
// in *out (keys that do not exist are allowed). Free it with mc_store_snapshot_free.
//
//export mc_store_snapshot_prepare
func mc_store_snapshot_prepare(h C.uint64_t, keys **C.char, n C.int32_t, out *C.uint64_t) C.int {
	c, err := storeClient(h)
	if err != nil {
		return serr(err)
	}
	if out == nil {
		return serr(api.Errorf(api.INVALID_PARAMS, "out is NULL"))
	}
	ks, err := cKeys(keys, n)
	if err != nil {
		return serr(err)
	}
	s := c.PrepareSnapshot(context.Background(), ks)
	*out = C.uint64_t(snapshots.put(&snapshotHandle{store: uint64(h), snap: s}))
	return 0
}

// mc_store_snapshot_free releases a snapshot handle.
//
//export mc_store_snapshot_free
func mc_store_snapshot_free(snap C.uint64_t) C.int {
	sh, ok := snapshots.take(uint64(snap))
	if !ok {
		return serr(api.Errorf(api.INVALID_PARAMS, "unknown or closed RangedReadSnapshot %d", uint64(snap)))
	}
	sh.snap.Close()
	return 0
}

// mc_store_snapshot_get_ranges reads ngroups groups through snapshot snap: group i is
// counts[i] fragments of keys[i], the fragments of all groups one group after the other in
// srcs, dsts (addresses in registered buffers) and sizes. results gets each fragment's bytes
// read or its negative code; the call returns 0 when it ran.
//
//export mc_store_snapshot_get_ranges
func mc_store_snapshot_get_ranges(h, snap C.uint64_t, ngroups C.int32_t, keys **C.char, counts *C.int64_t,
	srcs, dsts, sizes *C.uint64_t, allowStaging C.int32_t, results *C.int64_t) C.int {
	_, s, err := storeSnapshot(h, snap)
	if err != nil {
		return serr(err)
	}
	ks, err := cKeys(keys, ngroups)
	if err != nil {
		return serr(err)
	}
	if ngroups > 0 && counts == nil {
		return serr(api.Errorf(api.INVALID_PARAMS, "counts is NULL"))
	}
	var total int64
	cs := unsafe.Slice((*int64)(unsafe.Pointer(counts)), int(ngroups))
	for _, n := range cs {
		if n < 0 {
			return serr(api.Errorf(api.INVALID_PARAMS, "a negative fragment count"))
		}
		total += n
	}
	if badArrays(C.int64_t(total), unsafe.Pointer(srcs), unsafe.Pointer(dsts), unsafe.Pointer(sizes), unsafe.Pointer(results)) {
		return serr(api.Errorf(api.INVALID_PARAMS, "bad fragment arrays (%d fragments)", total))
	}
	ss, ds, ls := u64s(srcs, C.int64_t(total)), u64s(dsts, C.int64_t(total)), u64s(sizes, C.int64_t(total))
	groups := make([]client.RangeGroup, len(ks))
	frags := make([]client.Range, total)
	off := int64(0)
	for i, k := range ks {
		g := frags[off : off+cs[i]]
		for j := range g {
			g[j] = client.Range{Src: ss[off+int64(j)], Dst: uintptr(ds[off+int64(j)]), Size: ls[off+int64(j)]}
		}
		groups[i] = client.RangeGroup{Key: k, Frags: g}
		off += cs[i]
	}
	got, errs := s.GetRanges(context.Background(), groups, allowStaging != 0)
	var first error
	res := unsafe.Slice((*int64)(unsafe.Pointer(results)), int(total))
	off = 0
	for i := range groups {
		for j := range groups[i].Frags {
			if e := errs[i][j]; e != nil {
				res[off] = int64(api.CodeOf(e))
				if first == nil {
					first = e
				}
			} else {
				res[off] = int64(got[i][j])
			}
			off++
		}
	}
	if first != nil {
		serr(first)
	}
	return 0
}

// mc_store_range_template_create checks and keeps a ranged-read template (nd destination
// offsets, ns source offsets, nz sizes, as many of each) and returns its handle in *out.
//
//export mc_store_range_template_create
func mc_store_range_template_create(dsts *C.uint64_t, nd C.int64_t, srcs *C.uint64_t, ns C.int64_t, sizes *C.uint64_t, nz C.int64_t, out *C.uint64_t) C.int {
	if out == nil || badArrays(nd, unsafe.Pointer(dsts)) || badArrays(ns, unsafe.Pointer(srcs)) || badArrays(nz, unsafe.Pointer(sizes)) {
		return serr(api.Errorf(api.INVALID_PARAMS, "bad template arrays"))
	}
	t, err := client.NewRangeTemplate(u64s(dsts, nd), u64s(srcs, ns), u64s(sizes, nz))
	if err != nil {
		return serr(err)
	}
	*out = C.uint64_t(rangeTemplates.put(t))
	return 0
}

// mc_store_range_template_free releases a template handle (plans built from it keep its
// geometry).
//
//export mc_store_range_template_free
func mc_store_range_template_free(t C.uint64_t) C.int {
	if _, ok := rangeTemplates.take(uint64(t)); !ok {
		return serr(api.Errorf(api.INVALID_PARAMS, "unknown ranged-read template %d", uint64(t)))
	}
	return 0
}

// templatesOf resolves n template handles (0 or an unknown handle: nil).
func templatesOf(p *C.uint64_t, n C.int64_t) []*client.RangeTemplate {
	hs := u64s(p, n)
	out := make([]*client.RangeTemplate, len(hs))
	for i, h := range hs {
		out[i], _ = rangeTemplates.get(h)
	}
	return out
}

// mc_store_range_plan_create builds a plan: row i appends template templates[i] to object
// (regions[i], suffixes[i]). It returns the plan's handle in *out and its range and object
// counts in *ranges and *objects.
//
//export mc_store_range_plan_create
func mc_store_range_plan_create(templates *C.uint64_t, nt C.int64_t, suffixes **C.char, nsfx C.int32_t, regions *C.uint64_t, nr C.int64_t,
	out, ranges, objects *C.uint64_t) C.int {
	if out == nil || ranges == nil || objects == nil || badArrays(nt, unsafe.Pointer(templates)) || badArrays(nr, unsafe.Pointer(regions)) {
		return serr(api.Errorf(api.INVALID_PARAMS, "bad plan arrays"))
	}
	sfx, err := cKeys(suffixes, nsfx)
	if err != nil {
		return serr(err)
	}
	p, err := client.NewRangePlan(templatesOf(templates, nt), sfx, u64s(regions, nr))
	if err != nil {
		return serr(err)
	}
	*out = C.uint64_t(rangePlans.put(p))
	*ranges, *objects = C.uint64_t(p.Ranges()), C.uint64_t(p.Objects())
	return 0
}

// mc_store_range_plan_free releases a plan handle.
//
//export mc_store_range_plan_free
func mc_store_range_plan_free(p C.uint64_t) C.int {
	if _, ok := rangePlans.take(uint64(p)); !ok {
		return serr(api.Errorf(api.INVALID_PARAMS, "unknown ranged-read plan %d", uint64(p)))
	}
	return 0
}

func addrs(p *C.uint64_t, n C.int64_t) []uintptr {
	out := make([]uintptr, 0, max(n, 0))
	for _, a := range u64s(p, n) {
		out = append(out, uintptr(a))
	}
	return out
}

func putBools(out *C.uint8_t, ok []bool) {
	res := unsafe.Slice((*uint8)(unsafe.Pointer(out)), len(ok))
	for i, b := range ok {
		res[i] = 0
		if b {
			res[i] = 1
		}
	}
}

// mc_store_snapshot_read_templates reads template rows through snapshot snap (Snapshot.
// ReadTemplates): row i reads templates[i] from keys[i] into buffers[indices[i]] moved by
// translations[i]. ok[i] (nk entries) is 1 when the row read completely. A malformed batch
// returns INVALID_PARAMS with upstream's message; otherwise 0.
//
//export mc_store_snapshot_read_templates
func mc_store_snapshot_read_templates(h, snap C.uint64_t, templates *C.uint64_t, nt C.int64_t, buffers *C.uint64_t, nb C.int64_t,
	indices *C.uint64_t, ni C.int64_t, keys **C.char, nk C.int32_t, translations *C.uint64_t, ntr C.int64_t,
	allowStaging C.int32_t, ok *C.uint8_t) C.int {
	_, s, err := storeSnapshot(h, snap)
	if err != nil {
		return serr(err)
	}
	if badArrays(nt, unsafe.Pointer(templates)) || badArrays(nb, unsafe.Pointer(buffers)) || badArrays(ni, unsafe.Pointer(indices)) ||
		badArrays(ntr, unsafe.Pointer(translations)) || badArrays(C.int64_t(nk), unsafe.Pointer(ok)) {
		return serr(api.Errorf(api.INVALID_PARAMS, "bad template batch arrays"))
	}
	ks, err := cKeys(keys, nk)
	if err != nil {
		return serr(err)
	}
	res, err := s.ReadTemplates(context.Background(), templatesOf(templates, nt), addrs(buffers, nb), u64s(indices, ni), ks,
		u64s(translations, ntr), allowStaging != 0)
	if err != nil {
		return serr(err)
	}
	putBools(ok, res)
	return 0
}

// mc_store_snapshot_read_plans reads pages through snapshot snap (Snapshot.ReadPlans): page i
// runs plans[i] with keys prefixes[i]+suffix and translation row i, tcounts[i] entries of
// translations (the rows one after the other). ok[i] (np entries) is 1 when the page read
// completely. A malformed batch returns INVALID_PARAMS with upstream's message; otherwise 0.
//
//export mc_store_snapshot_read_plans
func mc_store_snapshot_read_plans(h, snap C.uint64_t, plans *C.uint64_t, np C.int64_t, buffers *C.uint64_t, nb C.int64_t,
	prefixes **C.char, npre C.int32_t, tcounts *C.int64_t, ntc C.int64_t, translations *C.uint64_t,
	allowStaging C.int32_t, ok *C.uint8_t) C.int {
	_, s, err := storeSnapshot(h, snap)
	if err != nil {
		return serr(err)
	}
	if badArrays(np, unsafe.Pointer(plans), unsafe.Pointer(ok)) || badArrays(nb, unsafe.Pointer(buffers)) || badArrays(ntc, unsafe.Pointer(tcounts)) {
		return serr(api.Errorf(api.INVALID_PARAMS, "bad plan batch arrays"))
	}
	pre, err := cKeys(prefixes, npre)
	if err != nil {
		return serr(err)
	}
	ps := make([]*client.RangePlan, 0, np)
	for _, hp := range u64s(plans, np) {
		p, _ := rangePlans.get(hp)
		ps = append(ps, p)
	}
	counts := unsafe.Slice((*int64)(unsafe.Pointer(tcounts)), int(max(ntc, 0)))
	var total int64
	for _, n := range counts {
		if n < 0 {
			return serr(api.Errorf(api.INVALID_PARAMS, "a negative translation count"))
		}
		total += n
	}
	if badArrays(C.int64_t(total), unsafe.Pointer(translations)) {
		return serr(api.Errorf(api.INVALID_PARAMS, "translations is NULL"))
	}
	flat := u64s(translations, C.int64_t(total))
	rows := make([][]uint64, len(counts))
	off := int64(0)
	for i, n := range counts {
		rows[i] = flat[off : off+n : off+n]
		off += n
	}
	res, err := s.ReadPlans(context.Background(), ps, addrs(buffers, nb), pre, rows, allowStaging != 0)
	if err != nil {
		return serr(err)
	}
	putBools(ok, res)
	return 0
}
