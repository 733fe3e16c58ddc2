package metadata

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/testsvc"
)

func open(t *testing.T, conn string) Store { return openWith(t, conn, Options{}) }

func openWith(t *testing.T, conn string, o Options) Store {
	t.Helper()
	st, err := OpenWith(conn, o)
	if err != nil {
		t.Fatalf("Open(%q): %v", conn, err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return st
}

func TestEtcdStore(t *testing.T) {
	ep := testsvc.StartEtcd(t)
	t.Run("Scheme", func(t *testing.T) { storeContract(t, open(t, "etcd://"+ep)) })
	t.Run("Bare", func(t *testing.T) { storeContract(t, open(t, ep)) })
	t.Run("SharedData", func(t *testing.T) {
		a, b := open(t, "etcd://"+ep), open(t, ep)
		if err := a.Put(t.Context(), "mooncake/ram/shared", []byte("v")); err != nil {
			t.Fatal(err)
		}
		if got, err := b.Get(t.Context(), "mooncake/ram/shared"); err != nil || string(got) != "v" {
			t.Fatalf("Get through a second client = %q, %v", got, err)
		}
	})
}

func TestEtcdStoreUnreachable(t *testing.T) {
	addr := deadAddr(t)
	st := open(t, "etcd://"+addr)
	start := time.Now()
	_, err := st.Get(context.Background(), "k")
	if err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Get from a missing etcd: %v", err)
	}
	if d := time.Since(start); d > DefaultTimeout+2*time.Second {
		t.Fatalf("Get took %v; want about %v", d, DefaultTimeout)
	}
	t.Logf("error: %v", err)
}

// TestEtcdStoreLeaderLoss: with a deadline of a few seconds, operations ride through the
// loss of the leader of a three-member cluster.
func TestEtcdStoreLeaderLoss(t *testing.T) {
	c := testsvc.StartEtcdCluster(t, 3)
	st := open(t, "etcd://"+strings.Join(c.Endpoints, ","))
	if err := st.Put(t.Context(), "before", []byte("1")); err != nil {
		t.Fatal(err)
	}
	leader := etcdLeader(t, st.(*etcdStore), c.Endpoints)
	c.Kill(leader)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	start := time.Now()
	if err := st.Put(ctx, "after", []byte("2")); err != nil {
		t.Fatalf("Put after the leader died: %v", err)
	}
	t.Logf("first Put after killing leader %d took %v", leader, time.Since(start))
	for _, k := range []string{"before", "after"} {
		if _, err := st.Get(ctx, k); err != nil {
			t.Fatalf("Get(%s): %v", k, err)
		}
	}
	if err := st.Delete(ctx, "before"); err != nil {
		t.Fatal(err)
	}
}

func etcdLeader(t *testing.T, st *etcdStore, eps []string) int {
	t.Helper()
	for i, ep := range eps {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		s, err := st.cli.Status(ctx, ep)
		cancel()
		if err != nil {
			t.Fatalf("status of %s: %v", ep, err)
		}
		if s.Leader == s.Header.MemberId {
			return i
		}
	}
	t.Fatal("no member says it is the leader")
	return -1
}

func TestRedisStore(t *testing.T) {
	addr := testsvc.StartRedis(t)
	storeContract(t, open(t, "redis://"+addr))

	t.Run("DBIndex", func(t *testing.T) {
		db1, db2 := open(t, "redis://"+addr+"/1"), open(t, "redis://"+addr+"/2")
		if err := db1.Put(t.Context(), "k", []byte("one")); err != nil {
			t.Fatal(err)
		}
		if _, err := db2.Get(t.Context(), "k"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("key leaked across databases: %v", err)
		}
		env := openWith(t, "redis://"+addr, Options{RedisDBIndex: "1"}) // MC_REDIS_DB_INDEX=1
		if got, err := env.Get(t.Context(), "k"); err != nil || string(got) != "one" {
			t.Fatalf("MC_REDIS_DB_INDEX=1: %q %v", got, err)
		}
	})
}

func TestRedisStorePassword(t *testing.T) {
	addr := testsvc.StartRedis(t, "--requirepass", "s3cret")
	t.Run("URL", func(t *testing.T) { storeContract(t, open(t, "redis://:s3cret@"+addr)) })
	t.Run("Env", func(t *testing.T) {
		st := openWith(t, "redis://"+addr, Options{RedisPassword: "s3cret"}) // MC_REDIS_PASSWORD
		if err := st.Put(t.Context(), "k", []byte("v")); err != nil {
			t.Fatal(err)
		}
	})
	for name, conn := range map[string]string{"Wrong": "redis://:nope@" + addr, "None": "redis://" + addr} {
		t.Run(name, func(t *testing.T) {
			st := open(t, conn)
			err := st.Put(t.Context(), "k", []byte("v"))
			if err == nil || !strings.Contains(err.Error(), addr) || strings.Contains(err.Error(), "nope") {
				t.Fatalf("Put with a bad password: %v", err)
			}
			t.Logf("error: %v", err)
		})
	}
}

func TestRedisStoreUnreachable(t *testing.T) {
	addr := deadAddr(t)
	st := open(t, "redis://"+addr)
	_, err := st.Get(context.Background(), "k")
	if err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Get from a missing Redis: %v", err)
	}
	t.Logf("error: %v", err)
}

// deadAddr is a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
