package reduce

import (
	"errors"
	"fmt"
	"unsafe"
)

// DType is a tensor element type, numbered as c10::ScalarType.
type DType int32

// Element types supported by the kernels (c10::ScalarType codes).
const (
	Uint8    DType = 0
	Int8     DType = 1
	Int16    DType = 2
	Int32    DType = 3
	Int64    DType = 4
	Float16  DType = 5
	Float32  DType = 6
	Float64  DType = 7
	Bool     DType = 11
	BFloat16 DType = 15
)

var dtypeNames = map[DType]string{
	Uint8: "uint8", Int8: "int8", Int16: "int16", Int32: "int32", Int64: "int64",
	Float16: "float16", Float32: "float32", Float64: "float64", Bool: "bool", BFloat16: "bfloat16",
}

// String returns torch's name for the type ("float32", "bfloat16", ...), or "ScalarType(N)".
func (d DType) String() string {
	if s, ok := dtypeNames[d]; ok {
		return s
	}
	return fmt.Sprintf("ScalarType(%d)", int32(d))
}

// IsFloating reports whether d is float16, bfloat16, float32 or float64.
func (d DType) IsFloating() bool {
	return d == Float16 || d == BFloat16 || d == Float32 || d == Float64
}

// Op is a reduction operation, numbered as c10d::ReduceOp.
type Op int32

// Reduction operations (c10d::ReduceOp codes).
const (
	Sum     Op = 0
	Avg     Op = 1
	Product Op = 2
	Min     Op = 3
	Max     Op = 4
	BAnd    Op = 5
	BOr     Op = 6
	BXor    Op = 7
)

var opNames = [...]string{"SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"}

// String returns the c10d name ("SUM", "BXOR", ...), or "ReduceOp(N)".
func (o Op) String() string {
	if o >= 0 && int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("ReduceOp(%d)", int32(o))
}

// Errors returned (wrapped, with details) by this package; test with errors.Is.
var (
	// ErrUnsupported: unknown dtype or op, or an op the dtype does not support.
	ErrUnsupported = errors.New("reduce: unsupported")
	// ErrLength: buffer lengths differ or are not a multiple of the element size.
	ErrLength = errors.New("reduce: bad buffer length")
)

// ElemSize returns the size in bytes of one element of dt.
func ElemSize(dt DType) (int, error) {
	switch dt {
	case Uint8, Int8, Bool:
		return 1, nil
	case Int16, Float16, BFloat16:
		return 2, nil
	case Int32, Float32:
		return 4, nil
	case Int64, Float64:
		return 8, nil
	}
	return 0, fmt.Errorf("%w: dtype %v", ErrUnsupported, dt)
}

// Check reports whether op is defined on dt, with torch/gloo semantics:
//
//   - SUM, PRODUCT, MIN, MAX: every dtype. Integers wrap around (two's complement); on bool,
//     SUM and MAX are logical OR, PRODUCT and MIN logical AND.
//   - AVG: floating dtypes only (gloo has no AVG; NCCL's integer AVG truncates — refuse it
//     rather than pick a rounding). Reduce accumulates it as SUM, Divide finishes it.
//   - BAND, BOR, BXOR: integer dtypes and bool (on bool: logical AND, OR, XOR).
func Check(dt DType, op Op) error {
	if _, err := ElemSize(dt); err != nil {
		return err
	}
	switch op {
	case Sum, Product, Min, Max:
		return nil
	case Avg:
		if dt.IsFloating() {
			return nil
		}
		return fmt.Errorf("%w: AVG on %v (floating dtypes only)", ErrUnsupported, dt)
	case BAnd, BOr, BXor:
		if !dt.IsFloating() {
			return nil
		}
		return fmt.Errorf("%w: %v on %v (integer and bool dtypes only)", ErrUnsupported, op, dt)
	}
	return fmt.Errorf("%w: op %v", ErrUnsupported, op)
}

