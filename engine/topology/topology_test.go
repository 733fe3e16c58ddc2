package topology

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func TestMatrixFromFakeSysfs(t *testing.T) {
	root := t.TempDir()
	for _, p := range []string{"devices/system/node/node0", "devices/system/node/node1", "class/infiniband/mlx5_0/device", "class/infiniband/mlx5_1/device"} {
		os.MkdirAll(filepath.Join(root, p), 0o755)
	}
	os.WriteFile(filepath.Join(root, "class/infiniband/mlx5_0/device/numa_node"), []byte("0\n"), 0o644)
	os.WriteFile(filepath.Join(root, "class/infiniband/mlx5_1/device/numa_node"), []byte("1\n"), 0o644)
	old := sysRoot
	sysRoot = root
	defer func() { sysRoot = old }()
	top := &Topology{NUMANodes: numaNodes(), NICs: nics()}
	var m map[string][][]string
	if err := json.Unmarshal([]byte(top.JSON()), &m); err != nil {
		t.Fatal(err)
	}
	if len(m) != 2 || m["cpu:0"][0][0] != "mlx5_0" || m["cpu:0"][1][0] != "mlx5_1" || m["cpu:1"][0][0] != "mlx5_1" {
		t.Fatalf("matrix %v", m)
	}
	sysRoot = t.TempDir()
	if got := (&Topology{NUMANodes: numaNodes(), NICs: nics()}).JSON(); got != `{"cpu:0":[[],[]]}` {
		t.Fatalf("empty sysfs: %s", got)
	}
}

func TestGetLocalTopology(t *testing.T) {
	var m map[string]any
	if err := json.Unmarshal([]byte(GetLocalTopology("")), &m); err != nil || len(m) == 0 {
		t.Fatalf("%v %v", m, err)
	}
	// MC_CUSTOM_TOPO_JSON, passed in by the engine.
	if GetLocalTopology(`{"cpu:0":[["x"],[]]}`) != `{"cpu:0":[["x"],[]]}` {
		t.Fatal("custom topology ignored")
	}
	if GetLocalTopology("{bad") == "{bad" {
		t.Fatal("custom topology ignored")
	}
}
