package topology

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// NIC is an RDMA device and the NUMA node it hangs off (-1 unknown).
type NIC struct {
	Name string
	NUMA int
}

// GPU is a CUDA device and its NUMA node (-1 unknown).
type GPU struct {
	Index int
	NUMA  int
	PCI   string
}

// Topology is what Discover found.
type Topology struct {
	NUMANodes []int
	NICs      []NIC
	GPUs      []GPU
}

// sysRoot lets tests point discovery at a fake sysfs.
var sysRoot = "/sys"

// Discover reads the host's NUMA nodes, NICs and GPUs.
func Discover() *Topology {
	t := &Topology{NUMANodes: numaNodes()}
	t.NICs = nics()
	t.GPUs = gpus()
	return t
}

func numaNodes() []int {
	ents, _ := filepath.Glob(filepath.Join(sysRoot, "devices/system/node/node[0-9]*"))
	var out []int
	for _, p := range ents {
		if n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(p), "node")); err == nil {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	if len(out) == 0 {
		out = []int{0}
	}
	return out
}

func readInt(path string, def int) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return def
	}
	return n
}

func nics() []NIC {
	ents, _ := os.ReadDir(filepath.Join(sysRoot, "class/infiniband"))
	var out []NIC
	for _, d := range ents {
		n := d.Name()
		out = append(out, NIC{Name: n, NUMA: readInt(filepath.Join(sysRoot, "class/infiniband", n, "device/numa_node"), -1)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Matrix returns the priority matrix: location -> [preferred NICs, other NICs].
func (t *Topology) Matrix() map[string][2][]string {
	m := make(map[string][2][]string)
	split := func(numa int) [2][]string {
		pref, avail := []string{}, []string{}
		for _, n := range t.NICs {
			if n.NUMA == numa || n.NUMA < 0 {
				pref = append(pref, n.Name)
			} else {
				avail = append(avail, n.Name)
			}
		}
		if len(pref) == 0 {
			pref, avail = avail, []string{}
		}
		return [2][]string{pref, avail}
	}
	for _, n := range t.NUMANodes {
		m["cpu:"+strconv.Itoa(n)] = split(n)
	}
	for _, g := range t.GPUs {
		numa := g.NUMA
		if numa < 0 && len(t.NUMANodes) > 0 {
			numa = t.NUMANodes[0]
		}
		m["cuda:"+strconv.Itoa(g.Index)] = split(numa)
	}
	return m
}

// JSON encodes the priority matrix.
func (t *Topology) JSON() string {
	b, _ := json.Marshal(t.Matrix())
	return string(b)
}

var (
	once   sync.Once
	cached string
)

// GetLocalTopology returns the host's priority-matrix JSON (computed once per process), or
// custom (MC_CUSTOM_TOPO_JSON, passed by the engine) when that holds valid JSON.
func GetLocalTopology(custom string) string {
	if c := custom; c != "" && json.Valid([]byte(c)) {
		return c
	}
	once.Do(func() { cached = Discover().JSON() })
	return cached
}
