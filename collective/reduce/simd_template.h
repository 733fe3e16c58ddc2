/* SIMD kernel template, included by reduce.c once per instruction set inside a
 * "#pragma GCC target" region. Before including, reduce.c defines:
 *
 *   SFX(name)         appends the level's suffix (name##_avx2, ...)
 *   VB                vector width in bytes (32 or 64)
 *   F16_LOADW(p)      load VB/4 float16 values at p (unaligned), widen to a float32 vector
 *   F16_STOREW(p, v)  round a float32 vector to float16 (nearest-even) and store VB/4 values at p
 *   BF16_LOADW(p), BF16_STOREW(p, v)   the same for bfloat16
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

/* Kernel body: ESZ = element size in memory, V = work vector type (elements per vector =
 * lanes of V), MI = integer vector type for masks, LOADW/STOREW convert memory <-> V. */
#define SV_KERNEL(NAME, ESZ, V, MI, LOADW, STOREW, OP)                                          \
  static void NAME(uint8_t *dst, const uint8_t *const *src, int k, size_t n) {                  \
    enum { L = sizeof(V) / sizeof(((V){0})[0]), SB = L * (ESZ) };                                \
    const size_t nb = n * (ESZ);                                                                 \
    size_t off = 0;                                                                              \
    if (k == 2) {                                                                                \
      const uint8_t *s0 = src[0], *s1 = src[1];                                                  \
      for (; off + 4 * SB <= nb; off += 4 * SB) {                                                \
        V a0 = LOADW(s0 + off), a1 = LOADW(s0 + off + SB);                                       \
        V a2 = LOADW(s0 + off + 2 * SB), a3 = LOADW(s0 + off + 3 * SB);                          \
        a0 = OP(V, MI, a0, LOADW(s1 + off));                                                     \
        a1 = OP(V, MI, a1, LOADW(s1 + off + SB));                                                \
        a2 = OP(V, MI, a2, LOADW(s1 + off + 2 * SB));                                            \
        a3 = OP(V, MI, a3, LOADW(s1 + off + 3 * SB));                                            \
        STOREW(dst + off, a0);                                                                   \
        STOREW(dst + off + SB, a1);                                                              \
        STOREW(dst + off + 2 * SB, a2);                                                          \
        STOREW(dst + off + 3 * SB, a3);                                                          \
      }                                                                                          \
    } else {                                                                                     \
      for (; off + 4 * SB <= nb; off += 4 * SB) {                                                \
        const uint8_t *s = src[0] + off;                                                         \
        V a0 = LOADW(s), a1 = LOADW(s + SB), a2 = LOADW(s + 2 * SB), a3 = LOADW(s + 3 * SB);     \
        for (int j = 1; j < k; j++) {                                                            \
          s = src[j] + off;                                                                      \
          a0 = OP(V, MI, a0, LOADW(s));                                                          \
          a1 = OP(V, MI, a1, LOADW(s + SB));                                                     \
          a2 = OP(V, MI, a2, LOADW(s + 2 * SB));                                                 \
          a3 = OP(V, MI, a3, LOADW(s + 3 * SB));                                                 \
        }                                                                                        \
        STOREW(dst + off, a0);                                                                   \
        STOREW(dst + off + SB, a1);                                                              \
        STOREW(dst + off + 2 * SB, a2);                                                          \
        STOREW(dst + off + 3 * SB, a3);                                                          \
      }                                                                                          \
    }                                                                                            \
    for (; off + SB <= nb; off += SB) {                                                          \
      V a = LOADW(src[0] + off);                                                                 \
      for (int j = 1; j < k; j++) a = OP(V, MI, a, LOADW(src[j] + off));                        \
      STOREW(dst + off, a);                                                                      \
    }                                                                                            \
    if (off < nb) { /* tail: the same vector code on a zero-padded copy */                       \
      const size_t rem = nb - off;                                                               \
      uint8_t t[SB] __attribute__((aligned(64)));                                                \
      __builtin_memset(t, 0, sizeof t);                                                          \
      __builtin_memcpy(t, src[0] + off, rem);                                                    \
      V a = LOADW(t);                                                                            \
      for (int j = 1; j < k; j++) {                                                              \
        __builtin_memcpy(t, src[j] + off, rem);                                                  \
        a = OP(V, MI, a, LOADW(t));                                                              \
      }                                                                                          \
      STOREW(t, a);                                                                              \
      __builtin_memcpy(dst + off, t, rem);                                                       \
    }                                                                                            \
  }

