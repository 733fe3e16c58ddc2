package auth

import (
	"log"
	"strconv"
	"sync"
	"time"
)

// RefusalLog logs refused peers without letting a flood of them flood the log: at most Burst
// lines per Window; the refusals beyond that are counted and the count is reported with the
// next line logged. The zero value logs with log.Printf, 10 lines a minute.
type RefusalLog struct {
	Prefix string               // e.g. "mooncake engine 10.0.0.4:15000"
	Logf   func(string, ...any) // nil: log.Printf
	Burst  int                  // 0: 10
	Window time.Duration        // 0: one minute
	now    func() time.Time     // tests
	mu     sync.Mutex
	start  time.Time
	n      int
	quiet  int
}

// SetLogf replaces Logf while the log is in use.
func (l *RefusalLog) SetLogf(f func(string, ...any)) {
	l.mu.Lock()
	l.Logf = f
	l.mu.Unlock()
}

// Refused records that remote failed to authenticate with err, and logs it unless this window
// already had Burst lines.
func (l *RefusalLog) Refused(remote, claimed string, err error) {
	now := time.Now
	if l.now != nil {
		now = l.now
	}
	burst, window := l.Burst, l.Window
	if burst <= 0 {
		burst = 10
	}
	if window <= 0 {
		window = time.Minute
	}
	t := now()
	l.mu.Lock()
	if t.Sub(l.start) >= window {
		l.start, l.n = t, 0
	}
	if l.n >= burst {
		l.quiet++
		l.mu.Unlock()
		return
	}
	l.n++
	quiet := l.quiet
	l.quiet = 0
	logf := l.Logf
	l.mu.Unlock()
	if logf == nil {
		logf = log.Printf
	}
	more := ""
	if quiet > 0 {
		more = " (" + strconv.Itoa(quiet) + " more refusals were not logged)"
	}
	who := remote
	if claimed != "" {
		who += " (calling itself " + strconv.QuoteToASCII(claimed) + ")"
	}
	logf("%s: refused connection from %s: %v%s", l.Prefix, who, err, more)
}
