//go:build cgo && !mooncake_purego

/* Reduction kernels for collective/reduce (see doc.go for the design).
 *
 * Three levels: a portable scalar C level (compiled for the build's baseline; the compiler
 * auto-vectorises what it can), and on x86-64 an AVX2+F16C level and an AVX-512 level, each
 * compiled from simd_template.h inside a "#pragma GCC target" region and picked at run time
 * from __builtin_cpu_supports. All levels compute bit-identical results (NaN payloads aside).
 */
#include "kernels.h"

#include <string.h>

enum {
  DT_UINT8 = 0,
  DT_INT8 = 1,
  DT_INT16 = 2,
  DT_INT32 = 3,
  DT_INT64 = 4,
  DT_FLOAT16 = 5,
  DT_FLOAT32 = 6,
  DT_FLOAT64 = 7,
  DT_BOOL = 11,
  DT_BFLOAT16 = 15,
};

enum {
  OP_SUM = 0,
  OP_AVG = 1,
  OP_PRODUCT = 2,
  OP_MIN = 3,
  OP_MAX = 4,
  OP_BAND = 5,
  OP_BOR = 6,
  OP_BXOR = 7,
};

typedef void (*red_kernel_fn)(uint8_t *dst, const uint8_t *const *src, int k, size_t n);
typedef void (*red_div_fn)(uint8_t *dst, size_t n, double divisor);

static int elem_size(int dt) {
  switch (dt) {
  case DT_UINT8:
  case DT_INT8:
  case DT_BOOL:
    return 1;
  case DT_INT16:
  case DT_FLOAT16:
  case DT_BFLOAT16:
    return 2;
  case DT_INT32:
  case DT_FLOAT32:
    return 4;
  case DT_INT64:
  case DT_FLOAT64:
    return 8;
  }
  return 0;
}

/* ---- scalar 16-bit float conversions (portable level; must match the SIMD ones bit for bit,
 * NaN payloads aside) ---- */

static inline uint32_t f32_bits(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  return x;
}

static inline float f32_from(uint32_t x) {
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static inline float h2f(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  const uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0x1f) return f32_from(sign | 0x7f800000u | (m << 13));
  if (e == 0) return f32_from(sign | f32_bits((float)m * 0x1p-24f)); /* zero, subnormal */
  return f32_from(sign | ((e + 112) << 23) | (m << 13));
}

static inline uint16_t f2h(float f) {
  uint32_t x = f32_bits(f);
  const uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) /* inf, NaN (quieted, payload truncated, as F16C does) */
    return x > 0x7f800000u ? (uint16_t)(sign | 0x7e00 | ((x >> 13) & 0x3ff)) : (uint16_t)(sign | 0x7c00);
  if (x >= 0x477ff000u) return sign | 0x7c00; /* >= 65520 rounds to inf */
  if (x >= 0x38800000u) {                     /* normal half */
    x -= 112u << 23;
    return (uint16_t)(sign | ((x + 0xfffu + ((x >> 13) & 1)) >> 13));
  }
  /* subnormal half: adding 0.5 makes the float32 ulp 2^-24, the half subnormal step, so the
   * hardware rounds to nearest-even for us; a carry lands on the smallest normal (0x0400). */
  const float v = f32_from(x) + 0.5f;
  return (uint16_t)(sign | (f32_bits(v) - 0x3f000000u));
}

static inline float bf2f(uint16_t h) { return f32_from((uint32_t)h << 16); }

