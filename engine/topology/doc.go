// Package topology describes the host for transport selection: NUMA nodes from sysfs
// (/sys/devices/system/node), RDMA NICs from /sys/class/infiniband with their NUMA
// affinity, and NVIDIA GPUs through NVML (dlopened with purego only when
// asked; a host without it, or a build without cgo, simply has no GPUs).
//
// GetLocalTopology returns Mooncake's priority matrix JSON: for every location ("cpu:N",
// "cuda:N") a pair [preferred NICs, available NICs]; with no NICs every entry is [[],[]].
// A custom matrix (MC_CUSTOM_TOPO_JSON, passed in by the engine), when valid JSON, is returned
// instead.
//
// The package only reads the system; it never fails: missing sysfs entries give a
// single "cpu:0" node.
package topology
