package main

/*
#include <stdint.h>
#include <stdlib.h>
// Same layout as in include/mooncake_store.h (that header's const prototypes cannot be included
// here: cgo's generated export declarations drop const and would conflict).
typedef struct mc_replicate_config {
  int32_t replica_num;
  int32_t with_soft_pin;
  int32_t with_hard_pin;
  const char *preferred_segments;
  int32_t soft_pin_action;
  int32_t has_soft_pin_ttl;
  uint64_t soft_pin_ttl_ms;
  int32_t prefer_alloc_in_same_node;
} mc_replicate_config;
// mc_store_alloc_fn returns len writable bytes for a value (NULL: give up) — see mc_store_get_with.
typedef void *(*mc_store_alloc_fn)(void *ctx, uint64_t len);
static inline void *mc_store_call_alloc(mc_store_alloc_fn fn, void *ctx, uint64_t len) { return fn(ctx, len); }
// mc_store_batch_alloc_fn is mc_store_alloc_fn for key i of a batch — see mc_store_batch_get_with.
typedef void *(*mc_store_batch_alloc_fn)(void *ctx, int32_t i, uint64_t len);
static inline void *mc_store_call_batch_alloc(mc_store_batch_alloc_fn fn, void *ctx, int32_t i, uint64_t len) { return fn(ctx, i, len); }
*/
import "C"

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/mooncake-go/mooncake/config"
	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/internal/memview"
	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/client"
)

// The store section of the C ABI: thin adapters from mc_store_* to store/client. Every entry
// validates its arguments, runs the operation and maps errors to Mooncake's store codes.

type storeHandle struct {
	mu      sync.RWMutex
	c       *client.Client        // nil until setup
	offload *client.OffloadConfig // SSD offload asked for before setup (mc_store_enable_ssd_offload)
	dummy   io.Closer             // a dummy client's attachment to its real client (mc_store_setup_dummy)
}

var stores handles[*storeHandle]

// storeErr carries an api error's Mooncake code to setErr.
type storeErr struct{ err error }

func (e storeErr) Error() string { return e.err.Error() }
func (e storeErr) Unwrap() error { return e.err }
func (e storeErr) Code() int {
	if c := api.CodeOf(e.err); c != api.OK {
		return int(c)
	}
	return int(api.INTERNAL_ERROR)
}

func serr(err error) C.int {
	if err == nil {
		return 0
	}
	return setErr(storeErr{err})
}

func storeClient(h C.uint64_t) (*client.Client, error) {
	s, ok := stores.get(uint64(h))
	if !ok {
		return nil, api.Errorf(api.INVALID_PARAMS, "unknown store handle %d", uint64(h))
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.c == nil {
		return nil, api.Errorf(api.INVALID_PARAMS, "the store is not set up: call setup() first")
	}
	return s.c, nil
}

// storeEngine returns the process-wide engine, creating it from the setup arguments when the
// process has none yet (processEngine would create it from the environment instead).
func storeEngine(cfg client.Config) (*engine.Engine, error) {
	return sharedEngine(func() engine.Config {
		ecfg := client.EngineConfig(cfg)
		if ecfg.LocalServerName == "" {
			ecfg.LocalServerName = "127.0.0.1"
		}
		return ecfg
	})
}

func replicateConfig(p *C.mc_replicate_config) (api.ReplicateConfig, error) {
	cfg := api.ReplicateConfig{ReplicaNum: 1}
	if p == nil {
		return cfg, nil
	}
	cfg.ReplicaNum = int(p.replica_num)
	if cfg.ReplicaNum <= 0 {
		return cfg, api.Errorf(api.INVALID_PARAMS, "replica_num must be >= 1, got %d", cfg.ReplicaNum)
	}
	cfg.WithSoftPin = p.with_soft_pin != 0
	cfg.WithHardPin = p.with_hard_pin != 0
	for _, s := range strings.Split(goString(p.preferred_segments), ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.PreferredSegments = append(cfg.PreferredSegments, s)
		}
	}
	cfg.SoftPinAction = api.SoftPinAction(p.soft_pin_action)
	if cfg.SoftPinAction < api.SoftPinPreserve || cfg.SoftPinAction > api.SoftPinDisable {
		return cfg, api.Errorf(api.INVALID_PARAMS, "soft_pin_action %d is not PRESERVE (0), ENABLE (1) or DISABLE (2)", int(p.soft_pin_action))
	}
	if p.has_soft_pin_ttl != 0 {
		ttl := uint64(p.soft_pin_ttl_ms)
		cfg.SoftPinTTLMs = &ttl
	}
	cfg.PreferAllocInSameNode = p.prefer_alloc_in_same_node != 0
	return cfg, nil
}

// storeKey returns the set-up client of h and the key, or the error to report.
func storeKey(h C.uint64_t, key *C.char) (*client.Client, string, error) {
	c, err := storeClient(h)
	if err != nil {
		return nil, "", err
	}
	k, err := cKey(key)
	return c, k, err
}

