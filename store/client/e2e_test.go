package client

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/store/api"
)

// buildBinaries builds mooncake_master and mooncake_client once per test run.
func buildBinaries(t *testing.T) (masterBin, clientBin string) {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"mooncake_master", "mooncake_client"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), "github.com/mooncake-go/mooncake/cmd/"+name)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", name, err, out)
		}
	}
	return filepath.Join(dir, "mooncake_master"), filepath.Join(dir, "mooncake_client")
}

type proc struct {
	cmd   *exec.Cmd
	lines chan string
}

// startProc runs bin and waits for a line matching ready; it returns the submatches.
func startProc(t *testing.T, ready *regexp.Regexp, bin string, args ...string) (*proc, []string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, lines: make(chan string, 16)}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		close(p.lines)
	}()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("%s exited before it was ready", filepath.Base(bin))
			}
			if m := ready.FindStringSubmatch(line); m != nil {
				return p, m
			}
		case <-timeout:
			t.Fatalf("%s not ready within 20 s", filepath.Base(bin))
		}
	}
}

// TestEndToEndProcesses runs a master process and two mooncake_client processes; the test
// itself is a third, pure client. It checks replication across processes, that a killed client's
// replicas disappear after client_ttl while copies elsewhere stay readable, and the metrics.
func TestEndToEndProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs binaries")
	}
	masterBin, clientBin := buildBinaries(t)
	_, m := startProc(t, regexp.MustCompile(`MOONCAKE_MASTER_READY rpc_port=(\d+) metrics_port=(\d+)`), masterBin,
		"--rpc_port=0", "--metrics_port=0", "--rpc_address=127.0.0.1", "--client_ttl=2", "--enable_metric_reporting=false")
	masterAddr := "127.0.0.1:" + m[1]
	metricsURL := "http://127.0.0.1:" + m[2]
	ready := regexp.MustCompile(`MOONCAKE_CLIENT_READY segment=(\S+)`)
	args := []string{"--master_server_address=" + masterAddr, "--host=127.0.0.1", "--port=0", "--global_segment_size=32 MB", "--local_buffer_size=4MB"}
	c1, s1 := startProc(t, ready, clientBin, args...)
	_, s2 := startProc(t, ready, clientBin, args...)

	ctx := context.Background()
	eng, err := engine.New(ctx, engine.Config{LocalServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	me, err := NewWithEngine(ctx, eng, Config{MasterServerAddress: masterAddr, LocalBufferSize: 4 << 20, RPCTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer me.Close()

	both := pattern(5<<20+3, 1)
	if err := me.PutValue(ctx, "both", both, PutOptions{Config: api.ReplicateConfig{ReplicaNum: 2}}); err != nil {
		t.Fatal(err)
	}
	only1 := pattern(100_000, 2)
	if err := me.PutValue(ctx, "only1", only1, PutOptions{Config: api.ReplicateConfig{PreferredSegments: []string{s1[1]}}}); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string][]byte{"both": both, "only1": only1} {
		got, err := me.GetValue(ctx, key)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("get %s: %v", key, err)
		}
	}
	resp, err := http.Get(metricsURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{fmt.Sprintf(`mooncake_master_segment_free_bytes{segment=%q}`, s1[1]),
		fmt.Sprintf(`mooncake_master_segment_free_bytes{segment=%q}`, s2[1]), "mooncake_master_kv_object_count 2"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// kill -9 the first client: after client_ttl its replicas are dropped
	c1.cmd.Process.Kill()
	deadline := time.Now().Add(10 * time.Second)
	for {
		sizes, errs := me.Exists(ctx, []string{"only1"})
		if errs[0] != nil {
			t.Fatal(errs[0])
		}
		if sizes[0] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("replica on a killed client still listed after client_ttl")
		}
		time.Sleep(200 * time.Millisecond)
	}
	got, err := me.GetValue(ctx, "both")
	if err != nil || !bytes.Equal(got, both) {
		t.Fatalf("surviving replica unreadable: %v", err)
	}
}
