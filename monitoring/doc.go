// Package monitoring holds no code: it is the Prometheus + Grafana stack users start with
// `docker-compose up -d` in this folder (docs/monitoring.md), and the Go test that checks its
// files without Docker:
//
//   - docker-compose.yml: Prometheus (reaching the host's master through host.docker.internal)
//     and Grafana (admin/admin) with the provisioning folder mounted;
//   - prometheus/prometheus.yml: the mooncake-master job (15 s, host.docker.internal:9003), the
//     mooncake-pg job (MOONCAKE_PG_METRICS_PORT), a commented multi-master example;
//     prometheus/alerts.yml: the alert rules;
//   - grafana/provisioning/datasources: the Prometheus data source (uid mooncake-prometheus);
//     grafana/provisioning/dashboards: the provider and the mooncake_master and mooncake_pg
//     dashboards, written by grafana/make_dashboards.py.
//
// monitoring_test.go runs promtool on the Prometheus files and checks the compose file, the
// provisioning and the dashboards' structure (unique panel ids, data source uids that resolve,
// variables that are defined). tests/test_monitoring.py and tests/test_monitoring_pg.py run
// every query against a real Prometheus scraping a real master and a real torchrun job.
package monitoring
