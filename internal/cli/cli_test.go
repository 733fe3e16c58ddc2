package cli

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"testing"
)

func TestUsage(t *testing.T) {
	if Usage(nil) != nil {
		t.Fatal("Usage(nil) is not nil")
	}
	base := errors.New("boom")
	u := Usage(base)
	if !errors.Is(u, base) || u.Error() != "boom" {
		t.Fatalf("Usage(boom) = %v, want boom wrapped", u)
	}
	if got := Usagef("--port=%d is not a valid port", -1).Error(); got != "--port=-1 is not a valid port" {
		t.Fatalf("Usagef = %q", got)
	}
}

// TestExit runs this test binary again with CLI_EXIT_CASE set and checks each case's status.
func TestExit(t *testing.T) {
	if c := os.Getenv("CLI_EXIT_CASE"); c != "" {
		switch c {
		case "nil":
			Exit("cmd", nil)
			os.Exit(7) // Exit returned, as it must for nil
		case "help":
			Exit("cmd", Usage(fmt.Errorf("bad command line: %w", flag.ErrHelp)))
		case "usage":
			Exit("cmd", Usagef("bad flag"))
		case "fail":
			Exit("cmd", errors.New("failed"))
		}
		os.Exit(9)
	}
	for _, tc := range []struct {
		name   string
		status int
		stderr string
	}{{"nil", 7, ""}, {"help", 0, ""}, {"usage", 2, "cmd: bad flag\n"}, {"fail", 1, "cmd: failed\n"}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestExit$")
		cmd.Env = append(os.Environ(), "CLI_EXIT_CASE="+tc.name)
		var stderr []byte
		out, err := cmd.Output()
		status := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			status, stderr = ee.ExitCode(), ee.Stderr
		} else if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if status != tc.status || string(stderr) != tc.stderr {
			t.Errorf("%s: status %d, stderr %q (stdout %q); want %d, %q", tc.name, status, stderr, out, tc.status, tc.stderr)
		}
	}
}

func TestCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{Usage(fmt.Errorf("bad command line: %w", flag.ErrHelp)), 0},
		{Usagef("bad flag"), 2},
		{fmt.Errorf("wrapped: %w", Usagef("bad flag")), 2},
		{errors.New("failed"), 1},
	} {
		if got := Code("cmd", tc.err); got != tc.want {
			t.Errorf("Code(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
