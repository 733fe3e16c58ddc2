package reduce

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

var (
	allDTypes = []DType{Uint8, Int8, Int16, Int32, Int64, Float16, Float32, Float64, Bool, BFloat16}
	allOps    = []Op{Sum, Avg, Product, Min, Max, BAnd, BOr, BXor}
	// Element counts around every vector/unroll boundary (AVX-512 f64: 8 lanes, x4 unroll).
	testLens = []int{0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129,
		255, 256, 257, 511, 513, 1000, 4099}
)

// useLevel runs the kernels of level l for every size (smallBytes 0) until the test ends.
func useLevel(t testing.TB, l level) {
	oldActive, oldSmall, oldHalf := active, smallBytes, smallHalfBytes
	active, smallBytes, smallHalfBytes = l, 0, 0
	t.Cleanup(func() { active, smallBytes, smallHalfBytes = oldActive, oldSmall, oldHalf })
}

// forEachLevel runs f once per available level, plus once with the default dispatch.
func forEachLevel(t *testing.T, f func(t *testing.T)) {
	for _, l := range availableLevels() {
		t.Run(l.String(), func(t *testing.T) {
			useLevel(t, l)
			f(t)
		})
	}
	t.Run("default", f)
}

// misaligned copies b to an offset within a larger buffer, so the kernels see unaligned data.
func misaligned(b []byte, off int) []byte {
	buf := make([]byte, len(b)+off+8)
	s := buf[off : off+len(b) : off+len(b)]
	copy(s, b)
	return s
}

func checkSame(t *testing.T, dt DType, got, want []byte, what string, inputs ...[]byte) {
	t.Helper()
	es, _ := ElemSize(dt)
	for i := 0; i < len(want)/es; i++ {
		if !sameElem(dt, got, want, i) {
			var in []string
			for _, b := range inputs {
				in = append(in, fmt.Sprintf("%x", b[i*es:(i+1)*es]))
			}
			t.Fatalf("%s: element %d of %d: got %x, want %x (inputs %s)", what, i, len(want)/es,
				got[i*es:(i+1)*es], want[i*es:(i+1)*es], strings.Join(in, " "))
		}
	}
}

func TestReduce(t *testing.T) {
	offsets := []int{0, 1, 3}
	if testing.Short() {
		offsets = []int{1}
	}
	forEachLevel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		for _, dt := range allDTypes {
			for _, op := range allOps {
				if Check(dt, op) != nil {
					continue
				}
				for _, n := range testLens {
					for _, off := range offsets {
						a, b := randElems(r, dt, n), randElems(r, dt, n)
						want := refReduceMany(dt, op, [][]byte{a, b})
						dst, src := misaligned(a, off), misaligned(b, 2*off)
						if err := Reduce(dst, src, dt, op); err != nil {
							t.Fatal(err)
						}
						checkSame(t, dt, dst, want, fmt.Sprintf("%v %v n=%d off=%d", dt, op, n, off), a, b)
						if string(src) != string(b) {
							t.Fatalf("%v %v: src modified", dt, op)
						}
						// dst and src the same slice: x op x.
						self := misaligned(a, off)
						if err := Reduce(self, self, dt, op); err != nil {
							t.Fatal(err)
						}
						checkSame(t, dt, self, refReduceMany(dt, op, [][]byte{a, a}), fmt.Sprintf("%v %v self n=%d", dt, op, n), a)
					}
				}
			}
		}
	})
}

func TestReduceMany(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(3, 4))
		for _, dt := range allDTypes {
			for _, op := range allOps {
				if Check(dt, op) != nil {
					continue
				}
				ks, ns := []int{1, 2, 3, 4, 7, 17}, []int{0, 1, 5, 33, 129, 257, 700, 2053}
				if testing.Short() {
					ks, ns = []int{1, 2, 3, 17}, []int{0, 5, 33, 129, 700}
				}
				for _, k := range ks {
					for _, n := range ns {
						in := make([][]byte, k)
						for j := range in {
							in[j] = randElems(r, dt, n)
						}
						want := refReduceMany(dt, op, in)
						what := fmt.Sprintf("%v %v k=%d n=%d", dt, op, k, n)
						// Separate dst, unaligned sources.
						srcs := make([][]byte, k)
						for j := range in {
							srcs[j] = misaligned(in[j], j%4)
						}
						dst := make([]byte, len(want))
						if err := ReduceMany(dst, srcs, dt, op); err != nil {
							t.Fatal(err)
						}
						checkSame(t, dt, dst, want, what+" dst apart", in...)
						// dst == srcs[0], then dst == the last source.
						for _, alias := range []int{0, k - 1} {
							for j := range in {
								srcs[j] = misaligned(in[j], 1)
							}
							if err := ReduceMany(srcs[alias], srcs, dt, op); err != nil {
								t.Fatal(err)
							}
							checkSame(t, dt, srcs[alias], want, fmt.Sprintf("%s dst=srcs[%d]", what, alias), in...)
						}
					}
				}
			}
		}
	})
}