#define SV_DIV_KERNEL(NAME, ESZ, V, LOADW, STOREW)                                               \
  static void NAME(uint8_t *dst, size_t n, double divisor) {                                     \
    enum { L = sizeof(V) / sizeof(((V){0})[0]), SB = L * (ESZ) };                                \
    const __typeof__(((V){0})[0]) dv = (__typeof__(((V){0})[0]))divisor;                         \
    const size_t nb = n * (ESZ);                                                                 \
    size_t off = 0;                                                                              \
    for (; off + 2 * SB <= nb; off += 2 * SB) {                                                  \
      V a0 = LOADW(dst + off), a1 = LOADW(dst + off + SB);                                       \
      STOREW(dst + off, a0 / dv);                                                                \
      STOREW(dst + off + SB, a1 / dv);                                                           \
    }                                                                                            \
    for (; off + SB <= nb; off += SB) STOREW(dst + off, LOADW(dst + off) / dv);                  \
    if (off < nb) {                                                                              \
      const size_t rem = nb - off;                                                               \
      uint8_t t[SB] __attribute__((aligned(64)));                                                \
      __builtin_memset(t, 0, sizeof t);                                                          \
      __builtin_memcpy(t, dst + off, rem);                                                       \
      STOREW(t, LOADW(t) / dv);                                                                  \
      __builtin_memcpy(dst + off, t, rem);                                                       \
    }                                                                                            \
  }

/* Loaders for plain types. */
#define SFX_LD_F32(p) SV_LD(SFX(vf32), p)
#define SFX_LD_F64(p) SV_LD(SFX(vf64), p)
#define SFX_LD_I8(p) SV_LD(SFX(vi8), p)
#define SFX_LD_I16(p) SV_LD(SFX(vi16), p)
#define SFX_LD_I32(p) SV_LD(SFX(vi32), p)
#define SFX_LD_I64(p) SV_LD(SFX(vi64), p)
#define SFX_LD_U8(p) SV_LD(SFX(vu8), p)
#define SFX_LD_U16(p) SV_LD(SFX(vu16), p)
#define SFX_LD_U32(p) SV_LD(SFX(vu32), p)
#define SFX_LD_U64(p) SV_LD(SFX(vu64), p)

/* Integer kernels. Wrapping ops use unsigned lanes (no signed-overflow UB); min/max use the
 * signedness of the dtype. */