static inline uint16_t f2bf(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

/* ---- portable level ---- */

#define P_LD(T, p) ({ T _v; __builtin_memcpy(&_v, (p), sizeof(T)); _v; })
#define P_ST(T, p, v) ({ T _v = (T)(v); __builtin_memcpy((p), &_v, sizeof(T)); })

#define P_ADD(a, b) ((a) + (b))
#define P_MUL(a, b) ((1u * (a)) * (b)) /* unsigned: no int-promotion overflow */
#define P_AND(a, b) ((a) & (b))
#define P_OR(a, b) ((a) | (b))
#define P_XOR(a, b) ((a) ^ (b))
#define P_MINI(a, b) ((b) < (a) ? (b) : (a))
#define P_MAXI(a, b) ((b) > (a) ? (b) : (a))
#define P_MINF(a, b) ((b) < (a) || (b) != (b) ? (b) : (a))
#define P_MAXF(a, b) ((b) > (a) || (b) != (b) ? (b) : (a))
#define P_LOR(a, b) ((uint8_t)(((a) | (b)) != 0))
#define P_LAND(a, b) ((uint8_t)(((a) != 0) & ((b) != 0)))
#define P_LXOR(a, b) ((uint8_t)(((a) != 0) ^ ((b) != 0)))

enum { P_BLK = 256 };

/* ET = element type in memory, WT = accumulator type, LD/ST convert memory <-> WT. Works on
 * blocks through an accumulator array, so k inputs cost one pass and dst may equal any src. */
#define P_KERNEL(NAME, ET, WT, LD, ST, OP)                                                       \
  static void NAME(uint8_t *dst, const uint8_t *const *src, int k, size_t n) {                  \
    WT acc[P_BLK];                                                                               \
    for (size_t i0 = 0; i0 < n; i0 += P_BLK) {                                                   \
      const size_t m = n - i0 < P_BLK ? n - i0 : P_BLK;                                          \
      const uint8_t *s = src[0] + i0 * sizeof(ET);                                               \
      for (size_t e = 0; e < m; e++) acc[e] = LD(ET, s + e * sizeof(ET));                       \
      for (int j = 1; j < k; j++) {                                                              \
        s = src[j] + i0 * sizeof(ET);                                                            \
        for (size_t e = 0; e < m; e++) acc[e] = (WT)OP(acc[e], LD(ET, s + e * sizeof(ET)));     \
      }                                                                                          \
      uint8_t *d = dst + i0 * sizeof(ET);                                                        \
      for (size_t e = 0; e < m; e++) ST(ET, d + e * sizeof(ET), acc[e]);                        \
    }                                                                                            \
  }

#define P_DIV_KERNEL(NAME, ET, WT, LD, ST)                                                       \
  static void NAME(uint8_t *dst, size_t n, double divisor) {                                     \
    const WT dv = (WT)divisor;                                                                   \
    for (size_t i = 0; i < n; i++) ST(ET, dst + i * sizeof(ET), LD(ET, dst + i * sizeof(ET)) / dv); \
  }

#define P_LD_F16(T, p) h2f(P_LD(uint16_t, p))
#define P_ST_F16(T, p, v) P_ST(uint16_t, p, f2h(v))
#define P_LD_BF16(T, p) bf2f(P_LD(uint16_t, p))
#define P_ST_BF16(T, p, v) P_ST(uint16_t, p, f2bf(v))

#define P_INT_WIDTH(W)                                                                           \
  P_KERNEL(k_sum_u##W##_port, uint##W##_t, uint##W##_t, P_LD, P_ST, P_ADD)                       \
  P_KERNEL(k_mul_u##W##_port, uint##W##_t, uint##W##_t, P_LD, P_ST, P_MUL)                       \
  P_KERNEL(k_and_u##W##_port, uint##W##_t, uint##W##_t, P_LD, P_ST, P_AND)                       \
  P_KERNEL(k_or_u##W##_port, uint##W##_t, uint##W##_t, P_LD, P_ST, P_OR)                         \
  P_KERNEL(k_xor_u##W##_port, uint##W##_t, uint##W##_t, P_LD, P_ST, P_XOR)                       \
  P_KERNEL(k_min_i##W##_port, int##W##_t, int##W##_t, P_LD, P_ST, P_MINI)                        \
  P_KERNEL(k_max_i##W##_port, int##W##_t, int##W##_t, P_LD, P_ST, P_MAXI)

P_INT_WIDTH(8)
P_INT_WIDTH(16)
P_INT_WIDTH(32)
P_INT_WIDTH(64)
P_KERNEL(k_min_u8_port, uint8_t, uint8_t, P_LD, P_ST, P_MINI)
P_KERNEL(k_max_u8_port, uint8_t, uint8_t, P_LD, P_ST, P_MAXI)
P_KERNEL(k_lor_b_port, uint8_t, uint8_t, P_LD, P_ST, P_LOR)
P_KERNEL(k_land_b_port, uint8_t, uint8_t, P_LD, P_ST, P_LAND)
P_KERNEL(k_lxor_b_port, uint8_t, uint8_t, P_LD, P_ST, P_LXOR)

#define P_FLOAT_TYPE(T, ET, WT, LD, ST)                                                          \
  P_KERNEL(k_sum_##T##_port, ET, WT, LD, ST, P_ADD)                                              \
  P_KERNEL(k_mul_##T##_port, ET, WT, LD, ST, P_ADD_MUL_F)                                        \
  P_KERNEL(k_min_##T##_port, ET, WT, LD, ST, P_MINF)                                             \
  P_KERNEL(k_max_##T##_port, ET, WT, LD, ST, P_MAXF)                                             \
  P_DIV_KERNEL(k_div_##T##_port, ET, WT, LD, ST)

#define P_ADD_MUL_F(a, b) ((a) * (b))
P_FLOAT_TYPE(f32, float, float, P_LD, P_ST)
P_FLOAT_TYPE(f64, double, double, P_LD, P_ST)
P_FLOAT_TYPE(f16, uint16_t, float, P_LD_F16, P_ST_F16)
P_FLOAT_TYPE(bf16, uint16_t, float, P_LD_BF16, P_ST_BF16)

static void narrow_port(uint8_t *dst, const float *src, size_t n, int dt) {
  for (size_t i = 0; i < n; i++) {
    const uint16_t h = dt == DT_FLOAT16 ? f2h(src[i]) : f2bf(src[i]);
    memcpy(dst + 2 * i, &h, 2);
  }
}

#define SFX(x) x##_port
#include "lookup_template.h"
#undef SFX

/* ---- x86-64 SIMD levels ---- */

#if defined(__x86_64__) && defined(__GNUC__)
#define MC_RED_X86 1
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#define SFX(x) x##_avx2
#define VB 32

/* bfloat16 moves pairs of float32 vectors (16 elements for AVX2) without shuffles: of one
 * 32-byte load, a shift left by 16 widens the even elements and masking the low halves widens
 * the odd ones; narrowing puts them back in the same words. Elementwise ops do not see the
 * interleaved order. (This beats unpack/packus: shuffles and shifts compete for the same few
 * ports, and this form needs five shifts, one word blend and no shuffles per 16 elements.) */

/* Round to nearest-even in place: the bfloat16 bits end up in the high half of each 32-bit
 * lane (the low half is garbage). NaN needs no care inside the kernels: their NaNs come from
 * widened bfloat16 inputs or from arithmetic, whose low 16 bits are zero, so the add cannot
 * carry out of the payload. */
static inline __attribute__((always_inline)) __m256i bf16_round_hi_avx2(__m256 v) {
  const __m256i x = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  return _mm256_add_epi32(x, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
}

#define BF16_LD2(V, p, a, b)                                                                     \
  do {                                                                                           \
    const __m256i _v = _mm256_loadu_si256((const __m256i *)(const void *)(p));                   \
    (a) = (V)_mm256_slli_epi32(_v, 16);                                                          \
    (b) = (V)_mm256_and_si256(_v, _mm256_set1_epi32((int)0xffff0000u));                          \
  } while (0)
#define BF16_ST2(V, p, a, b)                                                                     \
  _mm256_storeu_si256((__m256i *)(void *)(p),                                                    \
                      _mm256_blend_epi16(_mm256_srli_epi32(bf16_round_hi_avx2((__m256)(a)), 16), \
                                         bf16_round_hi_avx2((__m256)(b)), 0xaa))

/* General float32 -> bfloat16 of one vector, NaN-safe (test hook only). */
static inline __attribute__((always_inline)) void bf16_narrow_avx2(uint8_t *p, __m256 v) {
  __m256i r = _mm256_srli_epi32(bf16_round_hi_avx2(v), 16);
  const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(_mm256_castps_si256(v), 16), _mm256_set1_epi32(0x40));
  r = _mm256_blendv_epi8(r, nan, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  _mm_storeu_si128((__m128i *)(void *)p, _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
}

#define F16_LOADW(p) ((vf32_avx2)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p))))
#define F16_STOREW(p, v)                                                                         \
  _mm_storeu_si128((__m128i *)(void *)(p), _mm256_cvtps_ph((__m256)(v), _MM_FROUND_TO_NEAREST_INT))
#define BF16_NARROW(p, v) bf16_narrow_avx2((p), (__m256)(v))

#include "simd_template.h"
#include "lookup_template.h"

#undef F16_LOADW
#undef F16_STOREW
#undef BF16_LD2
#undef BF16_ST2
#undef BF16_NARROW
#undef VB
#undef SFX
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")
#define SFX(x) x##_avx512
#define VB 64

/* As for AVX2: pairs of vectors (32 elements), even elements by shift, odd ones by mask. */
static inline __attribute__((always_inline)) __m512i bf16_round_hi_avx512(__m512 v) {
  const __m512i x = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  return _mm512_add_epi32(x, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
}

#define BF16_LD2(V, p, a, b)                                                                     \
  do {                                                                                           \
    const __m512i _v = _mm512_loadu_si512((const void *)(p));                                    \
    (a) = (V)_mm512_slli_epi32(_v, 16);                                                          \
    (b) = (V)_mm512_and_si512(_v, _mm512_set1_epi32((int)0xffff0000u));                          \
  } while (0)
#define BF16_ST2(V, p, a, b)                                                                     \
  _mm512_storeu_si512((void *)(p),                                                               \
                      _mm512_mask_blend_epi16(0xaaaaaaaau,                                       \
                                              _mm512_srli_epi32(bf16_round_hi_avx512((__m512)(a)), 16), \
                                              bf16_round_hi_avx512((__m512)(b))))

static inline __attribute__((always_inline)) void bf16_narrow_avx512(uint8_t *p, __m512 v) {
  __m512i r = _mm512_srli_epi32(bf16_round_hi_avx512(v), 16);
  const __m512i nan = _mm512_or_si512(_mm512_srli_epi32(_mm512_castps_si512(v), 16), _mm512_set1_epi32(0x40));
  r = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), r, nan);
  _mm256_storeu_si256((__m256i *)(void *)p, _mm512_cvtepi32_epi16(r));
}

#define F16_LOADW(p) ((vf32_avx512)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p))))
#define F16_STOREW(p, v)                                                                         \
  _mm256_storeu_si256((__m256i *)(void *)(p), _mm512_cvtps_ph((__m512)(v), _MM_FROUND_TO_NEAREST_INT))
#define BF16_NARROW(p, v) bf16_narrow_avx512((p), (__m512)(v))

#include "simd_template.h"
#include "lookup_template.h"

#undef F16_LOADW
#undef F16_STOREW
#undef BF16_LD2
#undef BF16_ST2
#undef BF16_NARROW
#undef VB
#undef SFX
#pragma GCC pop_options
#endif

/* ---- dispatch ---- */

int mc_red_best_level(void) {
#ifdef MC_RED_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma"))
    return MC_RED_LEVEL_AVX512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma"))
    return MC_RED_LEVEL_AVX2;
#endif
  return MC_RED_LEVEL_PORTABLE;
}

static red_kernel_fn lookup(int level, int dt, int op) {
  switch (level) {
  case MC_RED_LEVEL_PORTABLE:
    return lookup_port(dt, op);
#ifdef MC_RED_X86
  case MC_RED_LEVEL_AVX2:
    return lookup_avx2(dt, op);
  case MC_RED_LEVEL_AVX512:
    return lookup_avx512(dt, op);
#endif
  }
  return 0;
}

int mc_red_reduce(void *dst, const void *const *src, int k, size_t n, int dtype, int op, int level) {
  const red_kernel_fn f = lookup(level, dtype, op);
  if (!f || k < 1) return -1;
  if (k == 1) {
    if (dst != src[0]) memmove(dst, src[0], n * (size_t)elem_size(dtype));
    return 0;
  }
  f((uint8_t *)dst, (const uint8_t *const *)src, k, n);
  return 0;
}

int mc_red_reduce2(void *dst, const void *src, size_t n, int dtype, int op, int level) {
  const red_kernel_fn f = lookup(level, dtype, op);
  if (!f) return -1;
  const uint8_t *s[2] = {(const uint8_t *)dst, (const uint8_t *)src};
  f((uint8_t *)dst, s, 2, n);
  return 0;
}

int mc_red_divide(void *dst, size_t n, int dtype, double divisor, int level) {
  red_div_fn f = 0;
  switch (level) {
  case MC_RED_LEVEL_PORTABLE:
    f = lookup_div_port(dtype);
    break;
#ifdef MC_RED_X86
  case MC_RED_LEVEL_AVX2:
    f = lookup_div_avx2(dtype);
    break;
  case MC_RED_LEVEL_AVX512:
    f = lookup_div_avx512(dtype);
    break;
#endif
  }
  if (!f) return -1;
  f((uint8_t *)dst, n, divisor);
  return 0;
}

int mc_red_narrow(void *dst, const float *src, size_t n, int dtype, int level) {
  if (dtype != DT_FLOAT16 && dtype != DT_BFLOAT16) return -1;
  switch (level) {
  case MC_RED_LEVEL_PORTABLE:
    narrow_port((uint8_t *)dst, src, n, dtype);
    return 0;
#ifdef MC_RED_X86
  case MC_RED_LEVEL_AVX2:
    narrow_avx2((uint8_t *)dst, src, n, dtype);
    return 0;
  case MC_RED_LEVEL_AVX512:
    narrow_avx512((uint8_t *)dst, src, n, dtype);
    return 0;
#endif
  }
  return -1;
}

#if defined(__x86_64__)
#include <emmintrin.h>
void mc_copy_stream(void *dst, const void *src, size_t n) {
  uint8_t *d = dst;
  const uint8_t *s = src;
  size_t head = (16 - ((uintptr_t)d & 15)) & 15;
  if (n < head + 64) {
    memcpy(d, s, n);
    return;
  }
  memcpy(d, s, head);
  d += head, s += head, n -= head;
  for (; n >= 64; d += 64, s += 64, n -= 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)s);
    __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
    __m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
    _mm_stream_si128((__m128i *)d, a);
    _mm_stream_si128((__m128i *)(d + 16), b);
    _mm_stream_si128((__m128i *)(d + 32), c);
    _mm_stream_si128((__m128i *)(d + 48), e);
  }
  _mm_sfence();
  memcpy(d, s, n);
}
#else
void mc_copy_stream(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
#endif