func TestDivide(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(5, 6))
		for _, dt := range []DType{Float16, BFloat16, Float32, Float64} {
			for _, div := range []int{1, 2, 3, 7, 10, 1000} {
				for _, n := range testLens {
					a := randElems(r, dt, n)
					want := refDivide(dt, a, div)
					dst := misaligned(a, 1)
					if err := Divide(dst, dt, div); err != nil {
						t.Fatal(err)
					}
					checkSame(t, dt, dst, want, fmt.Sprintf("%v /%d n=%d", dt, div, n), a)
				}
			}
		}
	})
}

// TestAvg runs AVG the way a collective does: ReduceMany as SUM, then Divide.
func TestAvg(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		vals := []float32{1, 2, 4, 8.5}
		for _, dt := range []DType{Float16, BFloat16, Float32, Float64} {
			es, _ := ElemSize(dt)
			srcs := make([][]byte, len(vals))
			for j, v := range vals {
				srcs[j] = make([]byte, 300*es)
				for i := 0; i < 300; i++ {
					refStore(dt, srcs[j], i, refElem{f: v, d: float64(v)})
				}
			}
			dst := make([]byte, 300*es)
			if err := ReduceMany(dst, srcs, dt, Avg); err != nil {
				t.Fatal(err)
			}
			if err := Divide(dst, dt, len(vals)); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 300; i++ {
				e := refLoad(dt, dst, i)
				if got := max(float64(e.f), e.d); got != 3.875 {
					t.Fatalf("%v AVG element %d = %v, want 3.875", dt, i, got)
				}
			}
		}
	})
}

// TestRoundTrip16 puts every float16 and bfloat16 bit pattern through the kernels' widening
// and narrowing: x + (-0) and max(x, x) must give x back (any NaN for a NaN).
func TestRoundTrip16(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		for _, dt := range []DType{Float16, BFloat16} {
			all := make([]byte, 2*65536)
			negZero := make([]byte, 2*65536)
			for i := 0; i < 65536; i++ {
				le.PutUint16(all[2*i:], uint16(i))
				le.PutUint16(negZero[2*i:], 0x8000)
			}
			for _, op := range []Op{Sum, Max, Min} {
				dst := append([]byte(nil), all...)
				src := negZero
				if op != Sum {
					src = all
				}
				if err := Reduce(dst, src, dt, op); err != nil {
					t.Fatal(err)
				}
				checkSame(t, dt, dst, all, fmt.Sprintf("%v %v round trip", dt, op), all)
			}
		}
	})
}

// TestWiden16 compares the Go widening with the reference for every bit pattern.
func TestWiden16(t *testing.T) {
	for i := 0; i < 65536; i++ {
		h := uint16(i)
		for _, c := range []struct {
			name     string
			got, ref float32
		}{{"f16", f16ToF32(h), refWidenF16(h)}, {"bf16", bf16ToF32(h), refWidenBF16(h)}} {
			if isNaN32(c.got) != isNaN32(c.ref) || !isNaN32(c.ref) && math.Float32bits(c.got) != math.Float32bits(c.ref) {
				t.Fatalf("%s widen %#04x: got %v (%#x), want %v", c.name, h, c.got, math.Float32bits(c.got), c.ref)
			}
		}
	}
}

// TestNarrow checks float32 -> float16/bfloat16 rounding, at every level, against the float64
// reference: every float32 whose low bits sit at or next to a rounding boundary of either
// format (ties, just below, just above), for every sign/exponent/high-mantissa pattern, and
// random values.
func TestNarrow(t *testing.T) {
	var in []float32
	lows := []uint32{0, 1, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x7fff, 0x8000, 0x8001, 0xffff, 0x2000, 0x3000}
	step := uint32(1 << 16)
	if testing.Short() {
		step = 1 << 19
	}
	for hi := uint32(0); ; hi += step {
		for _, lo := range lows {
			in = append(in, math.Float32frombits(hi|lo))
		}
		if hi > math.MaxUint32-step {
			break
		}
	}
	r := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < 1<<18; i++ {
		in = append(in, math.Float32frombits(r.Uint32()))
	}
	levels := availableLevels()
	for _, dt := range []DType{Float16, BFloat16} {
		ref := refNarrowF16
		if dt == BFloat16 {
			ref = refNarrowBF16
		}
		want := make([]byte, 2*len(in))
		for i, f := range in {
			le.PutUint16(want[2*i:], ref(f))
		}
		for _, l := range levels {
			got := make([]byte, 2*len(in))
			if l == levelGo {
				goNarrow(got, in, dt)
			} else {
				cNarrow(got, in, dt, l)
			}
			for i := range in {
				if !sameElem(dt, got, want, i) {
					t.Fatalf("%v %v narrow %v (%#08x): got %#04x, want %#04x", l, dt, in[i],
						math.Float32bits(in[i]), le.Uint16(got[2*i:]), le.Uint16(want[2*i:]))
				}
			}
		}
	}
}

