/* Store section of the Mooncake C ABI (see mooncake.h for the conventions).
 *
 * A store handle is a client of Mooncake Store (mooncake_master + the segments clients
 * contribute). Status: 0 ok, negative Mooncake store error codes (OBJECT_NOT_FOUND -704,
 * INVALID_KEY -400, NO_AVAILABLE_HANDLE -200, OBJECT_HAS_LEASE -706, RPC_FAIL -900, ...), with the
 * message in mooncake_last_error(). Keys are NUL-terminated UTF-8, 1..4096 bytes. A put of a key
 * that already exists succeeds without rewriting it (write-once); an upsert replaces it. Buffer
 * addresses are plain integers (uint64_t) like in the engine section. Every call may block on the
 * network for at most its RPC timeout (10 s) plus the transfer timeout; none holds a lock of the
 * caller's.
 */
#ifndef MOONCAKE_STORE_H
#define MOONCAKE_STORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How a put is placed. NULL config = 1 replica, no pins. preferred_segments: comma-separated
 * segment names ("host:port"), tried first; NULL or "" for none. Zeroed trailing fields keep
 * the defaults: soft_pin_action 0 PRESERVE (a new key is not pinned unless with_soft_pin; an
 * upserted key keeps its pin), 1 ENABLE, 2 DISABLE; soft_pin_ttl_ms applies when
 * has_soft_pin_ttl (else the master's default); prefer_alloc_in_same_node prefers this client's
 * own segment when preferred_segments is empty. */
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

/* Lifecycle. mc_store_create makes an unconnected handle; mc_store_setup connects it:
 * it uses the process-wide transfer engine (creating it from these arguments when the process has
 * none yet), checks the master answers, mounts global_segment_size bytes (0: contribute nothing)
 * and allocates a local_buffer_size staging buffer (0: 16 MiB). mc_store_close unmounts the
 * segment and releases the handle (replicas elsewhere survive). */
int mc_store_create(uint64_t *out);
int mc_store_setup(uint64_t store, const char *local_hostname, const char *metadata_server,
                   uint64_t global_segment_size, uint64_t local_buffer_size, const char *protocol,
                   const char *device_name, const char *master_server_address);
/* mc_store_setup with its arguments as one JSON object, named as upstream's setup():
 * local_hostname, metadata_server, global_segment_size, local_buffer_size (integers), protocol,
 * rdma_devices, master_server_addr, enable_ssd_offload, ssd_offload_path, tenant_id (a key
 * namespace; "default" or "" for the default one). Unknown names are
 * refused (INVALID_PARAMS). */
int mc_store_setup_json(uint64_t store, const char *options);
/* Upstream's setup_dummy: attaches to the real client (mooncake_client --port) at
 * server_address ("host:port"), learns the master, metadata server and protocol from it, and
 * joins as a client that owns no segment, with a local_buffer_size staging buffer (0: 16 MiB).
 * mem_pool_size is recorded for the real client's log. INVALID_PARAMS when no real client
 * answers there or it refuses (MC_AUTH_TOKEN). mc_store_close detaches. */
int mc_store_setup_dummy(uint64_t store, uint64_t mem_pool_size, uint64_t local_buffer_size,
                         const char *server_address);
int mc_store_close(uint64_t store);
/* 0 healthy, 1 not set up (or unknown handle), 2 master unreachable. */
int mc_store_health_check(uint64_t store);
/* Copies the segment name ("host:port") into buf; returns its full length (or <0). */
int mc_store_get_hostname(uint64_t store, char *buf, int32_t buflen);

/* Zero-copy buffers: a part of an item (below) lying inside a registered buffer moves straight
 * between it and the replicas, without the staging buffer. */
int mc_store_register_buffer(uint64_t store, uint64_t addr, uint64_t len);
int mc_store_unregister_buffer(uint64_t store, uint64_t addr);

/* Data calls: one entry per family for any number of items or keys (upstream's put, put_parts,
 * put_from, batch_put_from, upsert*, get*, batch_get*, is_exist, batch_is_exist, get_size,
 * remove, batch_remove are all these four). One item or key takes the master's single-key path;
 * several go to the master as one batch.
 *
 * Return convention (as for every batch call): codes[i] gets item i's status, 0 or <0, and
 * mooncake_last_error() the first failure's message; the call returns 0 when it ran, even if
 * items failed, and <0 when it could not run at all (unknown handle, NULL arrays, n < 0), giving
 * that code to every codes[i] too. So for one item, codes[0] is its status either way. */

/* One object of a request: its key and its value's memory as nparts buffers (addrs[k], lens[k])
 * in order. A NULL key (INVALID_KEY) or a NULL buffer of non-zero length (INVALID_PARAMS) fails
 * that item only. */
typedef struct mc_store_item {
  const char *key;
  const uint64_t *addrs;
  const uint64_t *lens;
  int32_t nparts;
} mc_store_item;

/* Put: stores each item's value, the concatenation of its parts (empty parts are skipped; an
 * empty value is INVALID_PARAMS), with cfg's placement. A key that already exists is left as
 * it is and its item succeeds (write-once), unless flags has MC_STORE_UPSERT: then it gets the
 * new value (insert or replace), the master swapping the versions when the new one is
 * completely written (a reader sees the whole old value or the whole new one; a failed upsert
 * leaves the old value in place). Other flag bits are INVALID_PARAMS. */
#define MC_STORE_UPSERT 1u
int mc_store_put(uint64_t store, const mc_store_item *items, int32_t n,
                 const mc_replicate_config *cfg, uint32_t flags, int32_t *codes);

/* Get: reads each item's value; sizes[i] (may be NULL) gets item i's size, 0 when it failed.
 * Without alloc (NULL): into the item's parts in order, which must hold it (BUFFER_OVERFLOW
 * otherwise; larger is fine; an item with no buffer bytes is INVALID_PARAMS without asking the
 * master). With alloc: into memory from alloc(ctx, i, size) (NULL: give item i up,
 * INTERNAL_ERROR), called on the calling thread in item order once the master has answered,
 * before any value is read, once per item found; items then have no parts (nparts 0). This lets
 * a binding fill its own result objects (a Python bytes, a Rust Vec) with one copy. Memory alloc
 * gave for an item that then failed is still the caller's and holds no value. */
typedef void *(*mc_store_alloc_fn)(void *ctx, int32_t i, uint64_t len);
int mc_store_get(uint64_t store, const mc_store_item *items, int32_t n, mc_store_alloc_fn alloc,
                 void *ctx, uint64_t *sizes, int32_t *codes);
/* An mc_store_alloc_fn over malloc: ctx is an array of n void* (set them to NULL first) that
 * gets item i's memory at index i; free each non-NULL one with mc_store_free, also for an item
 * that failed. */
void *mc_store_malloc(void *ctx, int32_t i, uint64_t len);
void mc_store_free(void *p);

/* Queries and removal, with the return convention above. mc_store_is_exist: results[i] =
 * keys[i]'s value size (> 0; values are never empty) when it is stored, 0 when it is not, or <0.
 * mc_store_remove: codes[i] per key (OBJECT_NOT_FOUND; OBJECT_HAS_LEASE for a leased or
 * hard-pinned key unless force). */
int mc_store_is_exist(uint64_t store, const char *const *keys, int32_t n, int64_t *results);
int mc_store_remove(uint64_t store, const char *const *keys, int32_t n, int32_t force,
                    int32_t *codes);
int64_t mc_store_remove_by_regex(uint64_t store, const char *pattern, int32_t force); /* count */
/* Removes every key of the store's tenant; returns how many or <0. keep_held != 0 leaves the
 * keys a plain remove would refuse (leased, hard-pinned). */
int64_t mc_store_remove_all(uint64_t store, int32_t keep_held);

/* Ranged reads: n fragments of key's value under one lease, fragment i = sizes[i] bytes from
 * offset srcs[i] of the value to address dsts[i], which must lie in a buffer registered with
 * mc_store_register_buffer (bounds checked); results[i] = bytes read or <0. Needs a memory
 * replica. Returns 0 when it ran. */
int mc_store_get_ranges(uint64_t store, const char *key, int32_t n, const uint64_t *srcs,
                        const uint64_t *dsts, const uint64_t *sizes, int64_t *results);
/* Session-based ranged reads (upstream's RangedReadSnapshot). mc_store_snapshot_prepare queries
 * the replicas of n keys once (granting read leases; missing keys allowed) and returns a snapshot
 * handle in *out; a batch that starts when half the lease has passed queries again. Free it with
 * mc_store_snapshot_free. mc_store_snapshot_get_ranges reads ngroups groups through it: group i
 * is counts[i] fragments of keys[i], every group's fragments one after another in srcs, dsts
 * (addresses in registered buffers) and sizes; results[k] = bytes read or <0 per fragment. With
 * allow_staging != 0 objects without a memory copy are read through a staging buffer. A snapshot
 * of another store handle is refused (INVALID_PARAMS). */
int mc_store_snapshot_prepare(uint64_t store, const char *const *keys, int32_t n, uint64_t *out);
int mc_store_snapshot_free(uint64_t snapshot);
int mc_store_snapshot_get_ranges(uint64_t store, uint64_t snapshot, int32_t ngroups,
                                 const char *const *keys, const int64_t *counts,
                                 const uint64_t *srcs, const uint64_t *dsts,
                                 const uint64_t *sizes, int32_t allow_staging, int64_t *results);
/* Templates (immutable range geometry) and plans (templates appended to objects (region,
 * suffix)); errors are INVALID_PARAMS with upstream's messages ("Invalid ranged-read template
 * shape", ...). A plan keeps its own copy of its templates' geometry. */
int mc_store_range_template_create(const uint64_t *dsts, int64_t nd, const uint64_t *srcs,
                                   int64_t ns, const uint64_t *sizes, int64_t nz, uint64_t *out);
int mc_store_range_template_free(uint64_t tmpl);
int mc_store_range_plan_create(const uint64_t *templates, int64_t nt, const char *const *suffixes,
                               int32_t nsuffixes, const uint64_t *regions, int64_t nr,
                               uint64_t *out, uint64_t *ranges, uint64_t *objects);
int mc_store_range_plan_free(uint64_t plan);
/* Row i reads templates[i] from keys[i] into buffers[indices[i]] + translations[i]; ok[i] (nk
 * entries) = 1 when every range read its size. Page i of a plan batch runs plans[i] with keys
 * prefixes[i] + suffix, translation row i being tcounts[i] entries of translations (rows one
 * after another; one per buffer); ok[i] (np entries). Both return 0, or INVALID_PARAMS with
 * upstream's message for a malformed batch. */
int mc_store_snapshot_read_templates(uint64_t store, uint64_t snapshot, const uint64_t *templates,
                                     int64_t nt, const uint64_t *buffers, int64_t nb,
                                     const uint64_t *indices, int64_t ni, const char *const *keys,
                                     int32_t nk, const uint64_t *translations, int64_t ntr,
                                     int32_t allow_staging, uint8_t *ok);
int mc_store_snapshot_read_plans(uint64_t store, uint64_t snapshot, const uint64_t *plans,
                                 int64_t np, const uint64_t *buffers, int64_t nb,
                                 const char *const *prefixes, int32_t nprefixes,
                                 const int64_t *tcounts, int64_t ntc, const uint64_t *translations,
                                 int32_t allow_staging, uint8_t *ok);

/* Transfer sessions (upstream's batch_get_session_* / batch_put_session_* and the
 * *_multi_buffer_ranges calls): the master is asked once per object, then ranged transfers go
 * straight to the replicas. mc_store_get_session_start queries n keys once and opens a get
 * session per key (a read lease; a memory copy needed); mc_store_get_session_end closes them.
 * mc_store_put_session_start reserves an object of sizes[i] bytes per key (cfg NULL: the
 * defaults); mc_store_put_session_finish ends (revoke = 0: readable) or revokes (dropped) them,
 * after the writes in flight. codes[i] = 0 or <0. mc_store_session_ranges reads (write = 0)
 * or writes ranges through the sessions: group i is counts[i] ranges of keys[i], every group's
 * ranges one after another in offsets (in the object), addrs (local memory, registered or not)
 * and sizes; results[i] = the group's bytes moved or <0 (no session: INVALID_PARAMS; a get
 * session whose lease ended: LEASE_EXPIRED, and the session is closed). All return 0 when they
 * ran. */
int mc_store_get_session_start(uint64_t store, const char *const *keys, int32_t n, int32_t *codes);
int mc_store_get_session_end(uint64_t store, const char *const *keys, int32_t n);
int mc_store_put_session_start(uint64_t store, const char *const *keys, int32_t n,
                               const uint64_t *sizes, const mc_replicate_config *cfg,
                               int32_t *codes);
int mc_store_put_session_finish(uint64_t store, const char *const *keys, int32_t n, int32_t revoke,
                                int32_t *codes);
int mc_store_session_ranges(uint64_t store, int32_t write, int32_t ngroups,
                            const char *const *keys, const int64_t *counts,
                            const uint64_t *offsets, const uint64_t *addrs,
                            const uint64_t *sizes, int64_t *results);

/* Drops this client's copies of keys on segment ("host:port"; NULL or "" = every copy, the
 * whole object); cleared[i] = 1 for a key cleared, 0 for one skipped (leased, being written,
 * another client's, missing). Returns how many were cleared or <0. */
int mc_store_batch_replica_clear(uint64_t store, const char *const *keys, int32_t n,
                                 const char *segment, int32_t *cleared);

/* More segments. mc_store_mount_segment maps size bytes of the file path from offset (a page
 * multiple) and mounts them; mc_store_allocate_and_mount_segment allocates size bytes (rounded
 * up to pages; *allocated gets the size). Both copy the new segment id into idbuf and return its
 * length (or <0). mc_store_unmount_segments unmounts ids of the first kind (free=0) or of the
 * second (free=1) and releases their memory; an unknown id changes nothing. With grace_seconds > 0
 * the segments are first closed to new objects while what they hold stays readable, and are
 * unmounted (and released) grace_seconds later, or at mc_store_close; the call returns at once. */
int mc_store_mount_segment(uint64_t store, const char *path, uint64_t size, uint64_t offset,
                           char *idbuf, int32_t buflen);
int mc_store_allocate_and_mount_segment(uint64_t store, uint64_t size, uint64_t *allocated,
                                        char *idbuf, int32_t buflen);
int mc_store_unmount_segments(uint64_t store, const char *const *ids, int32_t n, int32_t free,
                              uint32_t grace_seconds);

/* Storage tiers. mc_store_replica_desc copies a JSON array describing where key's copies live
 * ([{"tier":"memory"|"disk"|"local_disk","segment_name":...,"path":...,"offset":...,"size":...,
 * "status":...}]) into buf; mc_store_tier_stats this client's tier counters as JSON (disk_reads,
 * offloaded, offload_failed, promoted, root_fs_dir, offload_rpc_reads, offload_dir). Both return
 * the JSON's full length (or <0). */
int mc_store_replica_desc(uint64_t store, const char *key, char *buf, int32_t buflen);
int mc_store_tier_stats(uint64_t store, char *buf, int32_t buflen);
/* SSD offload (client-local disk) at the next mc_store_setup of the handle: path is the offload
 * directory (NULL or "": MOONCAKE_OFFLOAD_FILE_STORAGE_PATH); the other MOONCAKE_OFFLOAD_* knobs
 * are read now. Call it between mc_store_create and mc_store_setup. */
int mc_store_enable_ssd_offload(uint64_t store, const char *path);
/* *out = how many gets this client served by asking another client to read its local disk
 * (upstream's get_offload_rpc_read_count). */
int mc_store_offload_rpc_read_count(uint64_t store, uint64_t *out);
/* Takes the store's local disk (SSD offload) out of the store, keeping its memory segment: no
 * more objects move there, the moves in progress are cancelled and the copies on it are dropped
 * (an object whose only copy was there is gone). Then waits grace_seconds and returns 0. A store
 * without SSD offload: 0, nothing done; a dummy client: -1. */
int mc_store_unmount_local_disk_segment(uint64_t store, uint64_t grace_seconds);

#ifdef __cplusplus
}
#endif

#endif
