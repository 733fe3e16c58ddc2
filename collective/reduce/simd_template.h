/* SIMD kernel template, included by reduce.c once per instruction set inside a
 * "#pragma GCC target" region. Before including, reduce.c defines:
 *
 *   SFX(name)         appends the level's suffix (name##_avx2, ...)
 *   VB                vector width in bytes (32 or 64)
 *   F16_LOADW(p)      load VB/4 float16 values at p (unaligned), widen to a float32 vector
 *   F16_STOREW(p, v)  round a float32 vector to float16 (nearest-even) and store VB/4 values at p
 *   BF16_LD2(V, p, a, b)  load 2*VB/4 bfloat16 values at p, widen to two float32 vectors
 *                         (in any lane order, as long as BF16_ST2 undoes it)
 *   BF16_ST2(V, p, a, b)  round two float32 vectors to bfloat16 and store them at p
 *   BF16_NARROW(p, v) NaN-safe float32 -> bfloat16 of one float32 vector (test hook)
 *
 * Arithmetic is written with GCC vector extensions, so one body serves every width; only the
 * 16-bit float conversions need intrinsics. Every kernel has the signature of red_kernel_fn.
 */

typedef float SFX(vf32) __attribute__((vector_size(VB)));
typedef double SFX(vf64) __attribute__((vector_size(VB)));
typedef int8_t SFX(vi8) __attribute__((vector_size(VB)));
typedef int16_t SFX(vi16) __attribute__((vector_size(VB)));
typedef int32_t SFX(vi32) __attribute__((vector_size(VB)));
typedef int64_t SFX(vi64) __attribute__((vector_size(VB)));
typedef uint8_t SFX(vu8) __attribute__((vector_size(VB)));
typedef uint16_t SFX(vu16) __attribute__((vector_size(VB)));
typedef uint32_t SFX(vu32) __attribute__((vector_size(VB)));
typedef uint64_t SFX(vu64) __attribute__((vector_size(VB)));

/* Plain unaligned load/store of a whole vector. */
#define SV_LD(V, p) ({ V _v; __builtin_memcpy(&_v, (p), sizeof(V)); _v; })
#define SV_ST(p, v) ({ __typeof__(v) _v = (v); __builtin_memcpy((p), &_v, sizeof(_v)); })

/* Select b where mask m (all-ones lanes) else a. MI is the integer vector type of the lane width. */
#define SV_SEL(V, MI, m, b, a) ((V)((((MI)(b)) & (MI)(m)) | (((MI)(a)) & ~(MI)(m))))

/* Ops on vectors a, b of type V. */
#define SV_ADD(V, MI, a, b) ((a) + (b))
#define SV_MUL(V, MI, a, b) ((a) * (b))
#define SV_AND(V, MI, a, b) ((a) & (b))
#define SV_OR(V, MI, a, b) ((a) | (b))
#define SV_XOR(V, MI, a, b) ((a) ^ (b))
#define SV_MINI(V, MI, a, b) SV_SEL(V, MI, (b) < (a), b, a)
#define SV_MAXI(V, MI, a, b) SV_SEL(V, MI, (b) > (a), b, a)
/* Floats: NaN in b wins, then NaN in a stays (b < a is false), so NaN propagates. */
#define SV_MINF(V, MI, a, b) SV_SEL(V, MI, ((b) < (a)) | ((b) != (b)), b, a)
#define SV_MAXF(V, MI, a, b) SV_SEL(V, MI, ((b) > (a)) | ((b) != (b)), b, a)
/* Bool: logical results, normalised to 0/1. */
#define SV_ONE(V) ((V){0} + 1)
#define SV_LOR(V, MI, a, b) (((V)(((a) | (b)) != (V){0})) & SV_ONE(V))
#define SV_LAND(V, MI, a, b) (((V)(((a) != (V){0}) & ((b) != (V){0}))) & SV_ONE(V))
#define SV_LXOR(V, MI, a, b) (((V)(((a) != (V){0}) ^ ((b) != (V){0}))) & SV_ONE(V))

