package metadata

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// redisStore keeps each key as one Redis string (SET/GET/DEL), as Mooncake does.
type redisStore struct {
	addr string // for messages
	cli  *redis.Client
}

// openRedis parses redis://[user:password@]host:port[/db] (or rediss:// for TLS).
// o.RedisPassword and o.RedisDBIndex (MC_REDIS_PASSWORD, MC_REDIS_DB_INDEX) are used when the
// URL has no password or database index; a value in the URL wins.
func openRedis(conn string, o Options) (*redisStore, error) {
	u, err := url.Parse(conn)
	if err != nil {
		return nil, fmt.Errorf("metadata: bad Redis URL %q (want redis://[:password@]host:port[/db]): %w", conn, err)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("metadata: Redis URL %q has no host (want redis://[:password@]host:port[/db])", redactURL(u))
	}
	opts, err := redis.ParseURL(conn)
	if err != nil {
		return nil, fmt.Errorf("metadata: bad Redis URL %q (want redis://[:password@]host:port[/db]): %w", redactURL(u), err)
	}
	if _, hasPw := u.User.Password(); !hasPw {
		if pw := o.RedisPassword; pw != "" {
			opts.Password = pw
		}
	}
	if strings.Trim(u.Path, "/") == "" && u.Query().Get("db") == "" {
		if s := strings.TrimSpace(o.RedisDBIndex); s != "" {
			db, err := strconv.Atoi(s)
			if err != nil || db < 0 {
				return nil, fmt.Errorf("metadata: MC_REDIS_DB_INDEX=%q is not a database index (a number >= 0)", s)
			}
			opts.DB = db
		}
	}
	opts.DialTimeout = DefaultTimeout
	opts.ReadTimeout = DefaultTimeout
	opts.WriteTimeout = DefaultTimeout
	// Plain SET/GET/DEL need none of the newer handshakes; skipping them keeps older
	// servers (and their logs) quiet.
	opts.DisableIdentity = true
	opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return &redisStore{addr: opts.Addr, cli: redis.NewClient(opts)}, nil
}

func redactURL(u *url.URL) string { return u.Redacted() }

func (s *redisStore) Get(ctx context.Context, key string) ([]byte, error) {
	if key == "" {
		return nil, fmt.Errorf("metadata: GET with an empty key")
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	v, err := s.cli.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("metadata: key %q in Redis at %s: %w", key, s.addr, ErrNotFound)
	}
	if err != nil {
		return nil, s.opError("GET", key, "from", err)
	}
	return v, nil
}

func (s *redisStore) Put(ctx context.Context, key string, value []byte) error {
	if key == "" {
		return fmt.Errorf("metadata: PUT with an empty key")
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	if value == nil {
		value = []byte{}
	}
	if err := s.cli.Set(ctx, key, value, 0).Err(); err != nil {
		return s.opError("PUT", key, "to", err)
	}
	return nil
}

func (s *redisStore) Delete(ctx context.Context, key string) error {
	if key == "" {
		return fmt.Errorf("metadata: DELETE with an empty key")
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	if err := s.cli.Del(ctx, key).Err(); err != nil {
		return s.opError("DELETE", key, "from", err)
	}
	return nil
}

// opError words a failed operation, with a hint when the server refused the password.
func (s *redisStore) opError(op, key, prep string, err error) error {
	if msg := err.Error(); strings.HasPrefix(msg, "NOAUTH") || strings.HasPrefix(msg, "WRONGPASS") {
		return fmt.Errorf("metadata: %s key %q %s Redis at %s (check the password in the URL or MC_REDIS_PASSWORD): %w", op, key, prep, s.addr, err)
	}
	return fmt.Errorf("metadata: %s key %q %s Redis at %s: %w", op, key, prep, s.addr, err)
}

func (s *redisStore) Close() error {
	if err := s.cli.Close(); err != nil {
		return fmt.Errorf("metadata: closing Redis client for %s: %w", s.addr, err)
	}
	return nil
}

var _ Store = (*redisStore)(nil)
