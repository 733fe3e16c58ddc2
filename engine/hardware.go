package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/mooncake-go/mooncake/engine/topology"
)

// What the errors of protocols and memory locations this build cannot drive say: what the
// protocol needs, and what this host has of it (read from /sys, /dev and /proc when the error
// is made, so the message names what is missing here: "no RDMA NIC", "no NVIDIA GPU", ...).

// hostProbe reads the host; tests point it at a fake tree and a fake GPU count.
type hostProbe struct {
	sys, dev, proc string
	nvidiaGPUs     func() int
}

func realHost() hostProbe {
	return hostProbe{sys: "/sys", dev: "/dev", proc: "/proc",
		nvidiaGPUs: func() int { return len(topology.Discover().GPUs) }}
}

// entries lists the names in dir (sorted), nil when it is missing or empty.
func entries(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(ents))
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// glob lists the base names of the paths matching pattern.
func glob(pattern string) []string {
	m, _ := filepath.Glob(pattern)
	out := make([]string, 0, len(m))
	for _, p := range m {
		out = append(out, filepath.Base(p))
	}
	sort.Strings(out)
	return out
}

// need is one kind of hardware a protocol or location needs: what (for "it needs ..."),
// found (what of it this host has, by name; nil = none) and absent (how we know there is none).
type need struct {
	what   string
	found  func(h hostProbe) []string
	absent string
}

func (h hostProbe) rdmaNICs() []string { return entries(filepath.Join(h.sys, "class/infiniband")) }

func (h hostProbe) efaNICs() []string {
	var out []string
	for _, n := range h.rdmaNICs() {
		drv, err := os.Readlink(filepath.Join(h.sys, "class/infiniband", n, "device/driver"))
		if err == nil && filepath.Base(drv) == "efa" {
			out = append(out, n)
		}
	}
	return out
}

func (h hostProbe) gpus() []string {
	n := 0
	if h.nvidiaGPUs != nil {
		n = h.nvidiaGPUs()
	}
	out := make([]string, n)
	for i := range out {
		out[i] = "cuda:" + strconv.Itoa(i)
	}
	return out
}

func exists(path string) []string {
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	return []string{path}
}

var (
	needRDMA = need{"an RDMA NIC (InfiniBand or RoCE)", hostProbe.rdmaNICs,
		"/sys/class/infiniband lists none"}
	needEFA = need{"an AWS EFA device", hostProbe.efaNICs,
		"no device in /sys/class/infiniband uses the efa driver"}
	needGPU = need{"an NVIDIA GPU", hostProbe.gpus,
		"NVML (libnvidia-ml) finds none"}
	needNVLink = need{"NVIDIA GPUs joined by NVLink", hostProbe.gpus,
		"NVML (libnvidia-ml) finds no NVIDIA GPU"}
	needMNNVL = need{"NVIDIA GPUs on a multi-node NVLink fabric (MNNVL)", hostProbe.gpus,
		"NVML (libnvidia-ml) finds no NVIDIA GPU"}
	needAMD = need{"an AMD GPU with ROCm", func(h hostProbe) []string {
		return exists(filepath.Join(h.dev, "kfd"))
	}, "/dev/kfd is absent"}
	needCXL = need{"a CXL memory device", func(h hostProbe) []string {
		return entries(filepath.Join(h.sys, "bus/cxl/devices"))
	}, "/sys/bus/cxl/devices lists none"}
	needAscend = need{"a Huawei Ascend NPU", func(h hostProbe) []string {
		return glob(filepath.Join(h.dev, "davinci[0-9]*"))
	}, "there is no /dev/davinci* device"}
	needGDS = need{"NVIDIA GPUDirect Storage (the nvidia-fs driver)", func(h hostProbe) []string {
		return exists(filepath.Join(h.proc, "driver/nvidia-fs"))
	}, "/proc/driver/nvidia-fs is absent"}
	needNVMeoF = need{"an NVMe-oF fabric (the nvme-fabrics driver)", func(h hostProbe) []string {
		return exists(filepath.Join(h.dev, "nvme-fabrics"))
	}, "/dev/nvme-fabrics is absent"}
	needMLU = need{"a Cambricon MLU", func(h hostProbe) []string {
		return glob(filepath.Join(h.dev, "cambricon_dev[0-9]*"))
	}, "there is no /dev/cambricon_dev* device"}
	needMUSA = need{"a Moore Threads GPU (MUSA)", func(h hostProbe) []string {
		return glob(filepath.Join(h.dev, "mtgpu*"))
	}, "there is no /dev/mtgpu* device"}
	needUB = need{"Huawei UB shared memory (UBShmem)", func(h hostProbe) []string {
		return glob(filepath.Join(h.dev, "ub*"))
	}, "there is no /dev/ub* device"}
)