/* Kernel body. ESZ = element size in memory; V = work vector type; MI = integer vector type
 * for masks. Kernels move pairs of vectors (a pair is U bytes of memory): LD2(V, p, a, b)
 * loads and widens a pair, ST2(V, p, a, b) narrows and stores one; the pair is what lets
 * bfloat16 widen and narrow without cross-lane shuffles. The main loop handles two pairs per
 * input per iteration; the tail runs the same code on a zero-padded copy. */
#define SV_KERNEL(NAME, ESZ, V, MI, LD2, ST2, OP)                                                \
  static void NAME(uint8_t *dst, const uint8_t *const *src, int k, size_t n) {                  \
    enum { L = sizeof(V) / sizeof(((V){0})[0]), U = 2 * L * (ESZ) };                             \
    const size_t nb = n * (ESZ);                                                                 \
    size_t off = 0;                                                                              \
    if (k == 2) {                                                                                \
      const uint8_t *s0 = src[0], *s1 = src[1];                                                  \
      for (; off + 2 * U <= nb; off += 2 * U) {                                                  \
        V a0, a1, a2, a3, b0, b1, b2, b3;                                                        \
        SV_PF(s0 + off); SV_PF(s1 + off);                                                        \
        LD2(V, s0 + off, a0, a1);                                                                \
        LD2(V, s0 + off + U, a2, a3);                                                            \
        LD2(V, s1 + off, b0, b1);                                                                \
        LD2(V, s1 + off + U, b2, b3);                                                            \
        a0 = OP(V, MI, a0, b0);                                                                  \
        a1 = OP(V, MI, a1, b1);                                                                  \
        a2 = OP(V, MI, a2, b2);                                                                  \
        a3 = OP(V, MI, a3, b3);                                                                  \
        ST2(V, dst + off, a0, a1);                                                               \
        ST2(V, dst + off + U, a2, a3);                                                           \
      }                                                                                          \
    } else {                                                                                     \
      for (; off + 2 * U <= nb; off += 2 * U) {                                                  \
        V a0, a1, a2, a3, b0, b1, b2, b3;                                                        \
        SV_PF(src[0] + off);                                                                     \
        LD2(V, src[0] + off, a0, a1);                                                            \
        LD2(V, src[0] + off + U, a2, a3);                                                        \
        for (int j = 1; j < k; j++) {                                                            \
          SV_PF(src[j] + off);                                                                   \
          LD2(V, src[j] + off, b0, b1);                                                          \
          LD2(V, src[j] + off + U, b2, b3);                                                      \
          a0 = OP(V, MI, a0, b0);                                                                \
          a1 = OP(V, MI, a1, b1);                                                                \
          a2 = OP(V, MI, a2, b2);                                                                \
          a3 = OP(V, MI, a3, b3);                                                                \
        }                                                                                        \
        ST2(V, dst + off, a0, a1);                                                               \
        ST2(V, dst + off + U, a2, a3);                                                           \
      }                                                                                          \
    }                                                                                            \
    for (; off + U <= nb; off += U) {                                                            \
      V a0, a1, b0, b1;                                                                          \
      LD2(V, src[0] + off, a0, a1);                                                              \
      for (int j = 1; j < k; j++) {                                                              \
        LD2(V, src[j] + off, b0, b1);                                                            \
        a0 = OP(V, MI, a0, b0);                                                                  \
        a1 = OP(V, MI, a1, b1);                                                                  \
      }                                                                                          \
      ST2(V, dst + off, a0, a1);                                                                 \
    }                                                                                            \
    if (off < nb) { /* tail: the same vector code on a zero-padded copy */                       \
      const size_t rem = nb - off;                                                               \
      uint8_t t[U] __attribute__((aligned(64)));                                                 \
      V a0, a1, b0, b1;                                                                          \
      __builtin_memset(t, 0, sizeof t);                                                          \
      __builtin_memcpy(t, src[0] + off, rem);                                                    \
      LD2(V, t, a0, a1);                                                                         \
      for (int j = 1; j < k; j++) {                                                              \
        __builtin_memcpy(t, src[j] + off, rem);                                                  \
        LD2(V, t, b0, b1);                                                                       \
        a0 = OP(V, MI, a0, b0);                                                                  \
        a1 = OP(V, MI, a1, b1);                                                                  \
      }                                                                                          \
      ST2(V, t, a0, a1);                                                                         \
      __builtin_memcpy(dst + off, t, rem);                                                       \
    }                                                                                            \
  }

