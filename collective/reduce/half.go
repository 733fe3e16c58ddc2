package reduce

import "math"

// Scalar float16/bfloat16 conversions. They match the C kernels bit for bit (NaN payloads
// aside): widening is exact, narrowing rounds to nearest-even, overflows to ±inf, keeps
// subnormals, and turns NaN into a quiet NaN.

func f16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	e := uint32(h>>10) & 0x1f
	m := uint32(h & 0x3ff)
	switch e {
	case 0x1f: // inf, NaN
		return math.Float32frombits(sign | 0x7f800000 | m<<13)
	case 0: // zero, subnormal: m * 2^-24
		return math.Float32frombits(sign | math.Float32bits(float32(m)*(1.0/(1<<24))))
	}
	return math.Float32frombits(sign | (e+112)<<23 | m<<13)
}

func f32ToF16(f float32) uint16 {
	x := math.Float32bits(f)
	sign := uint16(x>>16) & 0x8000
	x &= 0x7fffffff
	switch {
	case x > 0x7f800000: // NaN: quiet, payload truncated (as F16C)
		return sign | 0x7e00 | uint16(x>>13)&0x3ff
	case x >= 0x477ff000: // >= 65520 (the midpoint above the largest half) and inf
		return sign | 0x7c00
	case x >= 0x38800000: // normal half
		x -= 112 << 23
		return sign | uint16((x+0xfff+(x>>13)&1)>>13)
	}
	// Subnormal half: adding 0.5 makes the float32 ulp 2^-24, the half subnormal step, so the
	// FPU rounds to nearest-even; a carry lands exactly on the smallest normal (0x0400).
	v := math.Float32frombits(x) + 0.5
	return sign | uint16(math.Float32bits(v)-0x3f000000)
}

func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

func f32ToBF16(f float32) uint16 {
	x := math.Float32bits(f)
	if x&0x7fffffff > 0x7f800000 {
		return uint16(x>>16) | 0x40 // quiet NaN
	}
	return uint16((x + 0x7fff + (x>>16)&1) >> 16)
}