// protocolNeeds: the protocols upstream Mooncake has that this build does not drive, and
// what each needs. Their names are accepted and fail with ErrNotSupported.
var protocolNeeds = map[string]need{
	"rdma": needRDMA, "barex": needRDMA, "efa": needEFA,
	"nvlink": needMNNVL, "mnnvl": needMNNVL, "nvlink_intra": needNVLink,
	"hip": needAMD, "cxl": needCXL, "ascend": needAscend, "hccl": needAscend,
	"gds": needGDS, "nvmeof": needNVMeoF, "ubshmem": needUB, "musa": needMUSA,
}

// deviceLocations: location prefixes of device memory ("cuda:0"), which this build cannot
// register: its transports copy with the CPU.
var deviceLocations = map[string]need{
	"cuda": needGPU, "gpu": needGPU, "hip": needAMD, "rocm": needAMD, "npu": needAscend,
	"ascend": needAscend, "mlu": needMLU, "musa": needMUSA,
}

// hostSays is what the host has of n: "this host has none: <how we know>" or "this host has
// <names>, but ...".
func (h hostProbe) hostSays(n need) (found []string, text string) {
	found = n.found(h)
	if len(found) == 0 {
		return nil, fmt.Sprintf("it needs %s and this host has none (%s)", n.what, n.absent)
	}
	return found, fmt.Sprintf("this host has %s (%s)", n.what, strings.Join(found, ", "))
}

// unsupportedProtocol is the error of New for a protocol of protocolNeeds.
func (h hostProbe) unsupportedProtocol(proto string) error {
	n := protocolNeeds[proto]
	found, says := h.hostSays(n)
	if found == nil {
		return fmt.Errorf("protocol %q: %w: %s; use protocol \"tcp\" (TCP across hosts, shared memory within one)",
			proto, ErrNotSupported, says)
	}
	return fmt.Errorf("protocol %q: %w: %s, but this build has no %s transport yet; use protocol \"tcp\" (TCP across hosts, shared memory within one)",
		proto, ErrNotSupported, says, proto)
}

// deviceLocation returns the error for registering memory at a device location ("cuda:0"),
// nil for host locations ("cpu:N", "*", anything else).
func (h hostProbe) deviceLocation(location string) error {
	kind, _, _ := strings.Cut(strings.ToLower(location), ":")
	n, ok := deviceLocations[kind]
	if !ok {
		return nil
	}
	found, says := h.hostSays(n)
	if found == nil {
		return fmt.Errorf("location %q: %w: registering device memory: %s; register host memory (location \"cpu:N\") and copy device data through it",
			location, ErrNotSupported, says)
	}
	return fmt.Errorf("location %q: %w: registering device memory: %s, but this build's transports copy with the CPU and cannot reach device memory; register host memory (location \"cpu:N\") and copy device data through it",
		location, ErrNotSupported, says)
}

func hasNeeds(proto string) bool {
	_, ok := protocolNeeds[proto]
	return ok
}

// knownUnsupported lists protocolNeeds' names, sorted and quoted.
func knownUnsupported() string {
	names := make([]string, 0, len(protocolNeeds))
	for p := range protocolNeeds {
		names = append(names, strconv.Quote(p))
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// CheckProtocol returns nil for the protocols this build drives ("tcp", "shm", "" = tcp) and,
// for any other, the ErrNotSupported error New gives: for upstream's hardware protocols it
// names what the protocol needs and what this host has of it. Callers that share an engine
// (the store's setup) use it to refuse a protocol with the same words.
func CheckProtocol(protocol string) error {
	proto := strings.ToLower(strings.TrimSpace(protocol))
	switch {
	case proto == "" || proto == "tcp" || proto == "shm":
		return nil
	case hasNeeds(proto):
		return realHost().unsupportedProtocol(proto)
	default:
		return fmt.Errorf("unknown protocol %q: %w (known: \"tcp\", \"shm\"; upstream's %s need hardware drivers this build does not have)",
			protocol, ErrNotSupported, knownUnsupported())
	}
}
