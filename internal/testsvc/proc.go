package testsvc

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	readyTimeout = 30 * time.Second
	pollInterval = 50 * time.Millisecond
	stopTimeout  = 10 * time.Second
	startTries   = 3
)

// findBinary returns the path of a binary named by the env var envName or found in PATH,
// or skips the test naming the package that provides it.
func findBinary(t testing.TB, name, envName, pkgHint string) string {
	t.Helper()
	if envName != "" {
		if p := os.Getenv(envName); p != "" {
			if _, err := os.Stat(p); err != nil {
				t.Fatalf("testsvc: $%s=%q: %v", envName, p, err)
			}
			return p
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("testsvc: %s not found in PATH; install %s", name, pkgHint)
	}
	return p
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("testsvc: finding a free port: %v", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// proc is one running child process.
type proc struct {
	name    string
	path    string
	args    []string
	env     []string
	logPath string

	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // Wait's result, valid after done
}

// start launches the process with output appended to p.logPath.
func (p *proc) start() error {
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("creating log file for %s: %w", p.name, err)
	}
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = p.env
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting %s (%s): %w", p.name, p.path, err)
	}
	p.cmd = cmd
	p.done = make(chan struct{})
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitReady polls ready until it succeeds, the process exits, or readyTimeout passes.
func (p *proc) waitReady(ready func() error) error {
	deadline := time.Now().Add(readyTimeout)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var last error
	for {
		if last = ready(); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not become ready within %v: %w", p.name, readyTimeout, last)
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it was ready (%v)", p.name, p.err)
		case <-tick.C:
		}
	}
}

// launch starts p and waits until ready succeeds; when it does not, p is killed and the error
// carries the tail of p's log.
func (p *proc) launch(ready func() error) error {
	if err := p.start(); err != nil {
		return err
	}
	if err := p.waitReady(ready); err != nil {
		err = fmt.Errorf("%w\n%s", err, p.logTail(2000))
		p.kill()
		return err
	}
	return nil
}

// retryStart runs start (try counts from 1) up to startTries times until it succeeds, logging
// each failed attempt, and fails t when none did. Services start on free ports that another
// process may take first, so a failed attempt is retried on new ones.
func retryStart[T any](t testing.TB, name string, start func(try int) (T, error)) T {
	t.Helper()
	var lastErr error
	for try := 1; try <= startTries; try++ {
		v, err := start(try)
		if err == nil {
			return v
		}
		lastErr = err
		t.Logf("testsvc: %s start attempt %d of %d failed: %v", name, try, startTries, err)
	}
	t.Fatalf("testsvc: could not start %s: %v", name, lastErr)
	var zero T
	return zero
}

// kill sends SIGKILL and waits for the exit.
func (p *proc) kill() {
	if p.cmd == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// stop sends SIGTERM, waits up to stopTimeout, then SIGKILL.
func (p *proc) stop() {
	if p.cmd == nil || p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		p.kill()
	}
}

// logTail returns the last n bytes of the log.
func (p *proc) logTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if len(b) > n {
		b = b[len(b)-n:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return strings.TrimRight(string(b), "\n")
}

// register stops p when the test ends and prints its log if the test failed.
func (p *proc) register(t testing.TB) {
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("testsvc: last lines of %s log (%s):\n%s", p.name, p.logPath, p.logTail(4000))
		}
	})
}

// cleanEnv is the current environment without variables that would reconfigure the child
// (prefixes such as ETCD_), so a developer's shell cannot change what the test sees.
func cleanEnv(dropPrefixes ...string) []string {
	var env []string
next:
	for _, kv := range os.Environ() {
		for _, pre := range dropPrefixes {
			if strings.HasPrefix(kv, pre) {
				continue next
			}
		}
		env = append(env, kv)
	}
	return env
}

func logFile(dir, name string) string { return filepath.Join(dir, name+".log") }

var errNotReady = errors.New("not ready")
