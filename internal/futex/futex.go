// Package futex waits on and wakes 32-bit words with the Linux futex system call. It uses
// shared (non-private) futexes, so a word inside a MAP_SHARED mapping can be waited on in one
// process and woken from another. Waiting never burns a core: SpinWait spins a little, then
// blocks in the kernel, because ranks may outnumber cores.
package futex

import (
	"errors"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

const (
	opWait = 0 // FUTEX_WAIT (shared)
	opWake = 1 // FUTEX_WAKE (shared)
)

// ErrTimeout is returned when a wait's deadline passes.
var ErrTimeout = errors.New("futex: wait timed out")

// Wait blocks while *addr == val, up to timeout (<= 0 means a single check, no block).
// It returns nil when woken or when the value differs, ErrTimeout after the timeout.
// Spurious wake-ups return nil: callers re-check their condition.
func Wait(addr *uint32, val uint32, timeout time.Duration) error {
	if atomic.LoadUint32(addr) != val {
		return nil
	}
	if timeout <= 0 {
		return ErrTimeout
	}
	ts := syscall.NsecToTimespec(int64(timeout))
	_, _, errno := syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), opWait,
		uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
	switch errno {
	case 0, syscall.EAGAIN, syscall.EINTR:
		return nil
	case syscall.ETIMEDOUT:
		return ErrTimeout
	default:
		return errno
	}
}

// Wake wakes up to n waiters on addr. FUTEX_WAKE never blocks, so it is made as a raw system
// call, outside the runtime's syscall path: through that path, the first system call after the
// process went idle wakes Go's monitor thread (sysmon), which then ticks every 20 µs until the
// process is idle again. The engine's tcp server wakes a word after each signal write it
// stores; across two network namespaces that woke the monitor about once in five 8-byte
// all_to_alls per rank, a few of its 20 µs ticks each time (perf sched), and a raw wake took
// the context switches per op and rank from 8.8-9.5 to 8.3-8.6 (8 B) and from 10.7-11.5 to
// 9.8-10.1 (64 KiB), alternated twice (2026-12-07).
func Wake(addr *uint32, n int) {
	syscall.RawSyscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), opWake, uintptr(n), 0, 0, 0)
}

// SpinWait waits until cond() is true or the deadline passes (zero deadline: wait forever).
// It checks cond a few hundred times, yielding the processor, then blocks on the word with
// futex waits of at most slice each, re-checking cond between them. word must be the 32-bit
// word whose change makes cond true; writers call Wake on it.
func SpinWait(word *uint32, cond func() bool, deadline time.Time, slice time.Duration) error {
	for i := 0; i < 200; i++ {
		if cond() {
			return nil
		}
		if i > 50 {
			runtime.Gosched()
		}
	}
	if slice <= 0 {
		slice = 50 * time.Millisecond
	}
	for {
		v := atomic.LoadUint32(word)
		if cond() {
			return nil
		}
		d := slice
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return ErrTimeout
			}
			if left < d {
				d = left
			}
		}
		if err := Wait(word, v, d); err != nil && err != ErrTimeout {
			return err
		}
	}
}
