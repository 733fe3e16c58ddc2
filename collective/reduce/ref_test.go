package reduce

// A deliberately naive reference: element by element through encoding/binary, integers in
// 64 bits then truncated, 16-bit floats decoded and rounded through float64 arithmetic
// (math.Frexp/Ldexp/RoundToEven), independently of half.go.

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
)

var le = binary.LittleEndian

func refWidenF16(h uint16) float32  { return refWiden(h, 10, 15) }
func refWidenBF16(h uint16) float32 { return refWiden(h, 7, 127) }

// refWiden decodes a 16-bit float with a sign bit, mbits mantissa bits and the rest exponent
// (biased by ebias): all-ones exponents are inf and NaN, a zero exponent is subnormal.
func refWiden(h uint16, mbits, ebias int) float32 {
	ebits := 15 - mbits
	eMax := 1<<ebits - 1
	neg := h&0x8000 != 0
	e, m := int(h>>mbits)&eMax, float64(h&(1<<mbits-1))
	var v float64
	switch {
	case e == eMax && m != 0:
		return float32(math.NaN())
	case e == eMax:
		v = math.Inf(1)
	case e == 0:
		v = math.Ldexp(m, 1-ebias-mbits)
	default:
		v = math.Ldexp(1+m/float64(int(1)<<mbits), e-ebias)
	}
	if neg {
		v = -v
	}
	return float32(v)
}

// refNarrow rounds f to the nearest value with mbits mantissa bits and exponents down to
// emin (below: subnormal steps of 2^(emin-mbits)), ties to even; maxFinite and above the
// rounding overflow to inf. It returns the encoding for that format.
func refNarrow(f float32, mbits, emin, ebias int, maxFinite float64) uint16 {
	x := float64(f)
	ebits := 15 - mbits
	expAll := uint16(1)<<ebits - 1
	if math.IsNaN(x) {
		return expAll<<mbits | 1<<(mbits-1)
	}
	var sign uint16
	if math.Signbit(x) {
		sign, x = 0x8000, -x
	}
	if math.IsInf(x, 0) {
		return sign | expAll<<mbits
	}
	if x == 0 {
		return sign
	}
	_, exp := math.Frexp(x) // x in [2^(exp-1), 2^exp)
	e := max(exp-1, emin)
	ulp := math.Ldexp(1, e-mbits)
	v := math.RoundToEven(x/ulp) * ulp
	if v > maxFinite {
		return sign | expAll<<mbits
	}
	if v < math.Ldexp(1, emin) {
		return sign | uint16(v/math.Ldexp(1, emin-mbits))
	}
	fr, exp2 := math.Frexp(v)
	mant := (fr*2 - 1) * float64(int(1)<<mbits)
	return sign | uint16(exp2-1+ebias)<<mbits | uint16(mant)
}

func refNarrowF16(f float32) uint16 { return refNarrow(f, 10, -14, 15, 65504) }

func refNarrowBF16(f float32) uint16 {
	return refNarrow(f, 7, -126, 127, math.Ldexp(2-1.0/128, 127))
}

// refElem is one element as the reference sees it.
type refElem struct {
	i int64   // integers and bool (sign- or zero-extended)
	f float32 // float32 and 16-bit floats (widened)
	d float64 // float64
}

func refLoad(dt DType, b []byte, i int) refElem {
	switch dt {
	case Uint8, Bool:
		return refElem{i: int64(b[i])}
	case Int8:
		return refElem{i: int64(int8(b[i]))}
	case Int16:
		return refElem{i: int64(int16(le.Uint16(b[2*i:])))}
	case Int32:
		return refElem{i: int64(int32(le.Uint32(b[4*i:])))}
	case Int64:
		return refElem{i: int64(le.Uint64(b[8*i:]))}
	case Float16:
		return refElem{f: refWidenF16(le.Uint16(b[2*i:]))}
	case BFloat16:
		return refElem{f: refWidenBF16(le.Uint16(b[2*i:]))}
	case Float32:
		return refElem{f: math.Float32frombits(le.Uint32(b[4*i:]))}
	case Float64:
		return refElem{d: math.Float64frombits(le.Uint64(b[8*i:]))}
	}
	panic("dtype")
}

