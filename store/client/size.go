package client

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSize parses a human size as Mooncake's flags take it: "4 GB", "512MB", "1.5GiB", "4096".
// Units are binary (1 KB = 1024 bytes), case-insensitive, with optional "i" and "B".
func ParseSize(s string) (uint64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "" {
		return 0, fmt.Errorf("empty size")
	}
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.TrimSpace(t[i:])
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("bad size %q: want a number with an optional unit (KB, MB, GB, TB)", s)
	}
	unit = strings.TrimSuffix(strings.TrimSuffix(unit, "b"), "i")
	mult := map[string]float64{"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
	m, ok := mult[unit]
	if !ok {
		return 0, fmt.Errorf("bad size %q: unknown unit", s)
	}
	return uint64(f * m), nil
}
