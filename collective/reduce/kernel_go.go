package reduce

import "unsafe"

// Pure Go kernels: used for inputs below smallBytes, and for everything when the package is
// built without cgo or with the mooncake_purego tag. Same results as the C kernels.

type integer interface {
	~int8 | ~uint8 | ~int16 | ~int32 | ~int64
}

type floating interface{ ~float32 | ~float64 }

// view reinterprets b as a slice of T in native byte order. b need not be aligned: T has no
// pointers, which checkptr allows, and the supported CPUs load unaligned words.
func view[T integer | floating | ~uint16](b []byte) []T {
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(z)))
}

func goReduce2(dst, src []byte, dt DType, op Op) {
	switch dt {
	case Uint8:
		intOp(view[uint8](dst), view[uint8](src), op)
	case Int8:
		intOp(view[int8](dst), view[int8](src), op)
	case Int16:
		intOp(view[int16](dst), view[int16](src), op)
	case Int32:
		intOp(view[int32](dst), view[int32](src), op)
	case Int64:
		intOp(view[int64](dst), view[int64](src), op)
	case Float32:
		floatOp(view[float32](dst), view[float32](src), op)
	case Float64:
		floatOp(view[float64](dst), view[float64](src), op)
	case Bool:
		boolOp(dst, src, op)
	case Float16, BFloat16:
		var a, b [halfBlock]float32
		for off := 0; off < len(dst); off += 2 * halfBlock {
			d := dst[off:min(off+2*halfBlock, len(dst))]
			m := len(d) / 2
			widen(a[:m], d, dt)
			widen(b[:m], src[off:off+len(d)], dt)
			floatOp(a[:m], b[:m], op)
			narrow(d, a[:m], dt)
		}
	}
}

// halfBlock is the float32 working block, in elements, for float16/bfloat16.
const halfBlock = 256

// blockBytes is the working block of goReduceMany for other dtypes (a multiple of 8).
const blockBytes = 1024

func goReduceMany(dst []byte, srcs [][]byte, dt DType, op Op) {
	// Block by block through an accumulator, so dst may equal any source and 16-bit floats are
	// rounded once.
	if dt == Float16 || dt == BFloat16 {
		var acc, tmp [halfBlock]float32
		for off := 0; off < len(dst); off += 2 * halfBlock {
			end := min(off+2*halfBlock, len(dst))
			m := (end - off) / 2
			widen(acc[:m], srcs[0][off:end], dt)
			for _, s := range srcs[1:] {
				widen(tmp[:m], s[off:end], dt)
				floatOp(acc[:m], tmp[:m], op)
			}
			narrow(dst[off:end], acc[:m], dt)
		}
		return
	}
	var acc [blockBytes]byte
	for off := 0; off < len(dst); off += blockBytes {
		end := min(off+blockBytes, len(dst))
		a := acc[:end-off]
		copy(a, srcs[0][off:end])
		for _, s := range srcs[1:] {
			goReduce2(a, s[off:end], dt, op)
		}
		copy(dst[off:end], a)
	}
}

func goDivide(dst []byte, dt DType, n int) {
	switch dt {
	case Float32:
		d, v := view[float32](dst), float32(n)
		for i := range d {
			d[i] /= v
		}
	case Float64:
		d, v := view[float64](dst), float64(n)
		for i := range d {
			d[i] /= v
		}
	case Float16, BFloat16:
		var a [halfBlock]float32
		v := float32(n)
		for off := 0; off < len(dst); off += 2 * halfBlock {
			d := dst[off:min(off+2*halfBlock, len(dst))]
			m := len(d) / 2
			widen(a[:m], d, dt)
			for i := range a[:m] {
				a[i] /= v
			}
			narrow(d, a[:m], dt)
		}
	}
}

func widen(dst []float32, src []byte, dt DType) {
	s := view[uint16](src)[:len(dst)]
	if dt == Float16 {
		for i, h := range s {
			dst[i] = f16ToF32(h)
		}
		return
	}
	for i, h := range s {
		dst[i] = bf16ToF32(h)
	}
}

func narrow(dst []byte, src []float32, dt DType) {
	d := view[uint16](dst)[:len(src)]
	if dt == Float16 {
		for i, f := range src {
			d[i] = f32ToF16(f)
		}
		return
	}
	for i, f := range src {
		d[i] = f32ToBF16(f)
	}
}

// goNarrow is the pure Go counterpart of the cNarrow test hook.
func goNarrow(dst []byte, src []float32, dt DType) { narrow(dst, src, dt) }

func intOp[T integer](d, s []T, op Op) {
	s = s[:len(d)]
	switch op {
	case Sum:
		for i := range d {
			d[i] += s[i]
		}
	case Product:
		for i := range d {
			d[i] *= s[i]
		}
	case Min:
		for i := range d {
			if s[i] < d[i] {
				d[i] = s[i]
			}
		}
	case Max:
		for i := range d {
			if s[i] > d[i] {
				d[i] = s[i]
			}
		}
	case BAnd:
		for i := range d {
			d[i] &= s[i]
		}
	case BOr:
		for i := range d {
			d[i] |= s[i]
		}
	case BXor:
		for i := range d {
			d[i] ^= s[i]
		}
	}
}

// floatOp: AVG accumulates as SUM; MIN/MAX let a NaN in s win, then keep a NaN in d.
func floatOp[T floating](d, s []T, op Op) {
	s = s[:len(d)]
	switch op {
	case Sum, Avg:
		for i := range d {
			d[i] += s[i]
		}
	case Product:
		for i := range d {
			d[i] *= s[i]
		}
	case Min:
		for i, b := range s {
			if b < d[i] || b != b {
				d[i] = b
			}
		}
	case Max:
		for i, b := range s {
			if b > d[i] || b != b {
				d[i] = b
			}
		}
	}
}

// boolOp: SUM/MAX/BOR are logical OR, PRODUCT/MIN/BAND logical AND, BXOR logical XOR; the
// result is 0 or 1 whatever nonzero bytes the inputs hold.
func boolOp(d, s []byte, op Op) {
	s = s[:len(d)]
	switch op {
	case Sum, Max, BOr:
		for i := range d {
			d[i] = b2u(d[i]|s[i] != 0)
		}
	case Product, Min, BAnd:
		for i := range d {
			d[i] = b2u(d[i] != 0 && s[i] != 0)
		}
	case BXor:
		for i := range d {
			d[i] = b2u((d[i] != 0) != (s[i] != 0))
		}
	}
}

func b2u(b bool) byte {
	if b {
		return 1
	}
	return 0
}
