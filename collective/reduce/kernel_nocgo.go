//go:build !cgo || mooncake_purego

package reduce

// Without cgo (or with the mooncake_purego tag) only the pure Go kernels exist.

func bestLevel() level { return levelGo }

func availableLevels() []level { return []level{levelGo} }

func cReduce2(dst, src []byte, dt DType, op Op, _ level) { goReduce2(dst, src, dt, op) }

func cReduceMany(dst []byte, srcs [][]byte, dt DType, op Op, _ level) {
	goReduceMany(dst, srcs, dt, op)
}

func cDivide(dst []byte, dt DType, n int, _ level) { goDivide(dst, dt, n) }

func cNarrow(dst []byte, src []float32, dt DType, _ level) { goNarrow(dst, src, dt) }

func cCopyStream(dst, src []byte) { copy(dst, src) }
