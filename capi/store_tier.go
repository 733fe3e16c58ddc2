package main

/*
#include "store_abi.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"time"
	"unsafe"

	"github.com/mooncake-go/mooncake/config"
	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/client"
)

// The store section's calls about where objects live: storage tiers, ranged reads, replica
// clearing, more segments and SSD offload.

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
	serr(sizesOrCodes(got, errs, results)) // the first failure kept as the last error
	return 0
}

// mc_store_get_into_buffers reads key's value into n buffers in order; it returns the value's
// size or a negative code.
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

// mc_store_unmount_local_disk_segment takes the store's local disk (SSD offload) out of the
// store, keeping its memory segment (upstream's unmount_local_disk_segment; see
// Client.UnmountLocalDisk), then waits grace_seconds before it returns, as upstream's does. A
// store without SSD offload: 0, nothing done; a dummy client: INTERNAL_ERROR (-1), as upstream's
// (the real client owns the disk).
//
//export mc_store_unmount_local_disk_segment
func mc_store_unmount_local_disk_segment(h C.uint64_t, graceSeconds C.uint64_t) C.int {
	c, err := storeClient(h)
	if err != nil {
		return serr(err)
	}
	if s, ok := stores.get(uint64(h)); ok {
		s.mu.RLock()
		dummy := s.dummy != nil
		s.mu.RUnlock()
		if dummy {
			return serr(api.Errorf(api.INTERNAL_ERROR, "unmount_local_disk_segment: a dummy client has no local disk; call it on the real client (mooncake_client)"))
		}
	}
	if graceSeconds > 1<<32 {
		return serr(api.Errorf(api.INVALID_PARAMS, "unmount_local_disk_segment: grace period of %d seconds is too long", uint64(graceSeconds)))
	}
	if err := c.UnmountLocalDisk(context.Background()); err != nil {
		return serr(err)
	}
	time.Sleep(time.Duration(graceSeconds) * time.Second)
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
