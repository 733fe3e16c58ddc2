package glog

import (
	"bytes"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestFormat(t *testing.T) {
	at := time.Date(2026, time.December, 6, 1, 23, 45, 678901234, time.Local)
	for _, c := range []struct {
		s    Severity
		tid  int
		file string
		line int
		msg  string
		want string
	}{
		{Error, 12345, "/src/capi/engine.go", 123, "message", "E1206 01:23:45.678901 12345 engine.go:123] message\n"},
		{Warning, 7, "store.go", 9, "no space\n", "W1206 01:23:45.678901     7 store.go:9] no space\n"},
		{Info, 1234567, "a.go", 1, "x", "I1206 01:23:45.678901 1234567 a.go:1] x\n"},
		{Trace, 42, "b.go", 2, "miss", "I1206 01:23:45.678901    42 b.go:2] miss\n"},
	} {
		if got := Format(c.s, at, c.tid, c.file, c.line, c.msg); got != c.want {
			t.Errorf("Format(%v, ..., %q) = %q, want %q", c.s, c.msg, got, c.want)
		}
	}
	early := time.Date(2027, time.January, 2, 3, 4, 5, 6000, time.Local)
	if got, want := Format(Error, early, 1, "c.go", 3, "m"), "E0102 03:04:05.000006     1 c.go:3] m\n"; got != want {
		t.Errorf("Format at %v = %q, want %q", early, got, want)
	}
}

func TestParseLevel(t *testing.T) {
	for _, c := range []struct {
		v   string
		min Severity
		ok  bool
	}{
		{"", Info, true},
		{"TRACE", Trace, true},
		{"INFO", Info, true},
		{"WARNING", Warning, true},
		{" ERROR\n", Error, true},
		{"info", Info, false}, // upstream compares exactly
		{"2", Info, false},
		{"FATAL", Info, false},
		{"bogus", Info, false},
	} {
		if min, ok := ParseLevel(c.v); min != c.min || ok != c.ok {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v, %v", c.v, min, ok, c.min, c.ok)
		}
	}
	for _, s := range []Severity{Trace, Info, Warning, Error} {
		if min, ok := ParseLevel(s.String()); min != s || !ok {
			t.Errorf("ParseLevel(%v.String()) = %v, %v", s, min, ok)
		}
	}
}

// TestLoggerLevels: each minimum prints exactly the lines at or above it, in glog's format,
// stamped with the calling thread and the current time.
func TestLoggerLevels(t *testing.T) {
	line := regexp.MustCompile(`^([IWE])(\d{4}) (\d\d:\d\d:\d\d\.\d{6}) +(\d+) f\.go:(\d+)\] (.*)$`)
	for _, c := range []struct {
		min  Severity
		want string // letter:line and message of each line written
	}{
		{Trace, "I:10 trace|I:11 info|W:12 warning|E:13 error"},
		{Info, "I:11 info|W:12 warning|E:13 error"},
		{Warning, "W:12 warning|E:13 error"},
		{Error, "E:13 error"},
	} {
		var buf bytes.Buffer
		l := New(&buf, c.min)
		before := time.Now()
		for i, s := range []Severity{Trace, Info, Warning, Error} {
			if l.Enabled(s) != (s >= c.min) {
				t.Errorf("min %v: Enabled(%v) = %v", c.min, s, l.Enabled(s))
			}
			l.Log(s, "/x/f.go", 10+i, strings.ToLower(s.String()))
		}
		var got []string
		for _, ln := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n") {
			m := line.FindStringSubmatch(ln)
			if m == nil {
				t.Fatalf("min %v: line %q is not a glog line", c.min, ln)
			}
			if tid, _ := strconv.Atoi(m[4]); tid != syscall.Gettid() && tid != os.Getpid() {
				// the goroutine may have moved to another thread; it is one of this process's
				if _, err := os.Stat("/proc/self/task/" + m[4]); err != nil {
					t.Errorf("min %v: thread id %s is not a thread of this process", c.min, m[4])
				}
			}
			stamp, err := time.ParseInLocation("0102 15:04:05.000000", m[2]+" "+m[3], time.Local)
			if err != nil {
				t.Fatal(err)
			}
			stamp = stamp.AddDate(before.Year(), 0, 0)
			if d := stamp.Sub(before); d < -time.Millisecond || d > time.Minute {
				t.Errorf("min %v: stamp %s is %v from the time of the call", c.min, m[2]+" "+m[3], d)
			}
			got = append(got, m[1]+":"+m[5]+" "+m[6])
		}
		if s := strings.Join(got, "|"); s != c.want {
			t.Errorf("min %v: wrote %q, want %q", c.min, s, c.want)
		}
	}
}