func refStore(dt DType, b []byte, i int, v refElem) {
	switch dt {
	case Uint8, Int8, Bool:
		b[i] = byte(v.i)
	case Int16:
		le.PutUint16(b[2*i:], uint16(v.i))
	case Int32:
		le.PutUint32(b[4*i:], uint32(v.i))
	case Int64:
		le.PutUint64(b[8*i:], uint64(v.i))
	case Float16:
		le.PutUint16(b[2*i:], refNarrowF16(v.f))
	case BFloat16:
		le.PutUint16(b[2*i:], refNarrowBF16(v.f))
	case Float32:
		le.PutUint32(b[4*i:], math.Float32bits(v.f))
	case Float64:
		le.PutUint64(b[8*i:], math.Float64bits(v.d))
	}
}

func isNaN32(f float32) bool { return f != f }

func refMinMax32(a, b float32, isMax bool) float32 {
	switch {
	case isNaN32(b):
		return b
	case isNaN32(a):
		return a
	case isMax && b > a, !isMax && b < a:
		return b
	}
	return a
}

func refMinMax64(a, b float64, isMax bool) float64 {
	switch {
	case math.IsNaN(b):
		return b
	case math.IsNaN(a):
		return a
	case isMax && b > a, !isMax && b < a:
		return b
	}
	return a
}

func refOp(dt DType, op Op, a, b refElem) refElem {
	switch dt {
	case Bool:
		x, y := a.i != 0, b.i != 0
		var r bool
		switch op {
		case Sum, Max, BOr:
			r = x || y
		case Product, Min, BAnd:
			r = x && y
		case BXor:
			r = x != y
		}
		if r {
			return refElem{i: 1}
		}
		return refElem{}
	case Uint8, Int8, Int16, Int32, Int64:
		x, y := a.i, b.i
		switch op {
		case Sum:
			return refElem{i: x + y} // wraps in 64 bits; truncated on store
		case Product:
			return refElem{i: int64(uint64(x) * uint64(y))}
		case Min:
			return refElem{i: min(x, y)}
		case Max:
			return refElem{i: max(x, y)}
		case BAnd:
			return refElem{i: x & y}
		case BOr:
			return refElem{i: x | y}
		case BXor:
			return refElem{i: x ^ y}
		}
	case Float64:
		x, y := a.d, b.d
		switch op {
		case Sum, Avg:
			return refElem{d: x + y}
		case Product:
			return refElem{d: x * y}
		case Min, Max:
			return refElem{d: refMinMax64(x, y, op == Max)}
		}
	default: // float32 and 16-bit floats, in float32
		x, y := a.f, b.f
		switch op {
		case Sum, Avg:
			return refElem{f: x + y}
		case Product:
			return refElem{f: x * y}
		case Min, Max:
			return refElem{f: refMinMax32(x, y, op == Max)}
		}
	}
	panic("op")
}

// refReduceMany folds srcs element by element (16-bit floats stay in float32 until the store).
func refReduceMany(dt DType, op Op, srcs [][]byte) []byte {
	es, _ := ElemSize(dt)
	out := make([]byte, len(srcs[0]))
	for i := 0; i < len(out)/es; i++ {
		acc := refLoad(dt, srcs[0], i)
		for _, s := range srcs[1:] {
			acc = refOp(dt, op, acc, refLoad(dt, s, i))
		}
		if len(srcs) == 1 {
			copy(out[i*es:(i+1)*es], srcs[0][i*es:])
			continue
		}
		refStore(dt, out, i, acc)
	}
	return out
}

func refDivide(dt DType, b []byte, n int) []byte {
	es, _ := ElemSize(dt)
	out := make([]byte, len(b))
	for i := 0; i < len(b)/es; i++ {
		e := refLoad(dt, b, i)
		e.f /= float32(n)
		e.d /= float64(n)
		refStore(dt, out, i, e)
	}
	return out
}

// sameElem compares element i, treating any two NaNs as equal.
func sameElem(dt DType, got, want []byte, i int) bool {
	es, _ := ElemSize(dt)
	g, w := got[i*es:(i+1)*es], want[i*es:(i+1)*es]
	switch dt {
	case Float16:
		gv, wv := le.Uint16(g), le.Uint16(w)
		if gv&0x7fff > 0x7c00 && wv&0x7fff > 0x7c00 {
			return true
		}
	case BFloat16:
		gv, wv := le.Uint16(g), le.Uint16(w)
		if gv&0x7fff > 0x7f80 && wv&0x7fff > 0x7f80 {
			return true
		}
	case Float32:
		if isNaN32(math.Float32frombits(le.Uint32(g))) && isNaN32(math.Float32frombits(le.Uint32(w))) {
			return true
		}
	case Float64:
		if math.IsNaN(math.Float64frombits(le.Uint64(g))) && math.IsNaN(math.Float64frombits(le.Uint64(w))) {
			return true
		}
	}
	return string(g) == string(w)
}

