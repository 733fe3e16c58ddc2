// Package snapshot stores point-in-time copies of the master's metadata so that a master
// (or a whole cluster) that restarts does not begin empty.
//
// It owns two things:
//
//   - Backend: where snapshot objects live. Local (a directory; every object is written to
//     a temporary file, fsynced and renamed into place, so a reader sees the old object or
//     the whole new one) and S3 (any S3-compatible server through minio-go; an S3 PUT is
//     already all-or-nothing).
//   - Manager: the layout, retention and validation of snapshots on a Backend.
//
// Layout, compatible with upstream Mooncake's:
//
//	mooncake_master_snapshot/<cluster_id>/latest.txt          id of the newest complete snapshot
//	mooncake_master_snapshot/<cluster_id>/<id>/data           the payload (opaque bytes)
//	mooncake_master_snapshot/<cluster_id>/<id>/manifest.json  size, sha256, last applied oplog seq
//
// The payload is opaque: the master's state machine encodes it and decodes it, this package
// never looks inside. A snapshot counts as complete only once its manifest exists, and the
// manifest is written after the payload, so a crash halfway leaves an incomplete snapshot
// that Restore skips. Snapshot ids sort by (last applied seq, creation time), so "newest"
// means "holds the most of the oplog".
//
// Restore tries snapshots newest first and returns the first whose manifest parses and whose
// payload matches the manifest's size and sha256; a corrupt or missing newest snapshot falls
// back to the one before it (Result.Skipped says why each newer one was passed over). After
// a successful Save, snapshots beyond Retention (default 2) are deleted, oldest first; the
// one just written is never deleted.
//
// Metrics (mooncake_master_snapshot_*) are prometheus collectors made by NewMetrics; the
// master registers them on its registry.
//
// Configuration (BackendOptions, filled by mooncake_master from the environment at start, as
// upstream; this package reads no environment): MOONCAKE_SNAPSHOT_LOCAL_PATH (local root, when
// no flag gives one); for S3 AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION,
// MOONCAKE_SNAPSHOT_S3_BUCKET, MOONCAKE_SNAPSHOT_S3_PREFIX and MOONCAKE_SNAPSHOT_S3_ENDPOINT
// (for S3-compatible servers such as MinIO).
//
// This package must not know the master's state format, and must not touch the oplog or
// leader election (store/ha).
package snapshot
