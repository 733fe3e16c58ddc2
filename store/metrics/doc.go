// Package metrics owns the Prometheus metrics of Mooncake Store: the mooncake_master_* family
// exported on the master's admin port (/metrics), and a plain-text summary (/metrics/summary).
//
// Gauges that describe the master's metadata (object counts, bytes, per-segment free space) are
// read from a Snapshot the master hands over at scrape time, so they can never drift from the
// state; counters of RPCs and operations are incremented by the master's RPC middleware.
// Each Master uses its own registry (no global state), so tests can run several masters in one
// process. This package must not import store/master (the master imports it).
package metrics
