package metadatacmd

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/engine/metadata"
)

// TestMain lets the test binary act as the server: the tests run it as a child process
// with MC_TEST_RUN_MAIN=1, so the real main, flags and signal handling are exercised.
func TestMain(m *testing.M) {
	if os.Getenv("MC_TEST_RUN_MAIN") == "1" {
		os.Exit(Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}

type server struct {
	cmd  *exec.Cmd
	url  string
	done chan error
	out  *strings.Builder
}

var listenRE = regexp.MustCompile(`listening on (http://\S+)`)

// startServer runs the server with args and waits for its "listening on" line.
func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "MC_TEST_RUN_MAIN=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, done: make(chan error, 1), out: &strings.Builder{}}
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			s.out.WriteString(line + "\n") // read only after done
			if m := listenRE.FindStringSubmatch(line); m != nil {
				urlc <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		s.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})
	select {
	case s.url = <-urlc:
	case err := <-s.done:
		t.Fatalf("server exited before listening: %v\n%s", err, s.out)
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("server did not report its address within 20 s")
	}
	return s
}

func (s *server) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.done:
		return err
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		t.Fatal("server did not exit within 10 s")
		return nil
	}
}

func TestServerProcess(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			s := startServer(t, "--host=127.0.0.1", "--port=0", "--path=/meta")
			if !strings.HasSuffix(s.url, "/meta") {
				t.Fatalf("url %q", s.url)
			}
			st, err := metadata.Open(s.url)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			ctx := t.Context()
			key := "mooncake/ram/host:15000 a&b"
			if err := st.Put(ctx, key, []byte(`{"name":"x"}`)); err != nil {
				t.Fatal(err)
			}
			if got, err := st.Get(ctx, key); err != nil || string(got) != `{"name":"x"}` {
				t.Fatalf("Get = %q, %v", got, err)
			}
			if err := st.Delete(ctx, key); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Get(ctx, key); !errors.Is(err, metadata.ErrNotFound) {
				t.Fatalf("Get after Delete: %v", err)
			}

			if err := s.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if err := s.wait(t); err != nil {
				t.Fatalf("exit after %v: %v\n%s", sig, err, s.out)
			}
			if !strings.Contains(s.out.String(), "shutting down") {
				t.Errorf("no shutdown message:\n%s", s.out)
			}
			if _, err := st.Get(ctx, key); err == nil || errors.Is(err, metadata.ErrNotFound) {
				t.Errorf("server still answers after exit: %v", err)
			}
		})
	}
}

func TestServerBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--port=-1"},
		{"--port=70000"},
		{"--path=metadata"},
		{"--nosuchflag"},
		{"extra"},
	} {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "MC_TEST_RUN_MAIN=1")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 {
			t.Errorf("%v: err %v, want a non-zero exit\n%s", args, err, out)
		}
	}
}

func TestServerPortInUse(t *testing.T) {
	s := startServer(t, "--host=127.0.0.1", "--port=0")
	port := s.url[strings.LastIndex(s.url, ":")+1 : strings.Index(s.url, "/metadata")]
	cmd := exec.Command(os.Args[0], "--host=127.0.0.1", fmt.Sprintf("--port=%s", port))
	cmd.Env = append(os.Environ(), "MC_TEST_RUN_MAIN=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "cannot listen") {
		t.Fatalf("second server on port %s: %v\n%s", port, err, out)
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	if err := s.wait(t); err != nil {
		t.Fatal(err)
	}
}
