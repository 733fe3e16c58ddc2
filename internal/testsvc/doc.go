// Package testsvc starts real services (etcd, Redis, MinIO) as child processes for tests in
// any package of this module, on free loopback ports, and stops them in t.Cleanup.
//
//	ep := testsvc.StartEtcd(t)             // "127.0.0.1:port"
//	c := testsvc.StartEtcdCluster(t, 3)    // c.Endpoints, c.Kill(i), c.Restart(i)
//	addr := testsvc.StartRedis(t)          // "127.0.0.1:port"
//	m := testsvc.StartMinIO(t)             // m.Endpoint, m.AccessKey, m.SecretKey
//
// Each start waits for the service to answer (bounded: about 30 s, polling every 50 ms),
// keeps the service's output in a log file in t.TempDir(), and prints the log's tail when
// the test fails. Data lives in t.TempDir(). Children get SIGKILL if the test binary dies
// (Linux Pdeathsig), so no service outlives a crashed test.
//
// When a binary is missing the test is skipped, naming the package that provides it:
// etcd (Debian etcd-server, 3.4; the Go v3 client works with it), redis-server (Debian
// redis-server), minio (in PATH or $MOONCAKE_MINIO_BIN; `go install
// github.com/minio/minio@latest`). Set $MOONCAKE_ETCD_BIN or $MOONCAKE_REDIS_BIN to use
// another binary. The project's test command installs them.
//
// Ports are found by binding :0 and releasing it, so another process can take one in
// between; a start that fails that way is retried with new ports (three tries).
package testsvc
