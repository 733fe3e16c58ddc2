package metadata

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdStore keeps each key as one etcd v3 key. It works with etcd 3.4 and later servers.
type etcdStore struct {
	endpoints string // for messages
	cli       *clientv3.Client
}

func openEtcd(endpoints []string) (*etcdStore, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: DefaultTimeout,
		// Errors come back to the caller; the client's own log lines would only be noise
		// inside a Python process.
		Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("metadata: connecting to etcd at %s: %w", strings.Join(endpoints, ","), err)
	}
	return &etcdStore{endpoints: strings.Join(endpoints, ","), cli: cli}, nil
}

// withTimeout gives ctx DefaultTimeout when it has no deadline of its own.
func withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, DefaultTimeout)
}

func (s *etcdStore) Get(ctx context.Context, key string) ([]byte, error) {
	if key == "" {
		return nil, fmt.Errorf("metadata: GET with an empty key")
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("metadata: GET key %q from etcd at %s: %w", key, s.endpoints, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("metadata: key %q in etcd at %s: %w", key, s.endpoints, ErrNotFound)
	}
	return resp.Kvs[0].Value, nil
}

func (s *etcdStore) Put(ctx context.Context, key string, value []byte) error {
	if key == "" {
		return fmt.Errorf("metadata: PUT with an empty key")
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	if _, err := s.cli.Put(ctx, key, string(value)); err != nil {
		return fmt.Errorf("metadata: PUT key %q to etcd at %s: %w", key, s.endpoints, err)
	}
	return nil
}

func (s *etcdStore) Delete(ctx context.Context, key string) error {
	if key == "" {
		return fmt.Errorf("metadata: DELETE with an empty key")
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	if _, err := s.cli.Delete(ctx, key); err != nil {
		return fmt.Errorf("metadata: DELETE key %q from etcd at %s: %w", key, s.endpoints, err)
	}
	return nil
}

func (s *etcdStore) Close() error {
	if err := s.cli.Close(); err != nil && err != context.Canceled {
		return fmt.Errorf("metadata: closing etcd client for %s: %w", s.endpoints, err)
	}
	return nil
}

var _ Store = (*etcdStore)(nil)
