package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// usageError marks an error about the command line (exit status 2).
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

// Usage marks err as an error about the command line; nil stays nil.
func Usage(err error) error {
	if err == nil {
		return nil
	}
	return usageError{err}
}

// Usagef is Usage(fmt.Errorf(format, args...)).
func Usagef(format string, args ...any) error { return Usage(fmt.Errorf(format, args...)) }

// SignalContext returns a context that ends on SIGINT or SIGTERM. Call stop once the command
// is shutting down, so that a second signal kills the process the usual way.
func SignalContext() (ctx context.Context, stop context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// Exit ends command name after err: it returns when err is nil; otherwise the process exits
// with the status Code gives, after Code printed the error.
func Exit(name string, err error) {
	if err == nil {
		return
	}
	os.Exit(Code(name, err))
}

// Code is the exit status of command name after err: 0 for nil and for flag.ErrHelp (the usage
// was printed), 2 for an error marked by Usage and 1 for any other, printing "name: err" on
// stderr for those two. Commands that return their status (a Main(args) int run by the
// multi-call binary cmd/mooncake) end with it.
func Code(name string, err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	if errors.As(err, new(usageError)) {
		return 2
	}
	return 1
}
