package reduce

import "os"

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

// active is the level used for inputs of smallBytes and more.
var active = defaultLevel()

// defaultLevel returns the best level the CPU supports, unless MOONCAKE_REDUCE_KERNEL names
// an available one ("go", "portable", "avx2", "avx512"), for debugging and comparisons.
func defaultLevel() level {
	best := bestLevel()
	if want := os.Getenv("MOONCAKE_REDUCE_KERNEL"); want != "" {
		for l := levelGo; l <= best; l++ {
			if l.String() == want {
				return l
			}
		}
	}
	return best
}

// Kernel names the kernels in use for large inputs: "avx512", "avx2", "portable" (scalar C)
// or "go" (pure Go: built without cgo, with the mooncake_purego tag, or chosen through
// MOONCAKE_REDUCE_KERNEL).
func Kernel() string { return active.String() }
