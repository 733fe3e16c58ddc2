// Package pgmetrics owns the Prometheus metrics of the process-group runtime (package pg): per
// group and rank, op counts, bytes and latency histograms by collective and backend, failures by
// reason, ops that completed over the survivors, and the membership view (epoch, active ranks,
// membership changes).
//
// One [Exporter] per process holds its own registry (never the client library's global one) and
// at most one HTTP server, however many groups the process creates: every group gets an
// observer from [Exporter.Group], labelled with the group's name, and the series of all groups
// are served together on /metrics. The C ABI (capi) makes the exporter at the first
// init_process_group when MOONCAKE_PG_METRICS_PORT is set, listening on that port plus the
// rank (so the ranks of one host do not collide), and hands each group its observer through
// pg.Options.Observer. monitoring/grafana/.../mooncake_pg.json is the dashboard for these series.
//
// The package imports pg only for the Observer and View types; pg never imports it.
package pgmetrics
