package metadata

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/mooncake-go/mooncake/etcdsec"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// etcdAttemptTimeout caps one try of an operation. When a cluster loses its leader, a
// request already forwarded to it only fails after the server's own timeout (7 s by
// default); trying again after a shorter wait reaches the newly elected leader instead.
// Every operation here is idempotent (last write wins), so a retry is safe.
const etcdAttemptTimeout = 2 * time.Second

// etcdStore keeps each key as one etcd v3 key. It works with etcd 3.4 and later servers.
type etcdStore struct {
	endpoints string // for messages
	cli       *clientv3.Client
}

func openEtcd(endpoints []string, sec etcdsec.Options) (*etcdStore, error) {
	cfg := clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: DefaultTimeout,
		// Errors come back to the caller; the client's own log lines would only be noise
		// inside a Python process.
		Logger: zap.NewNop(),
	}
	if err := sec.Apply(&cfg); err != nil {
		return nil, fmt.Errorf("metadata: etcd at %s: %w", strings.Join(endpoints, ","), err)
	}
	cli, err := clientv3.New(cfg)
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

// retry runs op until it succeeds, fails for a reason a retry cannot fix, or ctx ends.
func retry(ctx context.Context, op func(ctx context.Context) error) error {
	backoff := 50 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, etcdAttemptTimeout)
		err := op(actx)
		cancel()
		if err == nil || ctx.Err() != nil || !transientEtcdError(err) {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// transientEtcdError reports errors seen while a cluster elects a leader or a member is
// unreachable.
func transientEtcdError(err error) bool {
	switch {
	case errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, rpctypes.ErrNoLeader),
		errors.Is(err, rpctypes.ErrLeaderChanged),
		errors.Is(err, rpctypes.ErrTimeout),
		errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail),
		errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost):
		return true
	}
	c := status.Code(err)
	return c == codes.Unavailable || c == codes.DeadlineExceeded
}

func (s *etcdStore) Get(ctx context.Context, key string) ([]byte, error) {
	if key == "" {
		return nil, fmt.Errorf("metadata: GET with an empty key")
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	var resp *clientv3.GetResponse
	err := retry(ctx, func(ctx context.Context) (err error) {
		resp, err = s.cli.Get(ctx, key)
		return err
	})
	if err != nil {
		return nil, s.opError("GET", key, "from", err)
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
	err := retry(ctx, func(ctx context.Context) error {
		_, err := s.cli.Put(ctx, key, string(value))
		return err
	})
	if err != nil {
		return s.opError("PUT", key, "to", err)
	}
	return nil
}

func (s *etcdStore) Delete(ctx context.Context, key string) error {
	if key == "" {
		return fmt.Errorf("metadata: DELETE with an empty key")
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	err := retry(ctx, func(ctx context.Context) error {
		_, err := s.cli.Delete(ctx, key)
		return err
	})
	if err != nil {
		return s.opError("DELETE", key, "from", err)
	}
	return nil
}

// opError words a failed operation; a deadline gets a hint, since that is what an etcd
// that is down or unreachable looks like from here.
func (s *etcdStore) opError(op, key, prep string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("metadata: %s key %q %s etcd at %s: no answer before the deadline (is etcd running and reachable there?): %w", op, key, prep, s.endpoints, err)
	}
	return fmt.Errorf("metadata: %s key %q %s etcd at %s: %w", op, key, prep, s.endpoints, err)
}

func (s *etcdStore) Close() error {
	if err := s.cli.Close(); err != nil && err != context.Canceled {
		return fmt.Errorf("metadata: closing etcd client for %s: %w", s.endpoints, err)
	}
	return nil
}

var _ Store = (*etcdStore)(nil)
