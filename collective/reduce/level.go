package reduce

// level is a kernel implementation.
type level int

const (
	levelGo       level = 0 // pure Go (kernel_go.go)
	levelPortable level = 1 // scalar C, compiled for the build's baseline
	levelAVX2     level = 2 // C, AVX2 + FMA + F16C
	levelAVX512   level = 3 // C, AVX-512 F/BW/DQ/VL
)

func (l level) String() string {
	switch l {
	case levelGo:
		return "go"
	case levelPortable:
		return "portable"
	case levelAVX2:
		return "avx2"
	case levelAVX512:
		return "avx512"
	}
	return "unknown"
}

// Inputs shorter than smallBytes (smallHalfBytes for float16/bfloat16, whose conversions are
// slow in Go) run the pure Go kernels whatever the level: a cgo call costs tens of nanoseconds,
// in which Go handles that many bytes. Measured by BenchmarkSmall.
var (
	smallBytes     = 512
	smallHalfBytes = 32
)

// useGo reports whether an input of n bytes of dt goes to the pure Go kernels.
func useGo(dt DType, n int) bool {
	if active == levelGo {
		return true
	}
	if dt == Float16 || dt == BFloat16 {
		return n < smallHalfBytes
	}
	return n < smallBytes
}

// active is the level used for inputs of smallBytes and more: the best the CPU supports, or
// the one UseKernel chose.
var active = bestLevel()

// UseKernel makes the kernels named ("go", "portable", "avx2", "avx512": one the CPU has)
// the ones used for large inputs, for debugging and comparisons, and reports whether it did;
// "" or another name keeps the best level. The library calls it once at load, before any
// reduction runs, with MOONCAKE_REDUCE_KERNEL; it is not safe to call while reductions run.
func UseKernel(name string) bool {
	best := bestLevel()
	for l := levelGo; l <= best; l++ {
		if name != "" && l.String() == name {
			active = l
			return true
		}
	}
	active = best
	return false
}

// Kernel names the kernels in use for large inputs: "avx512", "avx2", "portable" (scalar C)
// or "go" (pure Go: built without cgo, with the mooncake_purego tag, or chosen through
// UseKernel, which the library calls with MOONCAKE_REDUCE_KERNEL).
func Kernel() string { return active.String() }
