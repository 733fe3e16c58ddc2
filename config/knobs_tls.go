package config

// TLS files of a client: for the master's RPC (store setup()), and for etcd (https://,
// etcds://) and Redis (rediss://) HA stores, which mooncake_master reads too when it starts.
// See docs/security-store.md.
var (
	TLSCAFile   = knob("MC_TLS_CA_FILE", String, "", StoreSetup, "PEM CAs trusted for the master's certificate: when set, the store client talks TLS to mooncake_master; also the CAs of https:// etcd and rediss:// Redis (default: the system's); also read at master start")
	TLSCertFile = knob("MC_TLS_CERT_FILE", String, "", StoreSetup, "PEM client certificate for a master started with --tls_ca_file, or an etcd/Redis that requires one; also read at master start")
	TLSKeyFile  = knob("MC_TLS_KEY_FILE", String, "", StoreSetup, "PEM private key of MC_TLS_CERT_FILE; also read at master start")
	StoreTLS    = knob("MC_STORE_TLS", String, "auto", StoreSetup, "TLS to mooncake_master: auto (when MC_TLS_CA_FILE is set), 1 (always; the system's CAs without MC_TLS_CA_FILE) or 0 (never, e.g. TLS to etcd only)")
)
