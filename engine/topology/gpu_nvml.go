package topology

import (
	"path/filepath"
	"strings"
	"sync"

	"github.com/ebitengine/purego"
)

// NVML is loaded at run time with purego (dlopen), never linked: a library built with
// go-nvml's cgo bindings carries undefined nvml* symbols, which makes dlopen of
// libmooncake.so fail on every host without the NVIDIA driver. Here a host without
// libnvidia-ml simply reports no GPUs.

const nvmlSuccess = 0

var (
	nvmlOnce sync.Once
	nvmlLib  uintptr
)

func loadNVML() uintptr {
	nvmlOnce.Do(func() {
		for _, name := range []string{"libnvidia-ml.so.1", "libnvidia-ml.so"} {
			if h, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_LOCAL); err == nil {
				nvmlLib = h
				return
			}
		}
	})
	return nvmlLib
}

// gpus lists NVIDIA GPUs through NVML with their PCI bus id and NUMA node; nil where NVML is
// absent or broken (a panic from a broken library is contained too).
func gpus() (out []GPU) {
	defer func() {
		if recover() != nil {
			out = nil
		}
	}()
	lib := loadNVML()
	if lib == 0 {
		return nil
	}
	var (
		initFn     func() int32
		shutdownFn func() int32
		countFn    func(*uint32) int32
		handleFn   func(uint32, *uintptr) int32
		pciFn      func(uintptr, *[128]byte) int32
	)
	purego.RegisterLibFunc(&initFn, lib, "nvmlInit_v2")
	purego.RegisterLibFunc(&shutdownFn, lib, "nvmlShutdown")
	purego.RegisterLibFunc(&countFn, lib, "nvmlDeviceGetCount_v2")
	purego.RegisterLibFunc(&handleFn, lib, "nvmlDeviceGetHandleByIndex_v2")
	purego.RegisterLibFunc(&pciFn, lib, "nvmlDeviceGetPciInfo_v3")
	if initFn() != nvmlSuccess {
		return nil
	}
	defer shutdownFn()
	var n uint32
	if countFn(&n) != nvmlSuccess {
		return nil
	}
	for i := uint32(0); i < n; i++ {
		g := GPU{Index: int(i), NUMA: -1}
		var h uintptr
		if handleFn(i, &h) == nvmlSuccess {
			// nvmlPciInfo_t: char busIdLegacy[16]; 5 x unsigned int; char busId[32].
			var pci [128]byte
			if pciFn(h, &pci) == nvmlSuccess {
				id := cString(pci[36:68])
				if id == "" {
					id = cString(pci[:16])
				}
				id = strings.ToLower(id)
				// sysfs names PCI devices with a 4-digit domain; NVML uses 8.
				if len(id) == 16 && strings.HasPrefix(id, "0000") {
					id = id[4:]
				}
				g.PCI = id
				g.NUMA = readInt(filepath.Join(sysRoot, "bus/pci/devices", id, "numa_node"), -1)
			}
		}
		out = append(out, g)
	}
	return out
}

func cString(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}