// Reduce computes dst[i] = dst[i] op src[i] for every element; AVG accumulates as SUM.
// len(dst) must equal len(src) and be a multiple of the element size; dst and src may be the
// same slice but must not otherwise overlap. float16/bfloat16 are computed in float32 and
// rounded to nearest-even; MIN/MAX propagate NaN (as torch.minimum/maximum).
func Reduce(dst, src []byte, dt DType, op Op) error {
	if err := Check(dt, op); err != nil {
		return err
	}
	es, _ := ElemSize(dt)
	if len(dst) != len(src) {
		return fmt.Errorf("%w: dst has %d bytes, src %d", ErrLength, len(dst), len(src))
	}
	if len(dst)%es != 0 {
		return fmt.Errorf("%w: %d bytes is not a whole number of %v elements (%d bytes each)", ErrLength, len(dst), dt, es)
	}
	if len(dst) == 0 {
		return nil
	}
	if useGo(dt, len(dst)) {
		goReduce2(dst, src, dt, op)
		return nil
	}
	cReduce2(dst, src, dt, op, active)
	return nil
}

// ReduceMany computes dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[k-1][i] in one pass over
// the inputs, which costs far less memory traffic than k-1 calls to Reduce. Every slice must
// have len(dst) bytes, a multiple of the element size, and there must be at least one source.
// dst may be the same slice as any source (typically srcs[0]); other overlaps are undefined.
// float16/bfloat16 accumulate in float32 across all inputs and are rounded once at the end, so
// the result can differ in the last bit from chaining Reduce (it is the more accurate one).
func ReduceMany(dst []byte, srcs [][]byte, dt DType, op Op) error {
	if err := Check(dt, op); err != nil {
		return err
	}
	es, _ := ElemSize(dt)
	if len(srcs) == 0 {
		return fmt.Errorf("%w: no source buffers", ErrLength)
	}
	for i, s := range srcs {
		if len(s) != len(dst) {
			return fmt.Errorf("%w: dst has %d bytes, srcs[%d] %d", ErrLength, len(dst), i, len(s))
		}
	}
	if len(dst)%es != 0 {
		return fmt.Errorf("%w: %d bytes is not a whole number of %v elements (%d bytes each)", ErrLength, len(dst), dt, es)
	}
	if len(dst) == 0 {
		return nil
	}
	if len(srcs) == 1 {
		if unsafe.SliceData(dst) != unsafe.SliceData(srcs[0]) {
			copy(dst, srcs[0])
		}
		return nil
	}
	if len(srcs) == 2 && unsafe.SliceData(dst) == unsafe.SliceData(srcs[0]) {
		return Reduce(dst, srcs[1], dt, op)
	}
	if useGo(dt, len(dst)) {
		goReduceMany(dst, srcs, dt, op)
		return nil
	}
	cReduceMany(dst, srcs, dt, op, active)
	return nil
}

// Divide computes dst[i] /= n, finishing an AVG over n contributions. dt must be floating
// (AVG is defined on floating dtypes only); float16/bfloat16 divide in float32 and round to
// nearest-even. n must be positive.
func Divide(dst []byte, dt DType, n int) error {
	if err := Check(dt, Avg); err != nil {
		return err
	}
	if n <= 0 {
		return fmt.Errorf("%w: divide by %d", ErrUnsupported, n)
	}
	es, _ := ElemSize(dt)
	if len(dst)%es != 0 {
		return fmt.Errorf("%w: %d bytes is not a whole number of %v elements (%d bytes each)", ErrLength, len(dst), dt, es)
	}
	if len(dst) == 0 || n == 1 {
		return nil
	}
	if useGo(dt, len(dst)) {
		goDivide(dst, dt, n)
		return nil
	}
	cDivide(dst, dt, n, active)
	return nil
}

// CopyStream copies min(len(dst), len(src)) bytes like copy, with non-temporal stores where
// the CPU has them: for data that is not read again soon (a backup of an op's input), it
// skips reading the destination's lines into the cache first and leaves the cache to the
// data that is. Returns the number of bytes copied.
func CopyStream(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n < 4096 {
		return copy(dst, src)
	}
	cCopyStream(dst[:n], src[:n])
	return n
}
