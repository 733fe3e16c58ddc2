package testsvc

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

const redisPkgHint = "the Debian package redis-server (apt-get install -y redis-server) or set $MOONCAKE_REDIS_BIN"

// StartRedis starts redis-server on 127.0.0.1 without persistence and returns its
// address "127.0.0.1:port" (use it as redis://127.0.0.1:port). extraArgs are appended
// to the command line, e.g. "--requirepass", "pw".
func StartRedis(t testing.TB, extraArgs ...string) string {
	t.Helper()
	bin := findBinary(t, "redis-server", "MOONCAKE_REDIS_BIN", redisPkgHint)
	return retryStart(t, "redis-server", func(int) (string, error) {
		dir := t.TempDir()
		port := freePorts(t, 1)[0]
		addr := "127.0.0.1:" + strconv.Itoa(port)
		p := &proc{
			name: "redis-server",
			path: bin,
			args: []string{
				"--port", strconv.Itoa(port),
				"--bind", "127.0.0.1",
				"--dir", dir,
				"--save", "",
				"--appendonly", "no",
				"--daemonize", "no",
				"--protected-mode", "no",
			},
			env:     cleanEnv(),
			logPath: logFile(dir, "redis"),
		}
		p.args = append(p.args, extraArgs...)
		if err := p.launch(func() error { return redisPing(addr) }); err != nil {
			return "", err
		}
		p.register(t)
		return addr, nil
	})
}

// redisPing sends PING in the inline protocol and expects +PONG.
func redisPing(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	// With --requirepass the server answers NOAUTH: it is up.
	if l := strings.TrimSpace(line); l != "+PONG" && !strings.HasPrefix(l, "-NOAUTH") {
		return fmt.Errorf("%w: PING answered %q", errNotReady, strings.TrimSpace(line))
	}
	return nil
}
