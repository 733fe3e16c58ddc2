package main

// Process-group metrics (pg/pgmetrics): the process's exporter, started at the first
// init_process_group when MOONCAKE_PG_METRICS_PORT is set, and each group's observer.

import (
	"fmt"
	"log"
	"strconv"
	"sync"

	"github.com/mooncake-go/mooncake/config"
	"github.com/mooncake-go/mooncake/pg"
	"github.com/mooncake-go/mooncake/pg/pgmetrics"
)

// pgMetrics is the process's exporter: one registry and one HTTP server for all its groups.
var pgMetrics struct {
	mu  sync.Mutex
	exp *pgmetrics.Exporter // nil until the first group with the port set
}

// pgMetricsPort is MOONCAKE_PG_METRICS_PORT: 0 when unset or empty.
func pgMetricsPort() (int, error) {
	v := config.PGMetricsPort.Trimmed()
	if v == "" {
		return 0, nil
	}
	port, err := strconv.Atoi(v)
	if err != nil || port <= 0 || port > 65535 {
		return 0, fmt.Errorf("MOONCAKE_PG_METRICS_PORT=%q: want a TCP port (1-65535; the rank is added to it)", v)
	}
	return port, nil
}

// pgObserver returns the observer for the group c is about to create: nil when
// MOONCAKE_PG_METRICS_PORT is unset. The first call starts the process's HTTP server on the
// port plus c.Rank (the default group comes first, so that is the global rank). A bad value or a
// port already in use is logged and leaves the group without metrics: monitoring never stops
// a training job.
func pgObserver(c pg.Config) pg.Observer {
	port, err := pgMetricsPort()
	if err != nil {
		log.Printf("mooncake: process-group metrics are off: %v", err)
		return nil
	}
	if port == 0 {
		return nil
	}
	pgMetrics.mu.Lock()
	defer pgMetrics.mu.Unlock()
	if pgMetrics.exp == nil {
		exp := pgmetrics.New()
		addr, err := exp.Serve(":" + strconv.Itoa(port+c.Rank))
		if err != nil {
			log.Printf("mooncake: process-group metrics are off: %v", err)
			return nil
		}
		log.Printf("mooncake: process-group metrics on http://%s/metrics", addr)
		pgMetrics.exp = exp
	}
	return pgMetrics.exp.Group(c.Name, c.Rank, max(c.MaxSize, c.Size), pgmetrics.Backend(c.DeviceType))
}
