//go:build cgo && linux

package topology

import (
	"path/filepath"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// gpus lists NVIDIA GPUs through NVML. nvml.Init dlopens libnvidia-ml.so.1 and fails
// cleanly where it is absent; a panic from a broken library is contained too.
func gpus() (out []GPU) {
	defer func() {
		if recover() != nil {
			out = nil
		}
	}()
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		return nil
	}
	defer nvml.Shutdown()
	n, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil
	}
	for i := 0; i < n; i++ {
		g := GPU{Index: i, NUMA: -1}
		if d, ret := nvml.DeviceGetHandleByIndex(i); ret == nvml.SUCCESS {
			if pci, ret := d.GetPciInfo(); ret == nvml.SUCCESS {
				id := strings.ToLower(strings.TrimRight(string(int8sToBytes(pci.BusIdLegacy[:])), "\x00"))
				if id == "" {
					id = strings.ToLower(strings.TrimRight(string(int8sToBytes(pci.BusId[:])), "\x00"))
				}
				g.PCI = id
				g.NUMA = readInt(filepath.Join(sysRoot, "bus/pci/devices", id, "numa_node"), -1)
			}
		}
		out = append(out, g)
	}
	return out
}

func int8sToBytes[T ~int8 | ~uint8](s []T) []byte {
	b := make([]byte, 0, len(s))
	for _, c := range s {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return b
}
