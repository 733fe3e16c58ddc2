/* Process-group section of the Mooncake C ABI (see mooncake.h for the conventions).
 *
 * The torch shim (torchext/) drives a group through these calls; the Go runtime behind them
 * lives in collective/, p2p/, worker/. Every op is asynchronous: it validates its arguments,
 * enqueues on the group's ordered queue and returns a work handle at once. Buffers passed to an
 * op must stay valid until the work completes (mc_work_wait/mc_work_test said done).
 *
 * dtype: c10::ScalarType values (uint8 0, int8 1, int16 2, int32 3, int64 4, float16 5,
 *        float32 6, float64 7, bool 11, bfloat16 15).
 * op:    c10d::ReduceOp values (SUM 0, AVG 1, PRODUCT 2, MIN 3, MAX 4, BAND 5, BOR 6, BXOR 7).
 * Sizes are in elements where a dtype is given, in bytes otherwise.
 */
#ifndef MOONCAKE_PG_H
#define MOONCAKE_PG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The c10d store the group rendezvouses through, as callbacks into the shim. Go calls them from
 * its own threads, possibly concurrently. */
typedef struct mc_store_ops {
  void *ctx;
  /* set key = value. 0 ok, <0 error. */
  int (*set)(void *ctx, const char *key, const uint8_t *val, size_t len);
  /* wait up to timeout_ms for key, then copy its value: *val is malloc'd (Go frees it with
   * free()), *len its length. 0 ok, -1 timeout, <0 other error. */
  int (*get)(void *ctx, const char *key, int64_t timeout_ms, uint8_t **val, size_t *len);
  /* 1 if key exists, 0 if not, <0 error. Never blocks. */
  int (*check)(void *ctx, const char *key);
  /* atomically add delta to the integer at key (created at 0); *out the new value. 0 ok. */
  int (*add)(void *ctx, const char *key, int64_t delta, int64_t *out);
} mc_store_ops;

/* Reports the transfers of one op: this rank sent lengths[i] bytes to group rank ranks[i]
 * (i < n); sets failed[i] to 1 for a transfer that failed, else 0. 0 ok, -1 error (then every
 * failed[i] is 1). */
typedef int (*mc_pg_transfer_check_fn)(void *ctx, const int32_t *ranks, const uint64_t *lengths,
                                       int32_t n, int32_t *failed);

typedef struct mc_pg_config {
  int32_t rank;            /* this process's rank in the group */
  int32_t size;            /* initial group size */
  int32_t max_group_size;  /* slots; 0 -> size */
  int32_t is_extension;    /* joining beyond the initial size */
  int32_t auto_deactivate_on_failure;
  int32_t auto_sync_on_failure;
  int32_t device_type;     /* 0 cpu, 1 cuda (the shim stages cuda tensors through host memory) */
  int64_t timeout_ms;      /* per-op timeout */
  const char *group_name;  /* unique per group within the store, e.g. torch's group id */
  /* The transfer-status seam (faultseam/mooncake_pg_seam.h's mooncake_pg_seam_check and its
   * seam), or NULL: none. When set, every op reports the transfers it made to each peer
   * through it, and a transfer reported failed is handled as docs/elastic.md says ("Fault
   * injection seam"). The shim sets it only when a fault injector interposes the seam. */
  mc_pg_transfer_check_fn transfer_check;
  void *transfer_ctx;
} mc_pg_config;

/* Creates the group and rendezvouses with the other ranks through store (which must stay valid
 * until mc_pg_destroy). Blocks until every initial rank published its endpoint or timeout. */
int mc_pg_create(const mc_pg_config *cfg, const mc_store_ops *store, uint64_t *out_pg);
/* Finishes queued ops (or fails them after the timeout) and frees the group. */
int mc_pg_destroy(uint64_t pg);

int mc_pg_broadcast(uint64_t pg, void *buf, int64_t nbytes, int32_t root, uint64_t *work);
/* buf holds count elements; result in place on every rank. */
int mc_pg_allreduce(uint64_t pg, void *buf, int64_t count, int32_t dtype, int32_t op, uint64_t *work);
/* result in place on root; other ranks' buffers are left as they were. */
int mc_pg_reduce(uint64_t pg, void *buf, int64_t count, int32_t dtype, int32_t op, int32_t root,
                 uint64_t *work);
/* Lists of per-rank buffers (n entries) have one entry per rank below the world size, or, after
 * a failure, one per active rank in rank order of the active mask (mc_pg_active_count; upstream's
 * layout); any other n is -600. */
/* outs: n pointers, each nbytes; outs[rank] receives a copy of in. */
int mc_pg_allgather(uint64_t pg, const void *in, int64_t nbytes, void *const *outs, int32_t n,
                    uint64_t *work);
/* outs: n pointers on root (ignored elsewhere, may be NULL). */
int mc_pg_gather(uint64_t pg, const void *in, int64_t nbytes, void *const *outs, int32_t n,
                 int32_t root, uint64_t *work);
/* ins: n pointers on root (ignored elsewhere, may be NULL); every rank receives nbytes. */
int mc_pg_scatter(uint64_t pg, const void *const *ins, int32_t n, void *out, int64_t nbytes,
                  int32_t root, uint64_t *work);
