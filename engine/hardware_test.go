package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeHost makes a /sys, /dev and /proc tree under a temp dir with the given files (paths
// relative to the tree; a value starting with "->" makes a symlink to the rest).
func fakeHost(t *testing.T, gpus int, files map[string]string) hostProbe {
	t.Helper()
	root := t.TempDir()
	for p, v := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if target, ok := strings.CutPrefix(v, "->"); ok {
			err = os.Symlink(target, full)
		} else {
			err = os.WriteFile(full, []byte(v), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return hostProbe{sys: filepath.Join(root, "sys"), dev: filepath.Join(root, "dev"),
		proc: filepath.Join(root, "proc"), nvidiaGPUs: func() int { return gpus }}
}

const useTCP = `; use protocol "tcp" (TCP across hosts, shared memory within one)`

func TestUnsupportedProtocolNamesWhatIsMissing(t *testing.T) {
	bare := fakeHost(t, 0, nil)
	for proto, want := range map[string]string{
		"rdma":         `it needs an RDMA NIC (InfiniBand or RoCE) and this host has none (/sys/class/infiniband lists none)`,
		"barex":        `it needs an RDMA NIC (InfiniBand or RoCE) and this host has none (/sys/class/infiniband lists none)`,
		"efa":          `it needs an AWS EFA device and this host has none (no device in /sys/class/infiniband uses the efa driver)`,
		"nvlink":       `it needs NVIDIA GPUs on a multi-node NVLink fabric (MNNVL) and this host has none (NVML (libnvidia-ml) finds no NVIDIA GPU)`,
		"nvlink_intra": `it needs NVIDIA GPUs joined by NVLink and this host has none (NVML (libnvidia-ml) finds no NVIDIA GPU)`,
		"hip":          `it needs an AMD GPU with ROCm and this host has none (/dev/kfd is absent)`,
		"cxl":          `it needs a CXL memory device and this host has none (/sys/bus/cxl/devices lists none)`,
		"ascend":       `it needs a Huawei Ascend NPU and this host has none (there is no /dev/davinci* device)`,
		"gds":          `it needs NVIDIA GPUDirect Storage (the nvidia-fs driver) and this host has none (/proc/driver/nvidia-fs is absent)`,
	} {
		err := bare.unsupportedProtocol(proto)
		full := `protocol "` + proto + `": not supported on this host: ` + want + useTCP
		if !errors.Is(err, ErrNotSupported) || err.Error() != full {
			t.Errorf("%s:\n got %v\nwant %s", proto, err, full)
		}
	}
}

func TestUnsupportedProtocolOnAHostThatHasTheHardware(t *testing.T) {
	h := fakeHost(t, 2, map[string]string{
		"sys/class/infiniband/mlx5_1/device/driver": "->/bus/pci/drivers/mlx5_core",
		"sys/class/infiniband/mlx5_0/device/driver": "->/bus/pci/drivers/mlx5_core",
		"sys/class/infiniband/efa_0/device/driver":  "->/bus/pci/drivers/efa",
		"sys/bus/cxl/devices/mem0":                  "",
		"dev/kfd":                                   "",
	})
	for proto, want := range map[string]string{
		"rdma":         `this host has an RDMA NIC (InfiniBand or RoCE) (efa_0, mlx5_0, mlx5_1), but this build has no rdma transport yet`,
		"efa":          `this host has an AWS EFA device (efa_0), but this build has no efa transport yet`,
		"nvlink_intra": `this host has NVIDIA GPUs joined by NVLink (cuda:0, cuda:1), but this build has no nvlink_intra transport yet`,
		"cxl":          `this host has a CXL memory device (mem0), but this build has no cxl transport yet`,
	} {
		full := `protocol "` + proto + `": not supported on this host: ` + want + useTCP
		if err := h.unsupportedProtocol(proto); !errors.Is(err, ErrNotSupported) || err.Error() != full {
			t.Errorf("%s:\n got %v\nwant %s", proto, err, full)
		}
	}
	if err := h.deviceLocation("cuda:1"); err == nil || err.Error() != `location "cuda:1": not supported on this host: registering device memory: this host has an NVIDIA GPU (cuda:0, cuda:1), but this build's transports copy with the CPU and cannot reach device memory; register host memory (location "cpu:N") and copy device data through it` {
		t.Errorf("cuda:1 with GPUs: %v", err)
	}
}

func TestDeviceLocations(t *testing.T) {
	bare := fakeHost(t, 0, nil)
	for _, loc := range []string{"cpu:0", "cpu:3", "*", "", "numa:1", "my-buffer"} {
		if err := bare.deviceLocation(loc); err != nil {
			t.Errorf("%q: %v", loc, err)
		}
	}
	want := map[string]string{
		"cuda:0": `it needs an NVIDIA GPU and this host has none (NVML (libnvidia-ml) finds none)`,
		"mlu:0":  `it needs a Cambricon MLU and this host has none (there is no /dev/cambricon_dev* device)`,
		"npu:2":  `it needs a Huawei Ascend NPU and this host has none (there is no /dev/davinci* device)`,
	}
	for loc, w := range want {
		full := `location "` + loc + `": not supported on this host: registering device memory: ` + w +
			`; register host memory (location "cpu:N") and copy device data through it`
		if err := bare.deviceLocation(loc); !errors.Is(err, ErrNotSupported) || err.Error() != full {
			t.Errorf("%s:\n got %v\nwant %s", loc, err, full)
		}
	}
}

func TestNewAndRegisterFailWithTheHostsStory(t *testing.T) {
	for proto := range protocolNeeds {
		_, err := New(context.Background(), Config{Protocol: strings.ToUpper(proto), LocalServerName: "127.0.0.1"})
		if !errors.Is(err, ErrNotSupported) || Code(err) != CodeNotImplemented ||
			!strings.HasPrefix(err.Error(), `protocol "`+proto+`": not supported on this host: `) ||
			!strings.HasSuffix(err.Error(), useTCP) {
			t.Errorf("%s: %v", proto, err)
		}
	}
	_, err := New(context.Background(), Config{Protocol: "bogus", LocalServerName: "127.0.0.1"})
	if !errors.Is(err, ErrNotSupported) || !strings.HasPrefix(err.Error(), `unknown protocol "bogus": not supported on this host (known: "tcp", "shm"; upstream's "ascend", "barex", `) {
		t.Errorf("bogus: %v", err)
	}
	e := newEngine(t, Config{})
	m := anon(t, 4096)
	err = e.RegisterLocalMemory(addr(m), 4096, "cuda:0")
	if !errors.Is(err, ErrNotSupported) || !strings.HasPrefix(err.Error(), `location "cuda:0": not supported on this host: registering device memory: `) {
		t.Fatalf("cuda:0: %v", err)
	}
	if err := e.RegisterLocalMemory(addr(m), 4096, "cpu:0"); err != nil {
		t.Fatalf("the same memory as cpu:0: %v", err)
	}
}

func TestCheckProtocol(t *testing.T) {
	for _, p := range []string{"", "tcp", "TCP", " shm "} {
		if err := CheckProtocol(p); err != nil {
			t.Errorf("%q: %v", p, err)
		}
	}
	_, newErr := New(context.Background(), Config{Protocol: "cxl", LocalServerName: "127.0.0.1"})
	if err := CheckProtocol("cxl"); err == nil || newErr == nil || err.Error() != newErr.Error() {
		t.Errorf("CheckProtocol and New disagree: %v / %v", err, newErr)
	}
}
