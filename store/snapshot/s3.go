package snapshot

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Config says where the S3 backend keeps objects.
type S3Config struct {
	// Endpoint is the server: "http://host:port" or "https://host" for S3-compatible
	// servers (MinIO, Ceph RGW, ...); a bare "host[:port]" means https. Empty means AWS S3
	// in Region.
	Endpoint string
	// Region, e.g. "us-east-1". Empty lets the client discover it.
	Region string
	// Bucket is required.
	Bucket string
	// Prefix is prepended to every object name ("team-a/" keeps objects under team-a/).
	Prefix string
	// AccessKey and SecretKey; when both are empty the AWS credential chain is used
	// (environment, ~/.aws/credentials, instance role).
	AccessKey, SecretKey string
	// CreateBucket makes the bucket when it does not exist, instead of failing.
	CreateBucket bool
}

// S3 keeps objects in an S3 bucket. A PUT is atomic and durable once acknowledged.
type S3 struct {
	cli    *minio.Client
	bucket string
	prefix string
	desc   string
}

// s3Timeout bounds one request when the caller's context has no deadline.
const s3Timeout = 60 * time.Second

// NewS3 connects and checks that the bucket exists (making it when cfg.CreateBucket).
func NewS3(ctx context.Context, cfg S3Config) (*S3, error) {
	if cfg.Bucket == "" {
		return nil, fmt.Errorf("snapshot: the s3 snapshot backend needs a bucket (MOONCAKE_SNAPSHOT_S3_BUCKET)")
	}
	host, secure := "s3.amazonaws.com", true
	lookup := minio.BucketLookupAuto
	if cfg.Endpoint != "" {
		ep := cfg.Endpoint
		if !strings.Contains(ep, "://") {
			ep = "https://" + ep
		}
		u, err := url.Parse(ep)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("snapshot: bad S3 endpoint %q (want http://host:port or https://host)", cfg.Endpoint)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return nil, fmt.Errorf("snapshot: S3 endpoint %q has scheme %q (want http or https)", cfg.Endpoint, u.Scheme)
		}
		if u.Path != "" && u.Path != "/" {
			return nil, fmt.Errorf("snapshot: S3 endpoint %q must not have a path; put the path in MOONCAKE_SNAPSHOT_S3_PREFIX", cfg.Endpoint)
		}
		host, secure = u.Host, u.Scheme == "https"
		// S3-compatible servers rarely have per-bucket DNS names.
		lookup = minio.BucketLookupPath
	}
	var creds *credentials.Credentials
	if cfg.AccessKey != "" || cfg.SecretKey != "" {
		creds = credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, "")
	} else {
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{},
			&credentials.FileAWSCredentials{},
			&credentials.IAM{},
		})
	}
	cli, err := minio.New(host, &minio.Options{Creds: creds, Secure: secure, Region: cfg.Region, BucketLookup: lookup})
	if err != nil {
		return nil, fmt.Errorf("snapshot: setting up the S3 client for %s: %w", host, err)
	}
	prefix := strings.TrimLeft(cfg.Prefix, "/")
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	s := &S3{cli: cli, bucket: cfg.Bucket, prefix: prefix,
		desc: fmt.Sprintf("s3 bucket %q at %s", cfg.Bucket, host)}
	if prefix != "" {
		s.desc = fmt.Sprintf("s3 bucket %q prefix %q at %s", cfg.Bucket, prefix, host)
	}
	cctx, cancel := withS3Timeout(ctx)
	defer cancel()
	exists, err := cli.BucketExists(cctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("snapshot: checking %s (are the endpoint and AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY right?): %w", s.desc, err)
	}
	if !exists {
		if !cfg.CreateBucket {
			return nil, fmt.Errorf("snapshot: %s does not exist; create it first", s.desc)
		}
		if err := cli.MakeBucket(cctx, cfg.Bucket, minio.MakeBucketOptions{Region: cfg.Region}); err != nil {
			return nil, fmt.Errorf("snapshot: creating %s: %w", s.desc, err)
		}
	}
	return s, nil
}

func withS3Timeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s3Timeout)
}

func (s *S3) String() string { return s.desc }

func (s *S3) Put(ctx context.Context, name string, data []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	ctx, cancel := withS3Timeout(ctx)
	defer cancel()
	_, err := s.cli.PutObject(ctx, s.bucket, s.prefix+name, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: "application/octet-stream", SendContentMd5: true})
	if err != nil {
		return fmt.Errorf("snapshot: writing %s to %s: %w", name, s, err)
	}
	return nil
}

func (s *S3) Get(ctx context.Context, name string) ([]byte, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	ctx, cancel := withS3Timeout(ctx)
	defer cancel()
	obj, err := s.cli.GetObject(ctx, s.bucket, s.prefix+name, minio.GetObjectOptions{})
	if err == nil {
		defer obj.Close()
		var b []byte
		b, err = io.ReadAll(obj)
		if err == nil {
			return b, nil
		}
	}
	if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
		return nil, fmt.Errorf("snapshot: %s in %s: %w", name, s, ErrNotFound)
	}
	return nil, fmt.Errorf("snapshot: reading %s from %s: %w", name, s, err)
}

func (s *S3) List(ctx context.Context, prefix string) ([]string, error) {
	ctx, cancel := withS3Timeout(ctx)
	defer cancel()
	var out []string
	for obj := range s.cli.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
		if obj.Err != nil {
			return nil, fmt.Errorf("snapshot: listing %q in %s: %w", prefix, s, obj.Err)
		}
		out = append(out, strings.TrimPrefix(obj.Key, s.prefix))
	}
	sort.Strings(out)
	return out, nil
}

func (s *S3) Delete(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	ctx, cancel := withS3Timeout(ctx)
	defer cancel()
	if err := s.cli.RemoveObject(ctx, s.bucket, s.prefix+name, minio.RemoveObjectOptions{}); err != nil {
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return nil
		}
		return fmt.Errorf("snapshot: deleting %s from %s: %w", name, s, err)
	}
	return nil
}

var _ Backend = (*S3)(nil)
