//go:build !cgo

package config

import "os"

// lookupEnv falls back to Go's environment when the build has no C library.
func lookupEnv(name string) (string, bool) { return os.LookupEnv(name) }