// TestNaNPropagation pins torch.minimum/maximum semantics: a NaN on either side wins.
func TestNaNPropagation(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		nan := math.Float32frombits(0x7fc00000)
		a := []float32{nan, 1, nan, -1, 2}
		b := []float32{1, nan, nan, 3, -5}
		for _, op := range []Op{Min, Max} {
			dst := append([]byte(nil), f32Bytes(a)...)
			if err := Reduce(dst, f32Bytes(b), Float32, op); err != nil {
				t.Fatal(err)
			}
			got := view[float32](dst)
			for i := 0; i < 3; i++ {
				if !isNaN32(got[i]) {
					t.Errorf("%v(%v, %v) = %v, want NaN", op, a[i], b[i], got[i])
				}
			}
			if lo, hi := got[3], got[4]; op == Min && (lo != -1 || hi != -5) || op == Max && (lo != 3 || hi != 2) {
				t.Errorf("%v: got %v", op, got[3:])
			}
		}
	})
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		le.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

// TestIntegerWrap pins two's-complement wrap-around for SUM and PRODUCT.
func TestIntegerWrap(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		a := []byte{127, 0x80, 200, 16}
		b := []byte{1, 0xff, 100, 16}
		for _, tc := range []struct {
			dt   DType
			op   Op
			want []byte
		}{
			{Int8, Sum, []byte{0x80, 0x7f, 44, 32}},
			{Uint8, Product, []byte{127, 0x80, 32, 0}},
			{Uint8, Min, []byte{1, 0x80, 100, 16}},
			{Int8, Min, []byte{1, 0x80, 200, 16}},
		} {
			dst := append([]byte(nil), a...)
			if err := Reduce(dst, b, tc.dt, tc.op); err != nil {
				t.Fatal(err)
			}
			if string(dst) != string(tc.want) {
				t.Errorf("%v %v = %v, want %v", tc.dt, tc.op, dst, tc.want)
			}
		}
	})
}

func TestBoolSemantics(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		a := []byte{0, 0, 1, 1, 2, 0}
		b := []byte{0, 1, 0, 1, 1, 255}
		for op, want := range map[Op][]byte{
			Sum: {0, 1, 1, 1, 1, 1}, Max: {0, 1, 1, 1, 1, 1}, BOr: {0, 1, 1, 1, 1, 1},
			Product: {0, 0, 0, 1, 1, 0}, Min: {0, 0, 0, 1, 1, 0}, BAnd: {0, 0, 0, 1, 1, 0},
			BXor: {0, 1, 1, 0, 0, 1},
		} {
			dst := append([]byte(nil), a...)
			if err := Reduce(dst, b, Bool, op); err != nil {
				t.Fatal(err)
			}
			if string(dst) != string(want) {
				t.Errorf("bool %v = %v, want %v", op, dst, want)
			}
		}
	})
}