#define SV_INT_WIDTH(W)                                                                          \
  SV_KERNEL(SFX(k_sum_u##W), W / 8, SFX(vu##W), SFX(vi##W), SFX_LD_U##W, SV_ST, SV_ADD)          \
  SV_KERNEL(SFX(k_mul_u##W), W / 8, SFX(vu##W), SFX(vi##W), SFX_LD_U##W, SV_ST, SV_MUL)          \
  SV_KERNEL(SFX(k_and_u##W), W / 8, SFX(vu##W), SFX(vi##W), SFX_LD_U##W, SV_ST, SV_AND)          \
  SV_KERNEL(SFX(k_or_u##W), W / 8, SFX(vu##W), SFX(vi##W), SFX_LD_U##W, SV_ST, SV_OR)            \
  SV_KERNEL(SFX(k_xor_u##W), W / 8, SFX(vu##W), SFX(vi##W), SFX_LD_U##W, SV_ST, SV_XOR)          \
  SV_KERNEL(SFX(k_min_i##W), W / 8, SFX(vi##W), SFX(vi##W), SFX_LD_I##W, SV_ST, SV_MINI)         \
  SV_KERNEL(SFX(k_max_i##W), W / 8, SFX(vi##W), SFX(vi##W), SFX_LD_I##W, SV_ST, SV_MAXI)

SV_INT_WIDTH(8)
SV_INT_WIDTH(16)
SV_INT_WIDTH(32)
SV_INT_WIDTH(64)
SV_KERNEL(SFX(k_min_u8), 1, SFX(vu8), SFX(vi8), SFX_LD_U8, SV_ST, SV_MINI)
SV_KERNEL(SFX(k_max_u8), 1, SFX(vu8), SFX(vi8), SFX_LD_U8, SV_ST, SV_MAXI)

SV_KERNEL(SFX(k_lor_b), 1, SFX(vu8), SFX(vi8), SFX_LD_U8, SV_ST, SV_LOR)
SV_KERNEL(SFX(k_land_b), 1, SFX(vu8), SFX(vi8), SFX_LD_U8, SV_ST, SV_LAND)
SV_KERNEL(SFX(k_lxor_b), 1, SFX(vu8), SFX(vi8), SFX_LD_U8, SV_ST, SV_LXOR)

/* Floating kernels: ESZ is the element size in memory, the vector is float32 for 16-bit types. */
#define SV_FLOAT_TYPE(T, ESZ, V, MI, LOADW, STOREW)                                              \
  SV_KERNEL(SFX(k_sum_##T), ESZ, V, MI, LOADW, STOREW, SV_ADD)                                   \
  SV_KERNEL(SFX(k_mul_##T), ESZ, V, MI, LOADW, STOREW, SV_MUL)                                   \
  SV_KERNEL(SFX(k_min_##T), ESZ, V, MI, LOADW, STOREW, SV_MINF)                                  \
  SV_KERNEL(SFX(k_max_##T), ESZ, V, MI, LOADW, STOREW, SV_MAXF)                                  \
  SV_DIV_KERNEL(SFX(k_div_##T), ESZ, V, LOADW, STOREW)

SV_FLOAT_TYPE(f32, 4, SFX(vf32), SFX(vi32), SFX_LD_F32, SV_ST)
SV_FLOAT_TYPE(f64, 8, SFX(vf64), SFX(vi64), SFX_LD_F64, SV_ST)
SV_FLOAT_TYPE(f16, 2, SFX(vf32), SFX(vi32), F16_LOADW, F16_STOREW)
SV_FLOAT_TYPE(bf16, 2, SFX(vf32), SFX(vi32), BF16_LOADW, BF16_STOREW)

static void SFX(narrow)(uint8_t *dst, const float *src, size_t n, int dt) {
  enum { L = VB / 4 };
  size_t i = 0;
  for (; i + L <= n; i += L) {
    SFX(vf32) v = SV_LD(SFX(vf32), src + i);
    if (dt == DT_FLOAT16)
      F16_STOREW(dst + 2 * i, v);
    else
      BF16_STOREW(dst + 2 * i, v);
  }
  for (; i < n; i++) { /* tail: pad a vector */
    float t[L] = {0};
    uint8_t o[2 * L];
    t[0] = src[i];
    SFX(vf32) v = SV_LD(SFX(vf32), t);
    if (dt == DT_FLOAT16)
      F16_STOREW(o, v);
    else
      BF16_STOREW(o, v);
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
#undef SFX_LD_F32
#undef SFX_LD_F64
#undef SFX_LD_I8
#undef SFX_LD_I16
#undef SFX_LD_I32
#undef SFX_LD_I64
#undef SFX_LD_U8
#undef SFX_LD_U16
#undef SFX_LD_U32
#undef SFX_LD_U64
#undef SV_INT_WIDTH
#undef SV_FLOAT_TYPE
