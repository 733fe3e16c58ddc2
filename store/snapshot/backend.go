package snapshot

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// ErrNotFound is wrapped by Backend.Get when the object does not exist.
var ErrNotFound = errors.New("snapshot object not found")

// Backend stores named objects. Names are slash-separated relative paths ("a/b/c"); no
// element may be empty, "." or "..".
//
// Implementations are safe for concurrent use.
type Backend interface {
	// Put stores data under name, replacing any object there. It is atomic: a reader sees
	// either the previous object (or none) or all of data, never a part. When Put returns
	// nil the object is durable.
	Put(ctx context.Context, name string, data []byte) error
	// Get returns the object's bytes; a missing object gives an error wrapping ErrNotFound.
	Get(ctx context.Context, name string) ([]byte, error)
	// List returns the names of all objects whose name begins with prefix, sorted.
	List(ctx context.Context, prefix string) ([]string, error)
	// Delete removes the object; deleting a missing object is not an error.
	Delete(ctx context.Context, name string) error
	// String describes where the objects live, for messages ("local directory /x",
	// "s3 bucket b at host:port").
	String() string
}

// Backend kinds accepted by OpenBackend.
const (
	KindLocal = "local"
	KindS3    = "s3"
)

// BackendOptions are the settings OpenBackend takes besides the backend's kind. The package
// reads no environment: cmd/mooncake_master fills them from the knobs named below (package
// config).
type BackendOptions struct {
	// LocalRoot is the directory of the "local" backend (--snapshot_backup_dir, else
	// MOONCAKE_SNAPSHOT_LOCAL_PATH, else DefaultLocalRoot).
	LocalRoot string
	// S3 configures the "s3" backend (MOONCAKE_SNAPSHOT_S3_*, AWS_*); Bucket is required.
	S3 S3Config
}

// DefaultLocalRoot is the local backend's directory when none is configured, as upstream's
// LocalFileBackend (a directory that does not survive a reboot on many systems: production
// setups pass --snapshot_backup_dir or MOONCAKE_SNAPSHOT_LOCAL_PATH).
const DefaultLocalRoot = "/tmp/mooncake_snapshots"

// localRoot is the local backend's directory: LocalRoot, else DefaultLocalRoot.
func (o BackendOptions) localRoot() string {
	if o.LocalRoot == "" {
		return DefaultLocalRoot
	}
	return o.LocalRoot
}

// OpenBackend opens the backend named by kind ("local" or "s3") with o's settings.
func OpenBackend(ctx context.Context, kind string, o BackendOptions) (Backend, error) {
	switch strings.ToLower(strings.TrimSpace(kind)) {
	case KindLocal, "":
		return NewLocal(o.localRoot())
	case KindS3:
		if o.S3.Bucket == "" {
			return nil, fmt.Errorf("snapshot: the s3 snapshot backend needs a bucket: set MOONCAKE_SNAPSHOT_S3_BUCKET")
		}
		return NewS3(ctx, o.S3)
	default:
		return nil, fmt.Errorf("snapshot: unknown snapshot backend %q (want %q or %q)", kind, KindLocal, KindS3)
	}
}

// checkName validates an object name.
func checkName(name string) error {
	if name == "" {
		return fmt.Errorf("snapshot: empty object name")
	}
	if strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") {
		return fmt.Errorf("snapshot: object name %q must be a relative path without a trailing slash", name)
	}
	for _, el := range strings.Split(name, "/") {
		if el == "" || el == "." || el == ".." {
			return fmt.Errorf("snapshot: object name %q has an empty, \".\" or \"..\" element", name)
		}
		if strings.HasPrefix(el, tmpPrefix) {
			return fmt.Errorf("snapshot: object name %q uses the reserved prefix %q", name, tmpPrefix)
		}
	}
	return nil
}
