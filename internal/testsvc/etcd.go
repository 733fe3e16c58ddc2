package testsvc

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const etcdPkgHint = "the Debian package etcd-server (apt-get install -y etcd-server) or set $MOONCAKE_ETCD_BIN"

// StartEtcd starts a single-member etcd on 127.0.0.1 and returns its client endpoint as
// "127.0.0.1:port" (what go.etcd.io/etcd/client/v3 and --etcd_endpoints take).
func StartEtcd(t testing.TB) string {
	t.Helper()
	return StartEtcdCluster(t, 1).Endpoints[0]
}

// EtcdCluster is a running etcd cluster of local members.
type EtcdCluster struct {
	// Endpoints are the members' client endpoints, "127.0.0.1:port", in member order.
	Endpoints []string

	t       testing.TB
	mu      sync.Mutex
	members []*proc
}

// StartEtcdCluster starts an n-member etcd cluster on 127.0.0.1 and waits until every
// member reports itself healthy (a leader is elected). Members are stopped at cleanup.
func StartEtcdCluster(t testing.TB, n int) *EtcdCluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("testsvc: StartEtcdCluster(%d): need at least one member", n)
	}
	bin := findBinary(t, "etcd", "MOONCAKE_ETCD_BIN", etcdPkgHint)
	return retryStart(t, "etcd", func(try int) (*EtcdCluster, error) { return startEtcdCluster(t, bin, n, try) })
}

func startEtcdCluster(t testing.TB, bin string, n, try int) (*EtcdCluster, error) {
	dir := t.TempDir()
	ports := freePorts(t, 2*n)
	token := fmt.Sprintf("testsvc-%d-%d-%d", os.Getpid(), time.Now().UnixNano(), try)
	var initial []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("m%d=http://127.0.0.1:%d", i, ports[2*i+1]))
	}
	env := cleanEnv("ETCD_", "ETCDCTL_")
	c := &EtcdCluster{t: t}
	for i := range n {
		client := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i])
		peer := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1])
		name := fmt.Sprintf("m%d", i)
		p := &proc{
			name: "etcd " + name,
			path: bin,
			args: []string{
				"--name", name,
				"--data-dir", filepath.Join(dir, name),
				"--listen-client-urls", client,
				"--advertise-client-urls", client,
				"--listen-peer-urls", peer,
				"--initial-advertise-peer-urls", peer,
				"--initial-cluster", strings.Join(initial, ","),
				"--initial-cluster-token", token,
				"--initial-cluster-state", "new",
				"--logger", "zap",
				"--log-outputs", "stderr",
			},
			env:     env,
			logPath: logFile(dir, name),
		}
		c.members = append(c.members, p)
		c.Endpoints = append(c.Endpoints, strings.TrimPrefix(client, "http://"))
	}
	stopAll := func() {
		for _, p := range c.members {
			p.kill()
		}
	}
	for _, p := range c.members {
		if err := p.start(); err != nil {
			stopAll()
			return nil, err
		}
	}
	for i, p := range c.members {
		if err := p.waitReady(func() error { return etcdHealthy(c.Endpoints[i]) }); err != nil {
			err = fmt.Errorf("%w\n%s", err, p.logTail(2000))
			stopAll()
			return nil, err
		}
	}
	for _, p := range c.members {
		p.register(t)
	}
	return c, nil
}

// Kill stops member i at once with SIGKILL, as a crash would.
func (c *EtcdCluster) Kill(i int) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.member(i).kill()
}

// Restart starts member i again on its data directory and ports (after Kill) and waits
// until it reports healthy.
func (c *EtcdCluster) Restart(i int) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.member(i)
	if !p.exited() {
		c.t.Fatalf("testsvc: etcd member %d is still running; Kill it first", i)
	}
	if err := p.start(); err != nil {
		c.t.Fatalf("testsvc: restarting etcd member %d: %v", i, err)
	}
	if err := p.waitReady(func() error { return etcdHealthy(c.Endpoints[i]) }); err != nil {
		c.t.Fatalf("testsvc: restarting etcd member %d: %v\n%s", i, err, p.logTail(2000))
	}
}

func (c *EtcdCluster) member(i int) *proc {
	if i < 0 || i >= len(c.members) {
		c.t.Fatalf("testsvc: etcd member %d does not exist (cluster of %d)", i, len(c.members))
	}
	return c.members[i]
}

var healthClient = &http.Client{Timeout: 2 * time.Second}

// etcdHealthy asks the member's /health endpoint, which says true once the cluster has a
// leader and the member can serve.
func etcdHealthy(endpoint string) error {
	resp, err := healthClient.Get("http://" + endpoint + "/health")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var h struct {
		Health string `json:"health"`
	}
	if err := json.Unmarshal(body, &h); err != nil || h.Health != "true" {
		return fmt.Errorf("%w: /health answered %s %s", errNotReady, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}