/* ins: n pointers, each count elements; out receives the reduction of every rank's entry for it. */
int mc_pg_reduce_scatter(uint64_t pg, const void *const *ins, int32_t n, void *out, int64_t count,
                         int32_t dtype, int32_t op, uint64_t *work);
/* ins[i] (in_bytes[i]) goes to rank i, outs[i] (out_bytes[i]) comes from rank i; n entries each. */
int mc_pg_alltoall(uint64_t pg, const void *const *ins, const int64_t *in_bytes, void *const *outs,
                   const int64_t *out_bytes, int32_t n, uint64_t *work);
int mc_pg_send(uint64_t pg, const void *buf, int64_t nbytes, int32_t dst, int32_t tag, uint64_t *work);
/* src -1: any source (mc_work_source tells which). */
int mc_pg_recv(uint64_t pg, void *buf, int64_t nbytes, int32_t src, int32_t tag, uint64_t *work);
int mc_pg_barrier(uint64_t pg, uint64_t *work);

/* Completion hook: fn(arg) is called (on a runtime thread) each time a work of this group
 * finishes, except works that mc_work_run ran (its caller knows); NULL removes it. Set before
 * the first op; fn must be quick and must not call back into the library. */
typedef void (*mc_work_hook)(void *arg);
int mc_pg_set_completion_hook(uint64_t pg, mc_work_hook fn, void *arg);

/* on != 0: ops submitted later wait until mc_work_start (hand it to the group's op thread)
 * or mc_work_run (run it on the calling thread) instead of starting at once; an op queued
 * behind others still runs in its turn. For a caller that knows at submission whether it is
 * about to wait (torch's asyncOp=False). */
int mc_pg_set_held_starts(uint64_t pg, int on);

/* Work handles. */
/* Blocks until done or timeout_ms (<0: the group's op timeout). 0 success; <0 error with
 * mooncake_last_error() saying what failed (op, rank, reason); -2 still running at timeout. */
int mc_work_wait(uint64_t work, int64_t timeout_ms);
/* 1 done, 0 running. */
int mc_work_test(uint64_t work);
/* Runs the op on the calling thread when it is next in its queue and has not started (a
 * caller about to wait saves two thread hand-offs); returns 1 when it ran it (the work is then
 * done), 0 when the queue's own thread has it or it is done, <0 for a bad handle. */
int mc_work_run(uint64_t work);
/* Starts an op submitted with held starts (see mc_pg_set_held_starts); 0, or <0 bad handle. */
int mc_work_start(uint64_t work);
/* 1 succeeded with every rank, 0 failed, running, or completed without some ranks (the
 * failed-ranks hint is not empty: the result covers the survivors). */
int mc_work_is_success(uint64_t work);
/* Copies the error message (empty if none) into buf (NUL-terminated, truncated); returns its
 * full length. */
int mc_work_error(uint64_t work, char *buf, int32_t buflen);
/* The source rank of a finished recv. */
int32_t mc_work_source(uint64_t work);
/* Failed-ranks hint for the op: writes up to n int32 flags (1 = rank failed during the op). */
int mc_work_failed_ranks(uint64_t work, int32_t *out, int32_t n);
int mc_work_free(uint64_t work);

/* Membership (elastic). */
int mc_pg_get_active_ranks(uint64_t pg, int32_t *out, int32_t n);
int32_t mc_pg_max_group_size(uint64_t pg);
/* Number of active ranks in this rank's current view (no waiting; <0 on a bad handle). */
int32_t mc_pg_active_count(uint64_t pg);
int64_t mc_pg_current_epoch(uint64_t pg);
/* A word (valid until mc_pg_destroy) that always holds the group's world size: the highest
 * active rank + 1. The ops' rank and list-length checks use it; the torch shim reports it as the
 * group size. Read it atomically. */
int32_t *mc_pg_world_size_word(uint64_t pg);
/* Elastic membership calls (mooncake_pg.activate_ranks, ...): request is a JSON object
 * {"op": "activate"|"deactivate"|"extend"|"join"|"sync"|"peer_state"|"num_synced"|"configure",
 *  "ranks": [...], "size": n, "collective_timeout_us": t}; the JSON answer {"status", "new_epoch",
 * "dropped_ranks", "reject_reason", "peer_state", "num_synced"} is copied into out
 * (NUL-terminated, truncated). Returns the answer's full length, or <0 on error. Blocks while the
 * call runs on the group's op queue (join waits until the rank is admitted). */
int mc_pg_membership(uint64_t pg, const char *request, char *out, int32_t outlen);

/* set_device_filter / set_host_ip: the interface (a JSON list of names; the first one's IPv4
 * address is used) or the address the process-wide engine listens on and advertises. Call before
 * the process's first group, store or engine; afterwards they fail unless the engine agrees.
 * An unknown interface or a malformed address is -600 (INVALID_PARAMS). */
int mc_set_device_filter(const char *names_json);
int mc_set_host_ip(const char *ip);

#ifdef __cplusplus
}
#endif
#endif
