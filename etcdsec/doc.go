// Package etcdsec owns the security settings every etcd client of this project applies
// (the transfer engine's metadata store, the store's HA backend and snapshots' leader
// election alike), under upstream Mooncake's names:
//
//	MC_ETCD_CONF_FILE                 a file of "username=..." and "password=..." lines (etcd RBAC)
//	MC_ETCD_TLS_CA_CERT               the CA the etcd server's certificate must chain to: TLS on
//	MC_ETCD_TLS_SERVER_NAME           the name to verify the certificate against (SNI), e.g. when
//	                                  connecting by IP; needs TLS on
//	MC_ETCD_TLS_INSECURE_SKIP_VERIFY  "true": TLS without verifying the certificate (tests only)
//
// With none set, a client behaves as before (plain, no authentication). With TLS on, every
// endpoint is dialled over TLS, whatever its form (etcd://h:p, a bare h:p, http://...), as
// upstream's client does; https:// / etcds:// endpoints were TLS already (their CAs then come
// from MC_TLS_CA_FILE unless MC_ETCD_TLS_CA_CERT is set). An incomplete combination is an error
// when the client is created, never a silent fallback to plain text. The package reads no
// environment: package config fills [Options].
package etcdsec
