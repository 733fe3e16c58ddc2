/* Store section of the Mooncake C ABI (see mooncake.h for the conventions).
 *
 * A store handle is a client of Mooncake Store (mooncake_master + the segments clients
 * contribute). Status: 0 ok, negative Mooncake store error codes (OBJECT_NOT_FOUND -704,
 * INVALID_KEY -400, NO_AVAILABLE_HANDLE -200, OBJECT_HAS_LEASE -706, RPC_FAIL -900, ...), with the
 * message in mooncake_last_error(). Keys are NUL-terminated UTF-8, 1..4096 bytes. A put of a key
 * that already exists succeeds without rewriting it (write-once); an upsert replaces it. Buffer addresses are plain
 * integers (uint64_t) like in the engine section. Every call may block on the network for at
 * most its RPC timeout (10 s) plus the transfer timeout; none holds a lock of the caller's.
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

/* Zero-copy buffers for put_from / get_into. */
int mc_store_register_buffer(uint64_t store, uint64_t addr, uint64_t len);
int mc_store_unregister_buffer(uint64_t store, uint64_t addr);

/* Put. */
int mc_store_put(uint64_t store, const char *key, const void *data, uint64_t len,
                 const mc_replicate_config *cfg);
int mc_store_put_parts(uint64_t store, const char *key, const void *const *parts,
                       const uint64_t *lens, int32_t n, const mc_replicate_config *cfg);
int mc_store_put_from(uint64_t store, const char *key, uint64_t addr, uint64_t len,
                      const mc_replicate_config *cfg);
/* results[i] gets each key's status; the call returns 0 when the batch ran (even if some keys
 * failed) and <0 when it could not run at all. */
int mc_store_batch_put(uint64_t store, const char *const *keys, const void *const *datas,
                       const uint64_t *lens, int32_t n, const mc_replicate_config *cfg,
                       int32_t *results);
int mc_store_batch_put_from(uint64_t store, const char *const *keys, const uint64_t *addrs,
                            const uint64_t *lens, int32_t n, const mc_replicate_config *cfg,
                            int32_t *results);
/* Upsert: like the puts above, but a key that exists gets the new value (insert or replace).
 * The master swaps the versions when the new one is completely written: a reader sees the whole
 * old value or the whole new one, and a failed upsert leaves the old value in place. */
int mc_store_upsert(uint64_t store, const char *key, const void *data, uint64_t len,
                    const mc_replicate_config *cfg);
int mc_store_upsert_parts(uint64_t store, const char *key, const void *const *parts,
                          const uint64_t *lens, int32_t n, const mc_replicate_config *cfg);
int mc_store_upsert_from(uint64_t store, const char *key, uint64_t addr, uint64_t len,
                         const mc_replicate_config *cfg);
int mc_store_batch_upsert(uint64_t store, const char *const *keys, const void *const *datas,
                          const uint64_t *lens, int32_t n, const mc_replicate_config *cfg,
                          int32_t *results);
int mc_store_batch_upsert_from(uint64_t store, const char *const *keys, const uint64_t *addrs,
                               const uint64_t *lens, int32_t n, const mc_replicate_config *cfg,
                               int32_t *results);

/* Get. mc_store_get returns the value in malloc'd memory (*out, *len; free it with
 * mc_store_free; NULL/0 for an empty result). mc_store_get_into copies into the caller's buffer
 * and returns the bytes read or <0 (BUFFER_OVERFLOW -10 when it is too small). */
int mc_store_get(uint64_t store, const char *key, uint8_t **out, uint64_t *len);
int64_t mc_store_get_into(uint64_t store, const char *key, uint64_t addr, uint64_t len);
/* mc_store_get_with reads key into memory from alloc(ctx, size) (NULL: give up), called once
 * the size is known (not for an empty value); *len gets the size. 0 or a negative code. */
typedef void *(*mc_store_alloc_fn)(void *ctx, uint64_t len);
int mc_store_get_with(uint64_t store, const char *key, mc_store_alloc_fn alloc, void *ctx, uint64_t *len);
/* Per key: outs[i]/lens[i] (malloc'd, free each with mc_store_free) and results[i] status. */
int mc_store_batch_get(uint64_t store, const char *const *keys, int32_t n, uint8_t **outs,
                       uint64_t *lens, int32_t *results);
/* mc_store_batch_get_with is mc_store_get_with for a batch: alloc(ctx, i, size) gives keys[i]'s
 * memory (NULL: give that key up), called on the calling thread in key order before any value is
 * read, not for an empty value; lens[i] gets the size, results[i] 0 or <0. */
typedef void *(*mc_store_batch_alloc_fn)(void *ctx, int32_t i, uint64_t len);
int mc_store_batch_get_with(uint64_t store, const char *const *keys, int32_t n,
                            mc_store_batch_alloc_fn alloc, void *ctx, uint64_t *lens,
                            int32_t *results);
/* results[i]: bytes read or <0. */
int mc_store_batch_get_into(uint64_t store, const char *const *keys, const uint64_t *addrs,
                            const uint64_t *lens, int32_t n, int64_t *results);
void mc_store_free(void *p);
/* Ranged reads: n fragments of key's value under one lease, fragment i = sizes[i] bytes from
 * offset srcs[i] of the value to address dsts[i], which must lie in a buffer registered with
 * mc_store_register_buffer (bounds checked); results[i] = bytes read or <0. Needs a memory
 * replica. Returns 0 when it ran. */
int mc_store_get_ranges(uint64_t store, const char *key, int32_t n, const uint64_t *srcs,
                        const uint64_t *dsts, const uint64_t *sizes, int64_t *results);
/* Reads key's value into n buffers in order; returns the value's size or <0
 * (BUFFER_OVERFLOW when the buffers are too small). */
int64_t mc_store_get_into_buffers(uint64_t store, const char *key, int32_t n,
                                  const uint64_t *addrs, const uint64_t *sizes);
/* Stores, for each of nkeys keys, the concatenation of its counts[i] buffers (addrs/sizes list
 * every key's buffers one key after another); results[i] per key. */
int mc_store_batch_put_from_buffers(uint64_t store, const char *const *keys, int32_t nkeys,
                                    const int32_t *counts, const uint64_t *addrs,
                                    const uint64_t *sizes, const mc_replicate_config *cfg,
                                    int32_t *results);

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

/* Queries and removal. */
int64_t mc_store_get_size(uint64_t store, const char *key);      /* bytes or <0 */
int mc_store_is_exist(uint64_t store, const char *key);          /* 1, 0 or <0 */
int mc_store_batch_is_exist(uint64_t store, const char *const *keys, int32_t n, int32_t *results);
int mc_store_remove(uint64_t store, const char *key, int32_t force);
int mc_store_batch_remove(uint64_t store, const char *const *keys, int32_t n, int32_t force,
                          int32_t *results);
int64_t mc_store_remove_by_regex(uint64_t store, const char *pattern, int32_t force); /* count */
int64_t mc_store_remove_all(uint64_t store);                                          /* count */
/* keep_held != 0 leaves the keys a plain remove would refuse (leased, hard-pinned). */
int64_t mc_store_remove_all_ex(uint64_t store, int32_t keep_held);                    /* count */
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

#ifdef __cplusplus
}
#endif

#endif