func TestErrors(t *testing.T) {
	cases := []struct {
		name    string
		err     error
		is      error
		mention string
	}{
		{"unknown dtype", Check(DType(9), Sum), ErrUnsupported, "ScalarType(9)"},
		{"unknown op", Check(Float32, Op(8)), ErrUnsupported, "ReduceOp(8)"},
		{"avg on int", Check(Int32, Avg), ErrUnsupported, "AVG on int32"},
		{"avg on bool", Check(Bool, Avg), ErrUnsupported, "bool"},
		{"band on float", Check(BFloat16, BAnd), ErrUnsupported, "BAND on bfloat16"},
		{"bxor on float", Reduce(make([]byte, 8), make([]byte, 8), Float64, BXor), ErrUnsupported, "BXOR on float64"},
		{"elem size", func() error { _, err := ElemSize(DType(-1)); return err }(), ErrUnsupported, "ScalarType(-1)"},
		{"length mismatch", Reduce(make([]byte, 8), make([]byte, 4), Float32, Sum), ErrLength, "dst has 8 bytes, src 4"},
		{"partial element", Reduce(make([]byte, 6), make([]byte, 6), Float32, Sum), ErrLength, "6 bytes is not a whole number of float32"},
		{"many: no srcs", ReduceMany(make([]byte, 4), nil, Float32, Sum), ErrLength, "no source"},
		{"many: mismatch", ReduceMany(make([]byte, 4), [][]byte{make([]byte, 4), make([]byte, 8)}, Float32, Sum), ErrLength, "srcs[1] 8"},
		{"many: partial", ReduceMany(make([]byte, 3), [][]byte{make([]byte, 3)}, Int16, Sum), ErrLength, "int16"},
		{"many: bad op", ReduceMany(make([]byte, 4), [][]byte{make([]byte, 4)}, Float32, BOr), ErrUnsupported, "BOR"},
		{"divide int", Divide(make([]byte, 4), Int32, 2), ErrUnsupported, "int32"},
		{"divide zero", Divide(make([]byte, 4), Float32, 0), ErrUnsupported, "divide by 0"},
		{"divide partial", Divide(make([]byte, 5), Float32, 2), ErrLength, "5 bytes"},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.is) {
			t.Errorf("%s: err = %v, want %v", c.name, c.err, c.is)
		} else if !strings.Contains(c.err.Error(), c.mention) {
			t.Errorf("%s: %q does not mention %q", c.name, c.err, c.mention)
		}
	}
	for _, dt := range allDTypes {
		for _, op := range allOps {
			err := Check(dt, op)
			bitwise := op == BAnd || op == BOr || op == BXor
			wantOK := !(bitwise && dt.IsFloating()) && !(op == Avg && !dt.IsFloating())
			if (err == nil) != wantOK {
				t.Errorf("Check(%v, %v) = %v", dt, op, err)
			}
		}
	}
}

func TestNames(t *testing.T) {
	want := map[DType]string{0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16",
		6: "float32", 7: "float64", 11: "bool", 15: "bfloat16", 8: "ScalarType(8)"}
	for dt, s := range want {
		if dt.String() != s {
			t.Errorf("DType(%d) = %q, want %q", int32(dt), dt.String(), s)
		}
	}
	for i, s := range []string{"SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "ReduceOp(8)"} {
		if got := Op(i).String(); got != s {
			t.Errorf("Op(%d) = %q, want %q", i, got, s)
		}
	}
	sizes := map[DType]int{Uint8: 1, Int8: 1, Bool: 1, Int16: 2, Float16: 2, BFloat16: 2, Int32: 4, Float32: 4, Int64: 8, Float64: 8}
	for dt, n := range sizes {
		if got, err := ElemSize(dt); got != n || err != nil {
			t.Errorf("ElemSize(%v) = %d, %v", dt, got, err)
		}
	}
	t.Logf("kernel: %s, available: %v", Kernel(), availableLevels())
}

func TestCopyStream(t *testing.T) {
	src := make([]byte, 70003)
	for i := range src {
		src[i] = byte(i * 7)
	}
	for _, n := range []int{0, 1, 100, 4095, 4096, 5000, 65536, 69999} {
		for _, off := range []int{0, 1, 15, 33} {
			dst := make([]byte, n+off+8)
			for i := range dst {
				dst[i] = 0xee
			}
			if got := CopyStream(dst[off:off+n], src[3:]); got != n {
				t.Fatalf("n=%d off=%d: copied %d", n, off, got)
			}
			if !bytes.Equal(dst[off:off+n], src[3:3+n]) {
				t.Fatalf("n=%d off=%d: wrong bytes", n, off)
			}
			for i, b := range append(dst[:off:off], dst[off+n:]...) {
				if b != 0xee {
					t.Fatalf("n=%d off=%d: byte %d outside the copy written", n, off, i)
				}
			}
		}
	}
}

// TestUseKernel: MOONCAKE_REDUCE_KERNEL's names select an available level; others keep the best.
func TestUseKernel(t *testing.T) {
	old := active
	t.Cleanup(func() { active = old })
	best := bestLevel()
	if !UseKernel("go") || Kernel() != "go" {
		t.Fatalf("UseKernel(go): Kernel() = %s", Kernel())
	}
	if UseKernel("nonsense") || Kernel() != best.String() {
		t.Fatalf("UseKernel(nonsense): Kernel() = %s, want %s", Kernel(), best)
	}
	if UseKernel("") || Kernel() != best.String() {
		t.Fatalf("UseKernel(\"\"): Kernel() = %s, want %s", Kernel(), best)
	}
}
