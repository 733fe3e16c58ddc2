package glog

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Severity orders log lines. A Logger prints the lines at or above its minimum.
type Severity int

const (
	Trace   Severity = iota // detail upstream logs with VLOG(1): outcomes the caller tests for
	Info                    // glog's INFO
	Warning                 // glog's WARNING
	Error                   // glog's ERROR
)

// letter is the severity's first character on a line (Trace prints as glog's VLOG does: I).
func (s Severity) letter() byte {
	switch s {
	case Warning:
		return 'W'
	case Error:
		return 'E'
	}
	return 'I'
}

// String is the MC_LOG_LEVEL value that names s.
func (s Severity) String() string {
	switch s {
	case Trace:
		return "TRACE"
	case Info:
		return "INFO"
	case Warning:
		return "WARNING"
	case Error:
		return "ERROR"
	}
	return fmt.Sprintf("Severity(%d)", int(s))
}

// Levels lists the values ParseLevel accepts, as upstream Mooncake does (exact, upper case).
const Levels = "TRACE, INFO, WARNING or ERROR"

// ParseLevel reads an MC_LOG_LEVEL value: TRACE, INFO, WARNING or ERROR (upstream compares them
// exactly; surrounding blanks are ignored here). Empty is the default, INFO. Anything else gives
// INFO and ok false, so the caller can say the value was ignored.
func ParseLevel(v string) (least Severity, ok bool) {
	switch strings.TrimSpace(v) {
	case "":
		return Info, true
	case "TRACE":
		return Trace, true
	case "INFO":
		return Info, true
	case "WARNING":
		return Warning, true
	case "ERROR":
		return Error, true
	}
	return Info, false
}

// Format returns one glog line (with its newline) for a message of severity s logged at t by
// thread tid at file:line (only the file's base name is printed, as glog does). A message
// that ends in a newline does not get a second one.
func Format(s Severity, t time.Time, tid int, file string, line int, msg string) string {
	_, mon, day := t.Date()
	h, m, sec := t.Clock()
	msg = strings.TrimSuffix(msg, "\n")
	return fmt.Sprintf("%c%02d%02d %02d:%02d:%02d.%06d %5d %s:%d] %s\n",
		s.letter(), int(mon), day, h, m, sec, t.Nanosecond()/1000, tid, filepath.Base(file), line, msg)
}

// Logger writes glog lines at or above a minimum severity to one writer, a line per Write.
type Logger struct {
	mu    sync.Mutex
	w     io.Writer
	least Severity
}

// New returns a Logger that writes the lines of severity least and above to w.
func New(w io.Writer, least Severity) *Logger { return &Logger{w: w, least: least} }

// Enabled reports whether a line of severity s would be written: callers that spend work on
// a message (a stack walk for its file and line) ask first.
func (l *Logger) Enabled(s Severity) bool { return s >= l.least }

// Log writes msg as a line of severity s from file:line, stamped now and with the calling
// thread's id (a C thread that called into the library keeps its own id), when s is enabled.
func (l *Logger) Log(s Severity, file string, line int, msg string) {
	if !l.Enabled(s) {
		return
	}
	out := Format(s, time.Now(), syscall.Gettid(), file, line, msg)
	l.mu.Lock()
	defer l.mu.Unlock()
	io.WriteString(l.w, out)
}
