// Package reduce holds the elementwise reduction kernels of the collectives: the arithmetic
// that all_reduce, reduce and reduce_scatter apply to buffers once the bytes have arrived.
// It owns nothing else: no communication, no threads, no memory of its own. Callers (package
// collective, the shared-memory single-copy path) pick chunk sizes and parallelism, and call
// in with byte slices over tensor memory, Go memory or peers' mapped shared buffers alike.
//
// # API
//
// Types and operations carry their torch codes, so values cross the C ABI unchanged: [DType]
// is c10::ScalarType (uint8, int8, int16, int32, int64, float16, float32, float64, bool,
// bfloat16) and [Op] is c10d::ReduceOp (SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR).
//
//   - [Check] says whether an op is defined on a dtype; [ElemSize] gives the element size.
//   - [Reduce] is the two-input step dst = dst op src.
//   - [ReduceMany] folds k inputs into dst in a single pass. A rank that reduces a chunk from
//     k peers' shared buffers reads each byte once and writes the result once, instead of the
//     k-1 read-modify-write passes that chained Reduce calls cost.
//   - [Divide] finishes AVG: collectives accumulate AVG as SUM, then divide by the number of
//     contributions once.
//
// Errors wrap [ErrUnsupported] or [ErrLength] and name the dtype, op and sizes involved.
//
// # Semantics
//
// The results follow torch (and gloo, where torch leaves the backend to decide):
//
//   - Integers wrap around in two's complement for SUM and PRODUCT; MIN/MAX compare signed,
//     except uint8.
//   - bool is logical: SUM and MAX are OR, PRODUCT and MIN are AND, BAND/BOR/BXOR are
//     AND/OR/XOR; results are 0 or 1 even if an input byte holds another nonzero value.
//   - Floating MIN/MAX propagate NaN like torch.minimum/maximum: if either input is NaN the
//     result is NaN (ties such as -0 vs +0 keep the accumulated value).
//   - float16 and bfloat16 are widened to float32 (exactly), combined in float32, and rounded
//     back to nearest-even, with overflow to ±inf, subnormals kept and NaN kept quiet; this is
//     what torch's CPU kernels do per operation. ReduceMany keeps the float32 accumulator across
//     all k inputs and rounds once, which is at least as accurate as rounding after each step.
//     Divide also divides in float32 and rounds once.
//   - AVG is accepted on floating dtypes only (gloo has no AVG; integer AVG would need a
//     rounding rule torch does not define for CPU). Bitwise ops are refused on floating dtypes.
//
// Every kernel level computes bit-identical results (NaN payloads aside), so which one runs is
// invisible to callers; the tests check each level against a naive reference.
//
// # Design
//
// The kernels are C, compiled by cgo at -O3, because Go has no stable SIMD: the Go compiler
// does not auto-vectorise, simd/archsimd is an experiment (GOEXPERIMENT=simd, no compatibility
// promise, and no bfloat16 type), and hand-written Go assembly would have to be written per
// dtype x op x instruction set. In C, one kernel body written with GCC vector extensions
// (simd_template.h) is compiled once per instruction set inside a "#pragma GCC target" region:
// AVX2+FMA+F16C (256-bit) and AVX-512F/BW/DQ/VL (512-bit). Only the 16-bit float conversions
// need intrinsics: F16C's vcvtph2ps/vcvtps2ph for float16, and integer shifts plus a
// round-to-nearest-even add for bfloat16. A portable scalar C level (the compiler vectorises
// what it can for the build's baseline) serves other CPUs, and __builtin_cpu_supports picks
// the best level once at start-up. Each kernel loads whole vectors unaligned, unrolled four
// times, so it streams at memory bandwidth; the tail (fewer elements than one vector) goes
// through the same vector code on a zero-padded copy, so it cannot round differently.
//
// A pure Go implementation of everything (kernel_go.go) is always compiled in. It runs inputs
// too small to be worth a cgo call (below smallBytes; a call costs tens of nanoseconds), and
// everything when the package is built without cgo or with the mooncake_purego build tag.
// [UseKernel]("go"|"portable"|"avx2"|"avx512") forces a level (one the CPU has) for
// debugging and comparisons (the library passes MOONCAKE_REDUCE_KERNEL at load; this package
// reads no environment); [Kernel] reports the level in use.
//
// Each call runs on the calling goroutine's thread and returns when done; one large call
// keeps one core busy. Callers split big buffers across goroutines if they want more cores.
// Buffers are in native byte order (as tensors are), and may be unaligned.
package reduce
