package client

import (
	"os"
	"strconv"
	"strings"

	"github.com/mooncake-go/mooncake/internal/memview"
)

// populateMin is the smallest destination populated before a copy. Smaller buffers mostly come
// from memory the allocator reuses (already faulted in), where populating only costs a page-table
// walk; from 32 MiB on (glibc's largest mmap threshold) a buffer is a fresh mapping every time.
const populateMin = 32 << 20

// populateView faults a large copy destination in with one call (best effort).
func populateView(b []byte, write bool) {
	if len(b) >= populateMin {
		memview.Populate(memview.Addr(b), uint64(len(b)), write)
	}
}

// Prefault says whether a mounted segment is populated when allocated (Config.Prefault,
// MC_STORE_PREFAULT).
type Prefault int

const (
	PrefaultAuto Prefault = iota // when the segment fits in half the available memory
	PrefaultOff                  // never (MC_STORE_PREFAULT=0)
	PrefaultOn                   // always (MC_STORE_PREFAULT=1)
)

// prefaultSegment reports whether a mounted segment of n bytes is populated when allocated, so
// puts do not pay a page fault per 4 KiB of fresh replica memory (as RDMA registration pins and
// faults in upstream Mooncake's segments). It is skipped when the segment exceeds half of the
// memory available now (committing it all up front could push the host into reclaim or OOM);
// PrefaultOff (MC_STORE_PREFAULT=0) turns it off, PrefaultOn (=1) forces it.
func prefaultSegment(mode Prefault, n uint64) bool {
	switch mode {
	case PrefaultOff:
		return false
	case PrefaultOn:
		return true
	}
	avail, ok := memAvailable()
	return ok && n <= avail/2
}

// memAvailable is MemAvailable from /proc/meminfo, in bytes.
func memAvailable() (uint64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0, false
			}
			kb, err := strconv.ParseUint(f[0], 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}
