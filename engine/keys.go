package engine

import "os"

// KeyPrefix returns "mooncake/" or "mooncake/<MC_METADATA_CLUSTER_ID>/".
func KeyPrefix() string {
	if id := os.Getenv("MC_METADATA_CLUSTER_ID"); id != "" {
		return "mooncake/" + id + "/"
	}
	return "mooncake/"
}

// SegmentKey is the metadata key of a segment's descriptor: mooncake/[cluster/]ram/<segment>.
func SegmentKey(segment string) string { return KeyPrefix() + "ram/" + segment }

// RPCMetaKey is the metadata key of a server's endpoint: mooncake/[cluster/]rpc_meta/<name>,
// whose value is RPCMeta's JSON.
func RPCMetaKey(name string) string { return KeyPrefix() + "rpc_meta/" + name }

// RPCMeta is the value stored under RPCMetaKey.
type RPCMeta struct {
	IPOrHostName string `json:"ip_or_host_name"`
	RPCPort      int    `json:"rpc_port"`
}
