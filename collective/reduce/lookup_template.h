/* Kernel lookup, included by reduce.c once per level after that level's kernels (k_*) are
 * defined under the SFX suffix. Maps (dtype, op) to a kernel; 0 when unsupported. */

static red_kernel_fn SFX(lookup)(int dt, int op) {
  switch (dt) {
  case DT_UINT8:
  case DT_INT8:
  case DT_INT16:
  case DT_INT32:
  case DT_INT64: {
    const int w = dt == DT_UINT8 || dt == DT_INT8 ? 8 : dt == DT_INT16 ? 16 : dt == DT_INT32 ? 32 : 64;
    switch (op) {
    case OP_SUM:
      return w == 8 ? SFX(k_sum_u8) : w == 16 ? SFX(k_sum_u16) : w == 32 ? SFX(k_sum_u32) : SFX(k_sum_u64);
    case OP_PRODUCT:
      return w == 8 ? SFX(k_mul_u8) : w == 16 ? SFX(k_mul_u16) : w == 32 ? SFX(k_mul_u32) : SFX(k_mul_u64);
    case OP_BAND:
      return w == 8 ? SFX(k_and_u8) : w == 16 ? SFX(k_and_u16) : w == 32 ? SFX(k_and_u32) : SFX(k_and_u64);
    case OP_BOR:
      return w == 8 ? SFX(k_or_u8) : w == 16 ? SFX(k_or_u16) : w == 32 ? SFX(k_or_u32) : SFX(k_or_u64);
    case OP_BXOR:
      return w == 8 ? SFX(k_xor_u8) : w == 16 ? SFX(k_xor_u16) : w == 32 ? SFX(k_xor_u32) : SFX(k_xor_u64);
    case OP_MIN:
      return dt == DT_UINT8 ? SFX(k_min_u8) : w == 8 ? SFX(k_min_i8) : w == 16 ? SFX(k_min_i16) : w == 32 ? SFX(k_min_i32) : SFX(k_min_i64);
    case OP_MAX:
      return dt == DT_UINT8 ? SFX(k_max_u8) : w == 8 ? SFX(k_max_i8) : w == 16 ? SFX(k_max_i16) : w == 32 ? SFX(k_max_i32) : SFX(k_max_i64);
    }
    return 0;
  }
  case DT_BOOL:
    switch (op) {
    case OP_SUM:
    case OP_MAX:
    case OP_BOR:
      return SFX(k_lor_b);
    case OP_PRODUCT:
    case OP_MIN:
    case OP_BAND:
      return SFX(k_land_b);
    case OP_BXOR:
      return SFX(k_lxor_b);
    }
    return 0;
#define SV_FLOAT_CASE(DT, T)                                                                     \
  case DT:                                                                                       \
    switch (op) {                                                                                \
    case OP_SUM:                                                                                 \
    case OP_AVG:                                                                                 \
      return SFX(k_sum_##T);                                                                     \
    case OP_PRODUCT:                                                                             \
      return SFX(k_mul_##T);                                                                     \
    case OP_MIN:                                                                                 \
      return SFX(k_min_##T);                                                                     \
    case OP_MAX:                                                                                 \
      return SFX(k_max_##T);                                                                     \
    }                                                                                            \
    return 0;
    SV_FLOAT_CASE(DT_FLOAT32, f32)
    SV_FLOAT_CASE(DT_FLOAT64, f64)
    SV_FLOAT_CASE(DT_FLOAT16, f16)
    SV_FLOAT_CASE(DT_BFLOAT16, bf16)
#undef SV_FLOAT_CASE
  }
  return 0;
}

static red_div_fn SFX(lookup_div)(int dt) {
  switch (dt) {
  case DT_FLOAT32:
    return SFX(k_div_f32);
  case DT_FLOAT64:
    return SFX(k_div_f64);
  case DT_FLOAT16:
    return SFX(k_div_f16);
  case DT_BFLOAT16:
    return SFX(k_div_bf16);
  }
  return 0;
}

