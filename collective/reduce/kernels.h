/* Reduction kernels for collective/reduce: the C side's interface.
 *
 * dtype and op codes are the c10 ScalarType and c10d ReduceOp codes (see reduce.go). The Go side
 * validates every argument before calling in; the C side still rejects unknown codes (-1) rather
 * than misbehave.
 */
#ifndef MOONCAKE_REDUCE_KERNELS_H
#define MOONCAKE_REDUCE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* Kernel levels (keep in sync with level* in kernel_cgo.go). */
#define MC_RED_LEVEL_PORTABLE 1
#define MC_RED_LEVEL_AVX2 2
#define MC_RED_LEVEL_AVX512 3

/* Best level this CPU (and OS) supports. */
int mc_red_best_level(void);

/* dst[i] = src[0][i] op src[1][i] op ... op src[k-1][i] for i < n elements, k >= 1.
 * dst may be identical to any src[j]; other overlaps are undefined. 16-bit floats accumulate in
 * float32 and are rounded once. Returns 0, or -1 for an unknown dtype/op/level. */
int mc_red_reduce(void *dst, const void *const *src, int k, size_t n, int dtype, int op, int level);

/* The two-input case without an array (dst = dst op src). */
int mc_red_reduce2(void *dst, const void *src, size_t n, int dtype, int op, int level);

/* dst[i] /= divisor for floating dtypes. Returns 0, or -1 for a non-floating dtype. */
int mc_red_divide(void *dst, size_t n, int dtype, double divisor, int level);

/* Test hooks: float32 -> float16/bfloat16 narrowing with the level's conversion code. */
int mc_red_narrow(void *dst, const float *src, size_t n, int dtype, int level);

/* memcpy with non-temporal stores (x86-64; plain memcpy elsewhere): for copies that are not
 * read again soon, so they neither read the destination's lines first nor evict the cache. */
void mc_copy_stream(void *dst, const void *src, size_t n);

#endif
