package snapshot

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the snapshot collectors. A nil *Metrics records nothing, so a Manager works
// without them. Register them with Register (or by passing Collectors() to a registry).
type Metrics struct {
	SaveSuccess    prometheus.Counter
	SaveFailure    prometheus.Counter
	SaveDuration   prometheus.Histogram
	SaveBytes      prometheus.Gauge
	LastSuccess    prometheus.Gauge
	LastAppliedSeq prometheus.Gauge
	RestoreSuccess prometheus.Counter
	RestoreFailure prometheus.Counter
	RestoreSkipped prometheus.Counter
	RestoreDur     prometheus.Histogram
}

// NewMetrics makes the collectors (not yet registered):
//
//	mooncake_master_snapshot_success_total            snapshots saved
//	mooncake_master_snapshot_failure_total            snapshot saves that failed
//	mooncake_master_snapshot_duration_seconds         time to save one snapshot (histogram)
//	mooncake_master_snapshot_size_bytes               payload size of the last saved snapshot
//	mooncake_master_snapshot_last_success_timestamp_seconds
//	mooncake_master_snapshot_last_applied_seq         oplog sequence id in the last saved snapshot
//	mooncake_master_snapshot_restore_success_total    restores that loaded a snapshot
//	mooncake_master_snapshot_restore_failure_total    restores that found no valid snapshot or failed
//	mooncake_master_snapshot_restore_skipped_total    invalid (corrupt or incomplete) snapshots passed over
//	mooncake_master_snapshot_restore_duration_seconds time to restore (histogram)
func NewMetrics() *Metrics {
	const prefix = "mooncake_master_snapshot_"
	buckets := prometheus.ExponentialBuckets(0.005, 2, 16) // 5 ms .. ~164 s
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: prefix + name, Help: help})
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: prefix + name, Help: help})
	}
	histogram := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: prefix + name, Help: help, Buckets: buckets})
	}
	return &Metrics{
		SaveSuccess:    counter("success_total", "Snapshots of the master's metadata saved."),
		SaveFailure:    counter("failure_total", "Snapshot saves that failed."),
		SaveDuration:   histogram("duration_seconds", "Time to save one snapshot (payload, manifest, latest pointer, retention)."),
		SaveBytes:      gauge("size_bytes", "Payload size of the last saved snapshot."),
		LastSuccess:    gauge("last_success_timestamp_seconds", "Unix time of the last saved snapshot."),
		LastAppliedSeq: gauge("last_applied_seq", "Oplog sequence id covered by the last saved snapshot."),
		RestoreSuccess: counter("restore_success_total", "Restores that loaded a valid snapshot."),
		RestoreFailure: counter("restore_failure_total", "Restores that found no valid snapshot or could not read the backend."),
		RestoreSkipped: counter("restore_skipped_total", "Corrupt or incomplete snapshots passed over by restore."),
		RestoreDur:     histogram("restore_duration_seconds", "Time to find, read and verify a snapshot."),
	}
}

// Collectors returns every collector, for registering.
func (m *Metrics) Collectors() []prometheus.Collector {
	if m == nil {
		return nil
	}
	return []prometheus.Collector{m.SaveSuccess, m.SaveFailure, m.SaveDuration, m.SaveBytes, m.LastSuccess,
		m.LastAppliedSeq, m.RestoreSuccess, m.RestoreFailure, m.RestoreSkipped, m.RestoreDur}
}

// Register registers every collector on reg.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	for _, c := range m.Collectors() {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (m *Metrics) saved(start time.Time, size int, seq uint64, err error) {
	if m == nil {
		return
	}
	m.SaveDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		m.SaveFailure.Inc()
		return
	}
	m.SaveSuccess.Inc()
	m.SaveBytes.Set(float64(size))
	m.LastSuccess.Set(float64(time.Now().UnixNano()) / 1e9)
	m.LastAppliedSeq.Set(float64(seq))
}

func (m *Metrics) restored(start time.Time, skipped int, err error) {
	if m == nil {
		return
	}
	m.RestoreDur.Observe(time.Since(start).Seconds())
	m.RestoreSkipped.Add(float64(skipped))
	if err != nil {
		m.RestoreFailure.Inc()
		return
	}
	m.RestoreSuccess.Inc()
}