#define SV_DIV_KERNEL(NAME, ESZ, V, LD2, ST2)                                                    \
  static void NAME(uint8_t *dst, size_t n, double divisor) {                                     \
    enum { L = sizeof(V) / sizeof(((V){0})[0]), U = 2 * L * (ESZ) };                             \
    const __typeof__(((V){0})[0]) dv = (__typeof__(((V){0})[0]))divisor;                         \
    const size_t nb = n * (ESZ);                                                                 \
    size_t off = 0;                                                                              \
    for (; off + U <= nb; off += U) {                                                            \
      V a0, a1;                                                                                  \
      LD2(V, dst + off, a0, a1);                                                                 \
      ST2(V, dst + off, a0 / dv, a1 / dv);                                                       \
    }                                                                                            \
    if (off < nb) {                                                                              \
      const size_t rem = nb - off;                                                               \
      uint8_t t[U] __attribute__((aligned(64)));                                                 \
      V a0, a1;                                                                                  \
      __builtin_memset(t, 0, sizeof t);                                                          \
      __builtin_memcpy(t, dst + off, rem);                                                       \
      LD2(V, t, a0, a1);                                                                         \
      ST2(V, t, a0 / dv, a1 / dv);                                                               \
      __builtin_memcpy(dst + off, t, rem);                                                       \
    }                                                                                            \
  }

/* Software prefetch SV_PF_DIST bytes ahead of every input, one per cache line of an
 * iteration. It lets the slower 16-bit float kernels keep enough DRAM reads in flight. */
#ifndef SV_PF_DIST
#define SV_PF_DIST 1024
#endif
#define SV_PF(p)                                                                                 \
  do {                                                                                           \
    for (int _q = 0; _q < 2 * U; _q += 64) __builtin_prefetch((p) + SV_PF_DIST + _q);            \
  } while (0)
/* Pair loaders/storers for plain types and float16. */
#define SV_LD2(V, p, a, b) ((a) = SV_LD(V, p), (b) = SV_LD(V, (p) + sizeof(V)))
#define SV_ST2(V, p, a, b) (SV_ST(p, a), SV_ST((p) + sizeof(V), b))
#define SV_F16_LD2(V, p, a, b) ((a) = F16_LOADW(p), (b) = F16_LOADW((p) + VB / 2))
#define SV_F16_ST2(V, p, a, b) (F16_STOREW(p, a), F16_STOREW((p) + VB / 2, b))

/* Integer kernels. Wrapping ops use unsigned lanes (no signed-overflow UB); min/max use the
 * signedness of the dtype. */
