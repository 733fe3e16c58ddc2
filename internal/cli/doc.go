// Package cli holds what the Go commands (cmd/internal/*, run by cmd/*) share around their own work: a context that
// ends on SIGINT or SIGTERM, and how a command ends: exit status 0 after -h, 2 for a bad
// command line, 1 when the command failed, with the error printed as "<command>: <error>".
// It owns nothing else: flags, configuration and logging stay with each command.
package cli
