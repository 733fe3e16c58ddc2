package ha

import (
	"fmt"
	"strings"
)

// checkClusterID rejects cluster ids that would make ambiguous keys.
func checkClusterID(id string) error {
	if id == "" {
		return fmt.Errorf("ha: cluster id is empty (the master's --cluster_id)")
	}
	if strings.ContainsAny(id, "\x00\n") {
		return fmt.Errorf("ha: cluster id %q contains a NUL or newline", id)
	}
	return nil
}

// etcdViewKey is upstream's leader key.
func etcdViewKey(cluster string) string { return "mooncake-store/" + cluster + "/master_view" }

func etcdOplogPrefix(cluster string) string { return "/oplog/" + cluster + "/" }

// redisTag is the Redis Cluster hash tag for a cluster id: braces inside the id would end
// the tag early, so they become '_'.
func redisTag(cluster string) string {
	return "{" + strings.NewReplacer("{", "_", "}", "_").Replace(cluster) + "}"
}

func redisViewKey(cluster string) string {
	return "mooncake-store/" + redisTag(cluster) + "/master_view"
}

func redisVersionKey(cluster string) string {
	return "mooncake-store/" + redisTag(cluster) + "/master_view_version"
}

func redisOplogKey(cluster string) string { return "mooncake-store/" + redisTag(cluster) + "/oplog" }

func redisOplogLastKey(cluster string) string {
	return "mooncake-store/" + redisTag(cluster) + "/oplog_last_seq"
}
