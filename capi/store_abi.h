/* The store section's C types for the Go files of capi (cgo preambles include this file).
 * Same layout as in include/mooncake_store.h, whose const prototypes cannot be included here:
 * cgo's generated export declarations drop const and would conflict. */
#ifndef MOONCAKE_CAPI_STORE_ABI_H
#define MOONCAKE_CAPI_STORE_ABI_H

#include <stdint.h>
#include <stdlib.h>

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

typedef struct mc_store_item {
  const char *key;
  const uint64_t *addrs;
  const uint64_t *lens;
  int32_t nparts;
} mc_store_item;

#define MC_STORE_UPSERT 1u

/* mc_store_alloc_fn returns len writable bytes for item i's value (NULL: give up) — see
 * mc_store_get. */
typedef void *(*mc_store_alloc_fn)(void *ctx, int32_t i, uint64_t len);
static inline void *mc_store_call_alloc(mc_store_alloc_fn fn, void *ctx, int32_t i, uint64_t len) {
  return fn(ctx, i, len);
}

#endif
