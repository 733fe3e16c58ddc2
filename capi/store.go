package main

/*
#include "store_abi.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"unsafe"

	"github.com/mooncake-go/mooncake/config"
	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/client"
)

// The store section of the C ABI: thin adapters from mc_store_* to store/client. Every entry
// validates its arguments, runs the operation and maps errors to Mooncake's store codes.
// store.go: handles, setup, buffer registration; store_data.go: put, get, is_exist, remove;
// store_tier.go: tiers, ranged reads, segments, SSD offload; store_snapshot.go: ranged-read
// sessions; store_dummy.go: setup_dummy. The C types are in store_abi.h.

type storeHandle struct {
	mu      sync.RWMutex
	c       *client.Client        // nil until setup
	offload *client.OffloadConfig // SSD offload asked for before setup (mc_store_enable_ssd_offload)
	dummy   io.Closer             // a dummy client's attachment to its real client (mc_store_setup_dummy)
	release func()                // gives back the store's engine at close (store_engine.go)
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
// storeKey returns the set-up client of h and the key, or the error to report.
func storeKey(h C.uint64_t, key *C.char) (*client.Client, string, error) {
	c, err := storeClient(h)
	if err != nil {
		return nil, "", err
	}
	k, err := cKey(key)
	return c, k, err
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
	}, false, "", 0)
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
	// Engine: a TransferEngine's handle (get_engine_ptr) the store runs on (0: see storeEngineFor).
	Engine uint64 `json:"engine"`
}

// mc_store_setup_json is mc_store_setup with its arguments as one JSON object of upstream's
// setup() names (local_hostname, metadata_server, global_segment_size, local_buffer_size,
// protocol, rdma_devices, master_server_addr, enable_ssd_offload, ssd_offload_path, tenant_id)
// and engine (a TransferEngine's handle, from get_engine_ptr); unknown names are refused.
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
	}, o.EnableSSDOffload, o.SSDOffloadPath, o.Engine)
}

// storeSetup sets up store h; ssdOffload (setup's enable_ssd_offload, with its directory or ""
// for MOONCAKE_OFFLOAD_FILE_STORAGE_PATH) does what mc_store_enable_ssd_offload does.
func storeSetup(h C.uint64_t, base client.Config, ssdOffload bool, offloadPath string, engineHandle uint64) C.int {
	s, ok := stores.get(uint64(h))
	if !ok {
		return serr(api.Errorf(api.INVALID_PARAMS, "unknown store handle %d", uint64(h)))
	}
	// The store-setup and engine-creation knobs are read now, at setup().
	cfg := config.StoreClient(base)
	cfg.SingleCallsInFlight = client.ForeignThreadCalls // this ABI's callers are threads of their own (coalesce.go)
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
	eng, release, err := storeEngine(engineHandle, cfg) // store_engine.go
	if err != nil {
		return serr(api.Errorf(api.INVALID_PARAMS, "%v", err))
	}
	c, err := client.NewWithEngine(context.Background(), eng, cfg)
	if err != nil {
		release()
		return serr(err)
	}
	s.c, s.release = c, release
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
	if s.release != nil {
		s.release()
		s.release = nil
	}
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

// batchArgs resolves the store handle and the C key array every call on several keys starts
// with.
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

//export mc_store_free
func mc_store_free(p unsafe.Pointer) { C.free(p) }