// cAddrLens copies n C addresses and lengths.
func cAddrLens(addrs, lens *C.uint64_t, n C.int32_t) ([]uintptr, []uint64) {
	as := make([]uintptr, int(n))
	sz := make([]uint64, int(n))
	for i, a := range unsafe.Slice(addrs, int(n)) {
		as[i] = uintptr(a)
	}
	for i, l := range unsafe.Slice(lens, int(n)) {
		sz[i] = uint64(l)
	}
	return as, sz
}

func cKey(k *C.char) (string, error) {
	if k == nil {
		return "", api.Errorf(api.INVALID_KEY, "key is NULL")
	}
	return C.GoString(k), nil
}

func cKeys(keys **C.char, n C.int32_t) ([]string, error) {
	if n < 0 || (n > 0 && keys == nil) {
		return nil, api.Errorf(api.INVALID_PARAMS, "bad key array (n=%d)", int(n))
	}
	out := make([]string, int(n))
	for i, k := range unsafe.Slice(keys, int(n)) {
		if k == nil {
			return nil, api.Errorf(api.INVALID_KEY, "key %d is NULL", i)
		}
		out[i] = C.GoString(k)
	}
	return out, nil
}

func codes(errs []error, out *C.int32_t) {
	if out == nil {
		return
	}
	res := unsafe.Slice(out, len(errs))
	for i, e := range errs {
		res[i] = C.int32_t(int32(api.CodeOf(e)))
	}
	if first := firstErr(errs); first != nil {
		serr(first) // keep the message of the first failure for the caller
	}
}