var (
	f16Edges = []uint16{0, 0x8000, 0x3c00, 0xbc00, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe00, 0x7bff,
		0xfbff, 0x0400, 0x8400, 0x0001, 0x8001, 0x03ff, 0x3555, 0x3800}
	bf16Edges = []uint16{0, 0x8000, 0x3f80, 0xbf80, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffc0, 0x7f7f,
		0xff7f, 0x0080, 0x8080, 0x0001, 0x8001, 0x007f, 0x3eab, 0x3f00}
	f32Edges = []uint32{0, 0x80000000, 0x3f800000, 0xbf800000, 0x7f800000, 0xff800000, 0x7fc00000,
		0x7f800001, 0xffc00001, 0x7f7fffff, 0xff7fffff, 0x00800000, 0x00000001, 0x807fffff,
		0x3f800001, 0x3effffff}
	f64Edges = []uint64{0, 1 << 63, 0x3ff0000000000000, 0xbff0000000000000, 0x7ff0000000000000,
		0xfff0000000000000, 0x7ff8000000000000, 0x7ff0000000000001, 0xfff8000000000001,
		0x7fefffffffffffff, 0x0010000000000000, 1, 0x800fffffffffffff, 0x3ff0000000000001}
)

// randElems returns n random elements of dt: edge values, values of similar magnitude (so
// sums and products round, ties included), and random bit patterns.
func randElems(r *rand.Rand, dt DType, n int) []byte {
	es, _ := ElemSize(dt)
	b := make([]byte, n*es)
	for i := 0; i < n; i++ {
		p := r.IntN(100)
		bits := r.Uint64()
		switch dt {
		case Bool:
			switch {
			case p < 45:
				b[i] = 0
			case p < 90:
				b[i] = 1
			default:
				b[i] = byte(bits)
			}
		case Uint8, Int8, Int16, Int32, Int64:
			if p < 25 {
				edges := []int64{0, 1, -1, 2, -2, math.MinInt64, math.MaxInt64, math.MinInt64 + 1,
					math.MaxInt64 - 1, 0x7f, 0x80, 0xff, 0x7fff, 0x8000, 0x7fffffff, 0x80000000}
				bits = uint64(edges[r.IntN(len(edges))])
				if r.IntN(2) == 0 { // the type's own min/max
					bits = uint64(int64(-1) << (es*8 - 1))
					if r.IntN(2) == 0 {
						bits = ^bits
					}
				}
			} else if p < 50 {
				bits = uint64(r.IntN(21) - 10)
			}
			for j := 0; j < es; j++ {
				b[i*es+j] = byte(bits >> (8 * j))
			}
		case Float16, BFloat16:
			edges, expShift, expMask := f16Edges, 10, uint64(0x1f)
			if dt == BFloat16 {
				edges, expShift, expMask = bf16Edges, 7, 0xff
			}
			v := uint16(bits)
			switch {
			case p < 15:
				v = edges[r.IntN(len(edges))]
			case p < 60: // exponent near the bias: sums and products round (and tie)
				e := expMask/2 - 2 + uint64(r.IntN(5))
				v = uint16(bits&0x8000) | uint16(e<<expShift) | uint16(bits>>16)&(1<<expShift-1)
			case p < 70: // subnormals
				v = uint16(bits&0x8000) | uint16(bits>>16)&(1<<expShift-1)
			}
			le.PutUint16(b[2*i:], v)
		case Float32:
			v := uint32(bits)
			switch {
			case p < 15:
				v = f32Edges[r.IntN(len(f32Edges))]
			case p < 65:
				v = math.Float32bits(float32(r.NormFloat64() * 100))
			}
			le.PutUint32(b[4*i:], v)
		case Float64:
			switch {
			case p < 15:
				bits = f64Edges[r.IntN(len(f64Edges))]
			case p < 65:
				bits = math.Float64bits(r.NormFloat64() * 100)
			}
			le.PutUint64(b[8*i:], bits)
		}
	}
	return b
}
