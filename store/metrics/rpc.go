package metrics

// Additions for the monitoring stack (monitoring/, docs/monitoring.md): RPC latency and error
// codes per method, and the G3 tier's usage gauges.

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RPCBuckets are the bounds of mooncake_master_rpc_duration_seconds: 50 µs to about 13 s.
var RPCBuckets = prometheus.ExponentialBuckets(50e-6, 2, 19)

type rpcResults struct {
	duration *prometheus.HistogramVec // mooncake_master_rpc_duration_seconds{method}
	errors   *prometheus.CounterVec   // mooncake_master_rpc_errors_total{method,code}
}

func newRPCResults() rpcResults {
	return rpcResults{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mooncake_master_rpc_duration_seconds",
			Help:    "Time the master took to handle a gRPC request (from receipt to reply, oplog durability included), by method.",
			Buckets: RPCBuckets,
		}, []string{"method"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mooncake_master_rpc_errors_total",
			Help: "gRPC requests answered with an error, by method and Mooncake error code (OBJECT_NOT_FOUND, RPC_FAIL, ...).",
		}, []string{"method", "code"}),
	}
}

// ObserveRPCResult records one request of method (the gRPC method name, e.g. "PutStart"): its
// handling time, and its Mooncake error code name when it failed (code "" or "OK": success).
// It complements ObserveRPC, which counts requests and failures.
func (m *Master) ObserveRPCResult(method, code string, took time.Duration) {
	m.rpc.duration.WithLabelValues(method).Observe(took.Seconds())
	if code != "" && code != "OK" {
		m.rpc.errors.WithLabelValues(method, code).Inc()
	}
}

var (
	descDFSCapacity = prometheus.NewDesc("mooncake_master_dfs_segment_capacity_bytes", "Capacity of the G3 file/DFS tier (--root_fs_dir); 0 while the tier is not configured.", nil, nil)
	descDFSUsed     = prometheus.NewDesc("mooncake_master_dfs_segment_used_bytes", "Bytes of objects held in the G3 file/DFS tier; 0 while the tier is not configured.", nil, nil)
)
