package engine

// KeyPrefix returns "mooncake/", or "mooncake/<cluster>/" for a non-empty cluster
// (Config.ClusterID, MC_METADATA_CLUSTER_ID).
func KeyPrefix(cluster string) string {
	if cluster != "" {
		return "mooncake/" + cluster + "/"
	}
	return "mooncake/"
}

// SegmentKey is the metadata key of a segment's descriptor: mooncake/[cluster/]ram/<segment>.
func SegmentKey(cluster, segment string) string { return KeyPrefix(cluster) + "ram/" + segment }

// RPCMetaKey is the metadata key of a server's endpoint: mooncake/[cluster/]rpc_meta/<name>,
// whose value is RPCMeta's JSON.
func RPCMetaKey(cluster, name string) string { return KeyPrefix(cluster) + "rpc_meta/" + name }

// RPCMeta is the value stored under RPCMetaKey.
type RPCMeta struct {
	IPOrHostName string `json:"ip_or_host_name"`
	RPCPort      int    `json:"rpc_port"`
}