#define SV_INT_WIDTH(W)                                                                          \
  SV_KERNEL(SFX(k_sum_u##W), W / 8, SFX(vu##W), SFX(vi##W), SV_LD2, SV_ST2, SV_ADD)          \
  SV_KERNEL(SFX(k_mul_u##W), W / 8, SFX(vu##W), SFX(vi##W), SV_LD2, SV_ST2, SV_MUL)          \
  SV_KERNEL(SFX(k_and_u##W), W / 8, SFX(vu##W), SFX(vi##W), SV_LD2, SV_ST2, SV_AND)          \
  SV_KERNEL(SFX(k_or_u##W), W / 8, SFX(vu##W), SFX(vi##W), SV_LD2, SV_ST2, SV_OR)            \
  SV_KERNEL(SFX(k_xor_u##W), W / 8, SFX(vu##W), SFX(vi##W), SV_LD2, SV_ST2, SV_XOR)          \
  SV_KERNEL(SFX(k_min_i##W), W / 8, SFX(vi##W), SFX(vi##W), SV_LD2, SV_ST2, SV_MINI)         \
  SV_KERNEL(SFX(k_max_i##W), W / 8, SFX(vi##W), SFX(vi##W), SV_LD2, SV_ST2, SV_MAXI)

SV_INT_WIDTH(8)
SV_INT_WIDTH(16)
SV_INT_WIDTH(32)
SV_INT_WIDTH(64)
SV_KERNEL(SFX(k_min_u8), 1, SFX(vu8), SFX(vi8), SV_LD2, SV_ST2, SV_MINI)
SV_KERNEL(SFX(k_max_u8), 1, SFX(vu8), SFX(vi8), SV_LD2, SV_ST2, SV_MAXI)

SV_KERNEL(SFX(k_lor_b), 1, SFX(vu8), SFX(vi8), SV_LD2, SV_ST2, SV_LOR)
SV_KERNEL(SFX(k_land_b), 1, SFX(vu8), SFX(vi8), SV_LD2, SV_ST2, SV_LAND)
SV_KERNEL(SFX(k_lxor_b), 1, SFX(vu8), SFX(vi8), SV_LD2, SV_ST2, SV_LXOR)

/* Floating kernels: ESZ is the element size in memory, the vector is float32 for 16-bit types. */
#define SV_FLOAT_TYPE(T, ESZ, V, MI, LD2, ST2)                                              \
  SV_KERNEL(SFX(k_sum_##T), ESZ, V, MI, LD2, ST2, SV_ADD)                                   \
  SV_KERNEL(SFX(k_mul_##T), ESZ, V, MI, LD2, ST2, SV_MUL)                                   \
  SV_KERNEL(SFX(k_min_##T), ESZ, V, MI, LD2, ST2, SV_MINF)                                  \
  SV_KERNEL(SFX(k_max_##T), ESZ, V, MI, LD2, ST2, SV_MAXF)                                  \
  SV_DIV_KERNEL(SFX(k_div_##T), ESZ, V, LD2, ST2)

SV_FLOAT_TYPE(f32, 4, SFX(vf32), SFX(vi32), SV_LD2, SV_ST2)
SV_FLOAT_TYPE(f64, 8, SFX(vf64), SFX(vi64), SV_LD2, SV_ST2)
SV_FLOAT_TYPE(f16, 2, SFX(vf32), SFX(vi32), SV_F16_LD2, SV_F16_ST2)
SV_FLOAT_TYPE(bf16, 2, SFX(vf32), SFX(vi32), BF16_LD2, BF16_ST2)

static void SFX(narrow)(uint8_t *dst, const float *src, size_t n, int dt) {
  enum { L = VB / 4 };
  size_t i = 0;
  for (; i + L <= n; i += L) {
    SFX(vf32) v = SV_LD(SFX(vf32), src + i);
    if (dt == DT_FLOAT16)
      F16_STOREW(dst + 2 * i, v);
    else
      BF16_NARROW(dst + 2 * i, v);
  }
  for (; i < n; i++) { /* tail: pad a vector */
    float t[L] = {0};
    uint8_t o[2 * L];
    t[0] = src[i];
    SFX(vf32) v = SV_LD(SFX(vf32), t);
    if (dt == DT_FLOAT16)
      F16_STOREW(o, v);
    else
      BF16_NARROW(o, v);
    __builtin_memcpy(dst + 2 * i, o, 2);
  }
}

#undef SV_LD
#undef SV_ST
#undef SV_SEL
#undef SV_ADD
#undef SV_MUL
#undef SV_AND
#undef SV_OR
#undef SV_XOR
#undef SV_MINI
#undef SV_MAXI
#undef SV_MINF
#undef SV_MAXF
#undef SV_LOR
#undef SV_LAND
#undef SV_LXOR
#undef SV_ONE
#undef SV_KERNEL
#undef SV_DIV_KERNEL
#undef SV_PF
#undef SV_LD2
#undef SV_ST2
#undef SV_F16_LD2
#undef SV_F16_ST2
#undef SV_INT_WIDTH
#undef SV_FLOAT_TYPE
