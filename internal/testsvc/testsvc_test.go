package testsvc_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/testsvc"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func newEtcdClient(t *testing.T, eps []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func TestStartEtcd(t *testing.T) {
	ep := testsvc.StartEtcd(t)
	cli := newEtcdClient(t, []string{ep})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put: %v", err)
	}
	resp, err := cli.Get(ctx, "k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("get: %v %v", resp, err)
	}
	// The Go v3 client talks to the Debian 3.4 server; record the version for the log.
	st, err := cli.Status(ctx, ep)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	t.Logf("etcd server version %s", st.Version)
}

func TestEtcdClusterSurvivesOneMember(t *testing.T) {
	c := testsvc.StartEtcdCluster(t, 3)
	if len(c.Endpoints) != 3 {
		t.Fatalf("endpoints: %v", c.Endpoints)
	}
	cli := newEtcdClient(t, c.Endpoints)
	put := func(key, val string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if _, err := cli.Put(ctx, key, val); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
		resp, err := cli.Get(ctx, key)
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != val {
			t.Fatalf("get %s: %v %v", key, resp, err)
		}
	}
	put("before", "1")

	// Kill the leader, the harder case: the other two elect a new one and keep quorum.
	leader := -1
	for i, ep := range c.Endpoints {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		st, err := cli.Status(ctx, ep)
		cancel()
		if err != nil {
			t.Fatalf("status of %s: %v", ep, err)
		}
		if st.Leader == st.Header.MemberId {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no member says it is the leader")
	}
	t.Logf("killing leader, member %d", leader)
	c.Kill(leader)
	alive := (leader + 1) % 3
	// Requests in flight when the leader dies time out on the server; the first put after
	// the kill may do the same until the other two elect a leader (about a second or two).
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		_, err := cli.Put(ctx, "after-kill", "x")
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster did not recover from losing its leader: %v", err)
		}
		t.Logf("put while electing: %v", err)
		time.Sleep(200 * time.Millisecond)
	}
	for i := range 20 {
		put(fmt.Sprintf("after-%d", i), "2")
	}
	// Members still alive answer directly.
	one := newEtcdClient(t, c.Endpoints[alive:alive+1])
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if resp, err := one.Get(ctx, "before"); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get from member %d: %v %v", alive, resp, err)
	}

	c.Restart(leader)
	back := newEtcdClient(t, c.Endpoints[leader:leader+1])
	if resp, err := back.Get(ctx, "after-19"); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get from restarted member %d: %v %v", leader, resp, err)
	}
}

func TestStartRedis(t *testing.T) {
	addr := testsvc.StartRedis(t)
	if addr == "" {
		t.Fatal("empty address")
	}
}

func TestStartMinIO(t *testing.T) {
	m := testsvc.StartMinIO(t) // skips without a minio binary
	if m.Endpoint == "" || m.AccessKey == "" || m.SecretKey == "" {
		t.Fatalf("incomplete: %+v", m)
	}
}
