package config

import "github.com/mooncake-go/mooncake/etcdsec"

// etcd security, upstream's names (package etcdsec): read whenever an etcd client is created —
// an engine's metadata store, the store's HA backend (store setup(), master start).
var (
	EtcdConfFile           = knob("MC_ETCD_CONF_FILE", String, "", EngineCreation, "etcd RBAC: a file of username=... and password=... lines ('#' and blank lines ignored); also read at store setup() and master start")
	EtcdTLSCACert          = knob("MC_ETCD_TLS_CA_CERT", String, "", EngineCreation, "PEM CA of the etcd servers: when set, every etcd endpoint is dialled over TLS (etcd://, bare host:port, http:// too)")
	EtcdTLSServerName      = knob("MC_ETCD_TLS_SERVER_NAME", String, "", EngineCreation, "name the etcd server's certificate is verified against (SNI), e.g. when dialling by IP; needs TLS (MC_ETCD_TLS_CA_CERT or MC_ETCD_TLS_INSECURE_SKIP_VERIFY)")
	EtcdTLSInsecureSkipVer = knob("MC_ETCD_TLS_INSECURE_SKIP_VERIFY", Bool, "0", EngineCreation, "true: TLS to etcd without verifying its certificate (testing only)")
)

// Etcd returns the MC_ETCD_* settings every etcd client applies.
func Etcd() etcdsec.Options {
	return etcdsec.Options{
		ConfFile:           EtcdConfFile.Trimmed(),
		CACert:             EtcdTLSCACert.Trimmed(),
		ServerName:         EtcdTLSServerName.Trimmed(),
		InsecureSkipVerify: EtcdTLSInsecureSkipVer.Bool(),
	}
}
