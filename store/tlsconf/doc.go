// Package tlsconf owns turning PEM files named by flags and knobs into crypto/tls
// configurations: the master's server side (--tls_cert_file, --tls_key_file, --tls_ca_file)
// and a client's side (MC_TLS_CA_FILE, MC_TLS_CERT_FILE, MC_TLS_KEY_FILE) for the master's RPC
// and for etcd/Redis. It reads no environment: the callers pass the file names. Every error
// names the flag or knob the file came from.
package tlsconf