func firstErr(errs []error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

//export mc_store_create
func mc_store_create(out *C.uint64_t) C.int {
	if out == nil {
		return serr(api.Errorf(api.INVALID_PARAMS, "out is NULL"))
	}
	*out = C.uint64_t(stores.put(&storeHandle{}))
	return 0
}

//export mc_store_setup
func mc_store_setup(h C.uint64_t, local, meta *C.char, segSize, bufSize C.uint64_t, proto, dev, masterAddr *C.char) C.int {
	return storeSetup(h, client.Config{
		LocalHostname: goString(local), MetadataServer: goString(meta), GlobalSegmentSize: uint64(segSize),
		LocalBufferSize: uint64(bufSize), Protocol: goString(proto), DeviceName: goString(dev),
		MasterServerAddress: goString(masterAddr),
	}, false, "")
}

// setupOptions are the options of mc_store_setup_json (the names of upstream's setup()).
type setupOptions struct {
	LocalHostname     string `json:"local_hostname"`
	MetadataServer    string `json:"metadata_server"`
	GlobalSegmentSize uint64 `json:"global_segment_size"`
	LocalBufferSize   uint64 `json:"local_buffer_size"`
	Protocol          string `json:"protocol"`
	RDMADevices       string `json:"rdma_devices"`
	MasterServerAddr  string `json:"master_server_addr"`
	EnableSSDOffload  bool   `json:"enable_ssd_offload"`
	SSDOffloadPath    string `json:"ssd_offload_path"`
	TenantID          string `json:"tenant_id"`
}

// mc_store_setup_json is mc_store_setup with its arguments as one JSON object of upstream's
// setup() names (local_hostname, metadata_server, global_segment_size, local_buffer_size,
// protocol, rdma_devices, master_server_addr, enable_ssd_offload, ssd_offload_path, tenant_id); unknown
// names are refused.
//
//export mc_store_setup_json
func mc_store_setup_json(h C.uint64_t, opts *C.char) C.int {
	var o setupOptions
	dec := json.NewDecoder(strings.NewReader(goString(opts)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return serr(api.Errorf(api.INVALID_PARAMS, "setup options: %v", err))
	}
	return storeSetup(h, client.Config{
		LocalHostname: o.LocalHostname, MetadataServer: o.MetadataServer, GlobalSegmentSize: o.GlobalSegmentSize,
		LocalBufferSize: o.LocalBufferSize, Protocol: o.Protocol, DeviceName: o.RDMADevices,
		MasterServerAddress: o.MasterServerAddr, TenantID: o.TenantID,
	}, o.EnableSSDOffload, o.SSDOffloadPath)
}

// storeSetup sets up store h; ssdOffload (setup's enable_ssd_offload, with its directory or ""
// for MOONCAKE_OFFLOAD_FILE_STORAGE_PATH) does what mc_store_enable_ssd_offload does.
func storeSetup(h C.uint64_t, base client.Config, ssdOffload bool, offloadPath string) C.int {
	s, ok := stores.get(uint64(h))
	if !ok {
		return serr(api.Errorf(api.INVALID_PARAMS, "unknown store handle %d", uint64(h)))
	}
	// The store-setup and engine-creation knobs are read now, at setup().
	cfg := config.StoreClient(base)
	// The process-wide engine may exist already (tcp): refuse another protocol here rather than
	// run over tcp while the caller asked for rdma.
	if err := engine.CheckProtocol(cfg.Protocol); err != nil {
		return serr(api.Errorf(api.INVALID_PARAMS, "%v", err))
	}
	if cfg.MasterServerAddress == "" {
		return serr(api.Errorf(api.INVALID_PARAMS, "master_server_address is empty (want host:port of mooncake_master)"))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil {
		return serr(api.Errorf(api.INVALID_PARAMS, "the store is already set up; close it first"))
	}
	if s.offload != nil {
		cfg.Offload = *s.offload
	} else if ssdOffload {
		cfg.Offload = config.StoreOffload(offloadPath)
	}
	eng, err := storeEngine(cfg)
	if err != nil {
		return serr(api.Errorf(api.INVALID_PARAMS, "%v", err))
	}
	c, err := client.NewWithEngine(context.Background(), eng, cfg)
	if err != nil {
		return serr(err)
	}
	s.c = c
	return 0
}

//export mc_store_close
func mc_store_close(h C.uint64_t) C.int {
	s, ok := stores.take(uint64(h))
	if !ok {
		return serr(api.Errorf(api.INVALID_PARAMS, "unknown store handle %d", uint64(h)))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dummy != nil {
		s.dummy.Close()
		s.dummy = nil
	}
	if s.c == nil {
		return 0
	}
	err := s.c.Close()
	s.c = nil
	return serr(err)
}

//export mc_store_health_check
func mc_store_health_check(h C.uint64_t) C.int {
	c, err := storeClient(h)
	if err != nil {
		serr(err)
		return 1
	}
	if err := c.HealthCheck(context.Background()); err != nil {
		serr(err)
		return 2
	}
	return 0
}

//export mc_store_get_hostname
func mc_store_get_hostname(h C.uint64_t, buf *C.char, buflen C.int32_t) C.int {
	c, err := storeClient(h)
	if err != nil {
		return serr(err)
	}
	return copyOut(c.Hostname(), buf, C.int(buflen))
}

//export mc_store_register_buffer
func mc_store_register_buffer(h C.uint64_t, addr, n C.uint64_t) C.int {
	c, err := storeClient(h)
	if err != nil {
		return serr(err)
	}
	return serr(c.RegisterBuffer(uintptr(addr), uint64(n)))
}

//export mc_store_unregister_buffer
func mc_store_unregister_buffer(h C.uint64_t, addr C.uint64_t) C.int {
	c, err := storeClient(h)
	if err != nil {
		return serr(err)
	}
	return serr(c.UnregisterBuffer(uintptr(addr)))
}

func cBytes(p unsafe.Pointer, n C.uint64_t) []byte {
	return memview.Bytes(uintptr(p), int(n))
}

//export mc_store_put
func mc_store_put(h C.uint64_t, key *C.char, data unsafe.Pointer, n C.uint64_t, cfgp *C.mc_replicate_config) C.int {
	return storePut(h, key, data, n, cfgp, false)
}

//export mc_store_upsert
func mc_store_upsert(h C.uint64_t, key *C.char, data unsafe.Pointer, n C.uint64_t, cfgp *C.mc_replicate_config) C.int {
	return storePut(h, key, data, n, cfgp, true)
}

func storePut(h C.uint64_t, key *C.char, data unsafe.Pointer, n C.uint64_t, cfgp *C.mc_replicate_config, upsert bool) C.int {
	c, k, cfg, err := putArgs(h, key, cfgp)
	if err != nil {
		return serr(err)
	}
	if data == nil && n > 0 {
		return serr(api.Errorf(api.INVALID_PARAMS, "data is NULL"))
	}
	if upsert {
		return serr(c.Upsert(context.Background(), k, cBytes(data, n), cfg))
	}
	return serr(c.Put(context.Background(), k, cBytes(data, n), cfg))
}

//export mc_store_put_parts
func mc_store_put_parts(h C.uint64_t, key *C.char, parts *unsafe.Pointer, lens *C.uint64_t, n C.int32_t, cfgp *C.mc_replicate_config) C.int {
	return storePutParts(h, key, parts, lens, n, cfgp, false)
}

//export mc_store_upsert_parts
func mc_store_upsert_parts(h C.uint64_t, key *C.char, parts *unsafe.Pointer, lens *C.uint64_t, n C.int32_t, cfgp *C.mc_replicate_config) C.int {
	return storePutParts(h, key, parts, lens, n, cfgp, true)
}

func storePutParts(h C.uint64_t, key *C.char, parts *unsafe.Pointer, lens *C.uint64_t, n C.int32_t, cfgp *C.mc_replicate_config, upsert bool) C.int {
	c, k, cfg, err := putArgs(h, key, cfgp)
	if err != nil {
		return serr(err)
	}
	if n < 0 || (n > 0 && (parts == nil || lens == nil)) {
		return serr(api.Errorf(api.INVALID_PARAMS, "bad parts array (n=%d)", int(n)))
	}
	ps := unsafe.Slice(parts, int(n))
	ls := unsafe.Slice(lens, int(n))
	bs := make([][]byte, int(n))
	for i := range bs {
		bs[i] = cBytes(ps[i], ls[i])
	}
	if upsert {
		return serr(c.UpsertParts(context.Background(), k, bs, cfg))
	}
	return serr(c.PutParts(context.Background(), k, bs, cfg))
}

//export mc_store_put_from
func mc_store_put_from(h C.uint64_t, key *C.char, addr, n C.uint64_t, cfgp *C.mc_replicate_config) C.int {
	c, k, cfg, err := putArgs(h, key, cfgp)
	if err != nil {
		return serr(err)
	}
	return serr(c.PutFrom(context.Background(), k, uintptr(addr), uint64(n), cfg))
}

//export mc_store_upsert_from
func mc_store_upsert_from(h C.uint64_t, key *C.char, addr, n C.uint64_t, cfgp *C.mc_replicate_config) C.int {
	c, k, cfg, err := putArgs(h, key, cfgp)
	if err != nil {
		return serr(err)
	}
	return serr(c.UpsertFrom(context.Background(), k, uintptr(addr), uint64(n), cfg))
}

//export mc_store_batch_put
func mc_store_batch_put(h C.uint64_t, keys **C.char, datas *unsafe.Pointer, lens *C.uint64_t, n C.int32_t, cfgp *C.mc_replicate_config, results *C.int32_t) C.int {
	return storeBatchPut(h, keys, datas, lens, n, cfgp, results, false)
}

//export mc_store_batch_upsert
func mc_store_batch_upsert(h C.uint64_t, keys **C.char, datas *unsafe.Pointer, lens *C.uint64_t, n C.int32_t, cfgp *C.mc_replicate_config, results *C.int32_t) C.int {
	return storeBatchPut(h, keys, datas, lens, n, cfgp, results, true)
}

func storeBatchPut(h C.uint64_t, keys **C.char, datas *unsafe.Pointer, lens *C.uint64_t, n C.int32_t, cfgp *C.mc_replicate_config, results *C.int32_t, upsert bool) C.int {
	c, ks, cfg, err := batchPutArgs(h, keys, n, cfgp)
	if err != nil {
		return serr(err)
	}
	if n > 0 && (datas == nil || lens == nil || results == nil) {
		return serr(api.Errorf(api.INVALID_PARAMS, "NULL data, length or result array"))
	}
	ds := unsafe.Slice(datas, int(n))
	ls := unsafe.Slice(lens, int(n))
	vals := make([][]byte, int(n))
	for i := range vals {
		vals[i] = cBytes(ds[i], ls[i])
	}
	if upsert {
		codes(c.BatchUpsert(context.Background(), ks, vals, cfg), results)
	} else {
		codes(c.BatchPut(context.Background(), ks, vals, cfg), results)
	}
	return 0
}

//export mc_store_batch_put_from
func mc_store_batch_put_from(h C.uint64_t, keys **C.char, addrs, lens *C.uint64_t, n C.int32_t, cfgp *C.mc_replicate_config, results *C.int32_t) C.int {
	return storeBatchPutFrom(h, keys, addrs, lens, n, cfgp, results, false)
}

//export mc_store_batch_upsert_from
func mc_store_batch_upsert_from(h C.uint64_t, keys **C.char, addrs, lens *C.uint64_t, n C.int32_t, cfgp *C.mc_replicate_config, results *C.int32_t) C.int {
	return storeBatchPutFrom(h, keys, addrs, lens, n, cfgp, results, true)
}

func storeBatchPutFrom(h C.uint64_t, keys **C.char, addrs, lens *C.uint64_t, n C.int32_t, cfgp *C.mc_replicate_config, results *C.int32_t, upsert bool) C.int {
	c, ks, cfg, err := batchPutArgs(h, keys, n, cfgp)
	if err != nil {
		return serr(err)
	}
	if n > 0 && (addrs == nil || lens == nil || results == nil) {
		return serr(api.Errorf(api.INVALID_PARAMS, "NULL address, length or result array"))
	}
	as, sz := cAddrLens(addrs, lens, n)
	if upsert {
		codes(c.BatchUpsertFrom(context.Background(), ks, as, sz, cfg), results)
	} else {
		codes(c.BatchPutFrom(context.Background(), ks, as, sz, cfg), results)
	}
	return 0
}

func cAlloc(n uint64) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	p := C.malloc(C.size_t(n))
	if p == nil {
		return nil, api.Errorf(api.INTERNAL_ERROR, "out of memory allocating %d bytes", n)
	}
	return memview.Bytes(uintptr(p), int(n)), nil
}

// callerMemory is the size bytes a caller's allocator (alloc, the mc_store_*_with callbacks)
// returns for a value: none, without asking, for an empty value; an error when it gives up.
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

func cFree(b []byte) {
	if len(b) > 0 {
		C.free(unsafe.Pointer(unsafe.SliceData(b)))
	}
}

//export mc_store_get
func mc_store_get(h C.uint64_t, key *C.char, out **C.uint8_t, n *C.uint64_t) C.int {
	if out == nil || n == nil {
		return serr(api.Errorf(api.INVALID_PARAMS, "out or len is NULL"))
	}
	*out, *n = nil, 0
	c, k, err := storeKey(h, key)
	if err != nil {
		return serr(err)
	}
	b, err := c.GetAlloc(context.Background(), k, cAlloc)
	if err != nil {
		cFree(b)
		return serr(err)
	}
	if len(b) > 0 {
		*out = (*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(b)))
		*n = C.uint64_t(len(b))
	}
	return 0
}

// mc_store_get_with reads key into memory the caller allocates once the size is known:
// alloc(ctx, size) returns size writable bytes (or NULL to give up), the value is copied straight
// into them, and the size is stored in *n. This lets a binding fill its own result object (a
// Python bytes) with one copy, instead of a malloc'd buffer copied again. A zero-length value
// calls no alloc. Returns 0 or a negative code.
//
//export mc_store_get_with
func mc_store_get_with(h C.uint64_t, key *C.char, alloc C.mc_store_alloc_fn, actx unsafe.Pointer, n *C.uint64_t) C.int {
	if alloc == nil || n == nil {
		return serr(api.Errorf(api.INVALID_PARAMS, "alloc or len is NULL"))
	}
	*n = 0
	c, k, err := storeKey(h, key)
	if err != nil {
		return serr(err)
	}
	b, err := c.GetAlloc(context.Background(), k, func(size uint64) ([]byte, error) {
		return callerMemory(size, func() unsafe.Pointer { return C.mc_store_call_alloc(alloc, actx, C.uint64_t(size)) })
	})
	if err != nil {
		return serr(err)
	}
	*n = C.uint64_t(len(b))
	return 0
}

//export mc_store_get_into
func mc_store_get_into(h C.uint64_t, key *C.char, addr, n C.uint64_t) C.int64_t {
	c, k, err := storeKey(h, key)
	if err != nil {
		return C.int64_t(serr(err))
	}
	got, err := c.GetInto(context.Background(), k, uintptr(addr), uint64(n))
	if err != nil {
		return C.int64_t(serr(err))
	}
	return C.int64_t(got)
}

//export mc_store_batch_get
func mc_store_batch_get(h C.uint64_t, keys **C.char, n C.int32_t, outs **C.uint8_t, lens *C.uint64_t, results *C.int32_t) C.int {
	c, ks, err := batchArgs(h, keys, n)
	if err != nil {
		return serr(err)
	}
	if n > 0 && (outs == nil || lens == nil || results == nil) {
		return serr(api.Errorf(api.INVALID_PARAMS, "NULL output array"))
	}
	vals, errs := c.BatchGetAlloc(context.Background(), ks, func(_ int, size uint64) ([]byte, error) { return cAlloc(size) })
	os := unsafe.Slice(outs, int(n))
	ls := unsafe.Slice(lens, int(n))
	for i := range vals {
		os[i], ls[i] = nil, 0
		if errs[i] != nil {
			cFree(vals[i])
			continue
		}
		if len(vals[i]) > 0 {
			os[i] = (*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(vals[i])))
			ls[i] = C.uint64_t(len(vals[i]))
		}
	}
	codes(errs, results)
	return 0
}

// mc_store_batch_get_with is mc_store_get_with for a batch: alloc(ctx, i, size) returns size
// writable bytes for keys[i] (NULL: give that key up), called on the calling thread in key order
// once the master has answered, before any value is read and not for an empty value; the value
// is read straight into that memory. lens[i] gets the size and results[i] 0 or a negative code
// (memory from alloc for a key that then failed holds no value). Returns 0 when it ran.
//
//export mc_store_batch_get_with
func mc_store_batch_get_with(h C.uint64_t, keys **C.char, n C.int32_t, alloc C.mc_store_batch_alloc_fn, actx unsafe.Pointer, lens *C.uint64_t, results *C.int32_t) C.int {
	c, ks, err := batchArgs(h, keys, n)
	if err != nil {
		return serr(err)
	}
	if n > 0 && (alloc == nil || lens == nil || results == nil) {
		return serr(api.Errorf(api.INVALID_PARAMS, "NULL alloc, length or result array"))
	}
	vals, errs := c.BatchGetAlloc(context.Background(), ks, func(i int, size uint64) ([]byte, error) {
		return callerMemory(size, func() unsafe.Pointer {
			return C.mc_store_call_batch_alloc(alloc, actx, C.int32_t(i), C.uint64_t(size))
		})
	})
	ls := unsafe.Slice(lens, int(n))
	for i := range vals {
		ls[i] = 0
		if errs[i] == nil {
			ls[i] = C.uint64_t(len(vals[i]))
		}
	}
	codes(errs, results)
	return 0
}

//export mc_store_batch_get_into
func mc_store_batch_get_into(h C.uint64_t, keys **C.char, addrs, lens *C.uint64_t, n C.int32_t, results *C.int64_t) C.int {
	c, ks, err := batchArgs(h, keys, n)
	if err != nil {
		return serr(err)
	}
	if n > 0 && (addrs == nil || lens == nil || results == nil) {
		return serr(api.Errorf(api.INVALID_PARAMS, "NULL address, length or result array"))
	}
	as, sz := cAddrLens(addrs, lens, n)
	got, errs := c.BatchGetInto(context.Background(), ks, as, sz)
	return sizesOrCodes(got, errs, results, n)
}

//export mc_store_free
func mc_store_free(p unsafe.Pointer) { C.free(p) }

//export mc_store_get_size
func mc_store_get_size(h C.uint64_t, key *C.char) C.int64_t {
	c, k, err := storeKey(h, key)
	if err != nil {
		return C.int64_t(serr(err))
	}
	n, err := c.Size(context.Background(), k)
	if err != nil {
		return C.int64_t(serr(err))
	}
	return C.int64_t(n)
}

//export mc_store_is_exist
func mc_store_is_exist(h C.uint64_t, key *C.char) C.int {
	c, k, err := storeKey(h, key)
	if err != nil {
		return serr(err)
	}
	ok, err := c.Exists(context.Background(), k)
	if err != nil {
		return serr(err)
	}
	if ok {
		return 1
	}
	return 0
}

//export mc_store_batch_is_exist
func mc_store_batch_is_exist(h C.uint64_t, keys **C.char, n C.int32_t, results *C.int32_t) C.int {
	c, ks, err := batchArgs(h, keys, n)
	if err != nil {
		return serr(err)
	}
	if n > 0 && results == nil {
		return serr(api.Errorf(api.INVALID_PARAMS, "results is NULL"))
	}
	ok, errs := c.BatchExists(context.Background(), ks)
	res := unsafe.Slice(results, int(n))
	for i := range res {
		switch {
		case errs[i] != nil:
			res[i] = C.int32_t(int32(api.CodeOf(errs[i])))
		case ok[i]:
			res[i] = 1
		default:
			res[i] = 0
		}
	}
	if first := firstErr(errs); first != nil {
		serr(first)
	}
	return 0
}

//export mc_store_remove
func mc_store_remove(h C.uint64_t, key *C.char, force C.int32_t) C.int {
	c, k, err := storeKey(h, key)
	if err != nil {
		return serr(err)
	}
	return serr(c.Remove(context.Background(), k, force != 0))
}

//export mc_store_batch_remove
func mc_store_batch_remove(h C.uint64_t, keys **C.char, n C.int32_t, force C.int32_t, results *C.int32_t) C.int {
	c, ks, err := batchArgs(h, keys, n)
	if err != nil {
		return serr(err)
	}
	if n > 0 && results == nil {
		return serr(api.Errorf(api.INVALID_PARAMS, "results is NULL"))
	}
	codes(c.BatchRemove(context.Background(), ks, force != 0), results)
	return 0
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

//export mc_store_remove_all
func mc_store_remove_all(h C.uint64_t) C.int64_t { return mc_store_remove_all_ex(h, 0) }

//export mc_store_remove_all_ex
func mc_store_remove_all_ex(h C.uint64_t, keepHeld C.int32_t) C.int64_t {
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

// batchArgs resolves the store handle and the C key array every batch call starts with.
func batchArgs(h C.uint64_t, keys **C.char, n C.int32_t) (*client.Client, []string, error) {
	c, err := storeClient(h)
	if err != nil {
		return nil, nil, err
	}
	ks, err := cKeys(keys, n)
	if err != nil {
		return nil, nil, err
	}
	return c, ks, nil
}

// batchPutArgs is batchArgs plus the replicate config of the batch put calls.
// putArgs returns the client of h, the key and the replica settings of a put.
func putArgs(h C.uint64_t, key *C.char, cfgp *C.mc_replicate_config) (*client.Client, string, api.ReplicateConfig, error) {
	c, k, err := storeKey(h, key)
	if err != nil {
		return nil, "", api.ReplicateConfig{}, err
	}
	cfg, err := replicateConfig(cfgp)
	return c, k, cfg, err
}

func batchPutArgs(h C.uint64_t, keys **C.char, n C.int32_t, cfgp *C.mc_replicate_config) (*client.Client, []string, api.ReplicateConfig, error) {
	c, ks, err := batchArgs(h, keys, n)
	if err != nil {
		return nil, nil, api.ReplicateConfig{}, err
	}
	cfg, err := replicateConfig(cfgp)
	if err != nil {
		return nil, nil, api.ReplicateConfig{}, err
	}
	return c, ks, cfg, nil
}

// ---- storage tiers ----

// mc_store_replica_desc writes a JSON array describing where key's copies live
// ([{"tier":"memory"|"disk"|"local_disk","segment_name":...,"path":...,"offset":...,"size":...,"status":...}]);
// it returns the JSON's full length (copyOut) or a negative code.
//
//export mc_store_replica_desc
func mc_store_replica_desc(h C.uint64_t, key *C.char, buf *C.char, buflen C.int32_t) C.int {
	c, err := storeClient(h)
	if err != nil {
		return serr(err)
	}
	reps, err := c.ReplicaDesc(context.Background(), goString(key))
	if err != nil {
		return serr(err)
	}
	type desc struct {
		Tier        string `json:"tier"`
		Kind        string `json:"kind"`               // = tier: "memory", "disk" (G3) or "local_disk" (SSD offload)
		Endpoint    string `json:"endpoint,omitempty"` // local_disk: the holding client's offload read server
		SegmentName string `json:"segment_name,omitempty"`
		Path        string `json:"path,omitempty"`
		Offset      int64  `json:"offset,omitempty"`
		Size        uint64 `json:"size"`
		Status      string `json:"status"`
		Addr        uint64 `json:"buffer_address,omitempty"`
	}
	out := make([]desc, 0, len(reps))
	for _, r := range reps {
		d := desc{Tier: r.TierName(), Kind: r.TierName(), Endpoint: r.Endpoint, Size: r.Size, Status: r.Status.String(), Path: r.Path, Offset: r.Offset}
		if !r.IsDisk() {
			d.SegmentName, d.Addr = r.SegmentName, r.Addr
		}
		out = append(out, d)
	}
	b, _ := json.Marshal(out)
	return copyOut(string(b), buf, C.int(buflen))
}

// mc_store_tier_stats writes this client's tier counters as JSON (disk_reads, offloaded,
// offload_failed, promoted, root_fs_dir); it returns the JSON's full length.
//
//export mc_store_tier_stats
func mc_store_tier_stats(h C.uint64_t, buf *C.char, buflen C.int32_t) C.int {
	c, err := storeClient(h)
	if err != nil {
		return serr(err)
	}
	st := c.TierStats()
	b, _ := json.Marshal(map[string]any{"disk_reads": st.DiskReads, "offloaded": st.Offloaded,
		"offload_failed": st.OffloadFailed, "promoted": st.Promoted, "root_fs_dir": c.RootFSDir(),
		"offload_rpc_reads": st.OffloadRPCReads, "offload_dir": c.OffloadDir()})
	return copyOut(string(b), buf, C.int(buflen))
}

// ---- ranged reads and multi-buffer transfers ----

// mc_store_get_ranges reads n fragments of key's value under one lease: fragment i is sizes[i]
// bytes from offset srcs[i] of the value to address dsts[i] (inside a registered buffer).
// results[i] gets the bytes read or a negative code; the call returns 0 when it ran.
//
//export mc_store_get_ranges
func mc_store_get_ranges(h C.uint64_t, key *C.char, n C.int32_t, srcs, dsts, sizes *C.uint64_t, results *C.int64_t) C.int {
	c, k, err := storeKey(h, key)
	if err != nil {
		return serr(err)
	}
	if n < 0 || (n > 0 && (srcs == nil || dsts == nil || sizes == nil || results == nil)) {
		return serr(api.Errorf(api.INVALID_PARAMS, "bad fragment arrays (n=%d)", int(n)))
	}
	ss, ds, ls := unsafe.Slice(srcs, int(n)), unsafe.Slice(dsts, int(n)), unsafe.Slice(sizes, int(n))
	frags := make([]client.Range, int(n))
	for i := range frags {
		frags[i] = client.Range{Src: uint64(ss[i]), Dst: uintptr(ds[i]), Size: uint64(ls[i])}
	}
	got, errs := c.GetRanges(context.Background(), k, frags)
	return sizesOrCodes(got, errs, results, n)
}

// mc_store_get_into_buffers reads key's value into n buffers in order; it returns the value's
// size or a negative code.
//
//export mc_store_get_into_buffers
func mc_store_get_into_buffers(h C.uint64_t, key *C.char, n C.int32_t, addrs, sizes *C.uint64_t) C.int64_t {
	c, k, err := storeKey(h, key)
	if err != nil {
		return C.int64_t(serr(err))
	}
	if n < 0 || (n > 0 && (addrs == nil || sizes == nil)) {
		return C.int64_t(serr(api.Errorf(api.INVALID_PARAMS, "bad buffer arrays (n=%d)", int(n))))
	}
	as, sz := cAddrLens(addrs, sizes, n)
	got, err := c.GetIntoBuffers(context.Background(), k, as, sz)
	if err != nil {
		return C.int64_t(serr(err))
	}
	return C.int64_t(got)
}

// mc_store_batch_put_from_buffers stores, for each of the nkeys keys, the concatenation of its
// counts[i] buffers; addrs and sizes hold every key's buffers one key after the other.
// results[i] gets each key's status; the call returns 0 when the batch ran.
//
//export mc_store_batch_put_from_buffers
func mc_store_batch_put_from_buffers(h C.uint64_t, keys **C.char, nkeys C.int32_t, counts *C.int32_t, addrs, sizes *C.uint64_t, cfgp *C.mc_replicate_config, results *C.int32_t) C.int {
	c, ks, cfg, err := batchPutArgs(h, keys, nkeys, cfgp)
	if err != nil {
		return serr(err)
	}
	if nkeys > 0 && (counts == nil || results == nil) {
		return serr(api.Errorf(api.INVALID_PARAMS, "NULL count or result array"))
	}
	cs := unsafe.Slice(counts, int(nkeys))
	total := 0
	for i, n := range cs {
		if n < 0 {
			return serr(api.Errorf(api.INVALID_PARAMS, "key %d has %d buffers", i, int(n)))
		}
		total += int(n)
	}
	if total > 0 && (addrs == nil || sizes == nil) {
		return serr(api.Errorf(api.INVALID_PARAMS, "NULL address or size array"))
	}
	as, sz := cAddrLens(addrs, sizes, C.int32_t(total))
	all := make([][]uintptr, int(nkeys))
	allSz := make([][]uint64, int(nkeys))
	off := 0
	for i, n := range cs {
		all[i], allSz[i] = as[off:off+int(n)], sz[off:off+int(n)]
		off += int(n)
	}
	codes(c.BatchPutFromBuffers(context.Background(), ks, all, allSz, cfg), results)
	return 0
}

// mc_store_batch_replica_clear drops this client's copies of keys on segment (NULL or "": every
// copy); cleared[i] is set to 1 for each key cleared, 0 for one skipped. Returns how many were
// cleared or a negative code.
//
//export mc_store_batch_replica_clear
func mc_store_batch_replica_clear(h C.uint64_t, keys **C.char, n C.int32_t, segment *C.char, cleared *C.int32_t) C.int {
	c, ks, err := batchArgs(h, keys, n)
	if err != nil {
		return serr(err)
	}
	if n > 0 && cleared == nil {
		return serr(api.Errorf(api.INVALID_PARAMS, "cleared is NULL"))
	}
	done, err := c.BatchReplicaClear(context.Background(), ks, goString(segment))
	if err != nil {
		return serr(err)
	}
	set := map[string]bool{}
	for _, k := range done {
		set[k] = true
	}
	out := unsafe.Slice(cleared, int(n))
	for i, k := range ks {
		out[i] = 0
		if set[k] {
			out[i] = 1
		}
	}
	return C.int(len(done))
}

// ---- more segments ----

// mc_store_mount_segment maps size bytes of the file path (from offset) and mounts them as a
// new segment of this store; the segment id is copied to idbuf (copyOut: returns its length,
// or a negative code).
//
//export mc_store_mount_segment
func mc_store_mount_segment(h C.uint64_t, path *C.char, size, offset C.uint64_t, idbuf *C.char, buflen C.int32_t) C.int {
	c, err := storeClient(h)
	if err != nil {
		return serr(err)
	}
	if path == nil {
		return serr(api.Errorf(api.INVALID_PARAMS, "path is NULL"))
	}
	id, err := c.MountSegment(context.Background(), C.GoString(path), uint64(size), uint64(offset))
	if err != nil {
		return serr(err)
	}
	return copyOut(id, idbuf, C.int(buflen))
}

// mc_store_allocate_and_mount_segment allocates size bytes (rounded up to pages) and mounts
// them as a new segment; *allocated gets the size, idbuf the id (copyOut).
//
//export mc_store_allocate_and_mount_segment
func mc_store_allocate_and_mount_segment(h C.uint64_t, size C.uint64_t, allocated *C.uint64_t, idbuf *C.char, buflen C.int32_t) C.int {
	c, err := storeClient(h)
	if err != nil {
		return serr(err)
	}
	id, n, err := c.AllocateAndMountSegment(context.Background(), uint64(size))
	if err != nil {
		return serr(err)
	}
	if allocated != nil {
		*allocated = C.uint64_t(n)
	}
	return copyOut(id, idbuf, C.int(buflen))
}

// mc_store_unmount_segments unmounts segments from mc_store_mount_segment (free=0) or
// mc_store_allocate_and_mount_segment (free=1) and releases their memory; an unknown id (or
// one of the other kind) changes nothing. grace_seconds > 0: see Client.UnmountSegments.
//
//export mc_store_unmount_segments
func mc_store_unmount_segments(h C.uint64_t, ids **C.char, n C.int32_t, free C.int32_t, graceSeconds C.uint32_t) C.int {
	c, ks, err := batchArgs(h, ids, n)
	if err != nil {
		return serr(err)
	}
	return serr(c.UnmountSegments(context.Background(), ks, free != 0, time.Duration(graceSeconds)*time.Second))
}

// mc_store_enable_ssd_offload asks for SSD offload (client-local disk) at the next setup of h:
// path is the offload directory ("" or NULL: MOONCAKE_OFFLOAD_FILE_STORAGE_PATH); the other
// MOONCAKE_OFFLOAD_* knobs are read now. Call it between mc_store_create and mc_store_setup.
//
//export mc_store_enable_ssd_offload
func mc_store_enable_ssd_offload(h C.uint64_t, path *C.char) C.int {
	s, ok := stores.get(uint64(h))
	if !ok {
		return serr(api.Errorf(api.INVALID_PARAMS, "unknown store handle %d", uint64(h)))
	}
	cfg := config.StoreOffload(goString(path))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c != nil {
		return serr(api.Errorf(api.INVALID_PARAMS, "enable_ssd_offload after setup: close the store and set it up again"))
	}
	s.offload = &cfg
	return 0
}

// mc_store_offload_rpc_read_count stores in *out how many gets this client served by asking
// another client to read its local disk (upstream's get_offload_rpc_read_count).
//
//export mc_store_offload_rpc_read_count
func mc_store_offload_rpc_read_count(h C.uint64_t, out *C.uint64_t) C.int {
	c, err := storeClient(h)
	if err != nil {
		return serr(err)
	}
	if out == nil {
		return serr(api.Errorf(api.INVALID_PARAMS, "offload_rpc_read_count: null output"))
	}
	*out = C.uint64_t(c.OffloadRPCReadCount())
	return 0
}

// sizesOrCodes writes each item's byte count (or its negative code when it failed) to
// results[0..n) and records the first failure as the call's last error; the call ran, so 0.
func sizesOrCodes(got []uint64, errs []error, results *C.int64_t, n C.int32_t) C.int {
	res := unsafe.Slice(results, int(n))
	for i := range res {
		if errs[i] != nil {
			res[i] = C.int64_t(api.CodeOf(errs[i]))
		} else {
			res[i] = C.int64_t(got[i])
		}
	}
	if first := firstErr(errs); first != nil {
		serr(first)
	}
	return 0
}
