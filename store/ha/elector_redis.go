package ha

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// campaignScript: SET view NX PX ttl; on success INCR the version and return it, else 0.
var campaignScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0`)

// extendScript: if the view is still ours (address and version), extend it; 1 or 0.
var extendScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('GET', KEYS[2]) == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
return 0`)

// resignScript: delete the view if it is still ours.
var resignScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('GET', KEYS[2]) == ARGV[2] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

type redisElector struct {
	campaigner
	cli                 redis.UniversalClient
	viewKey, versionKey string
}

func newRedisElector(cli redis.UniversalClient, cfg ElectorConfig) *redisElector {
	return &redisElector{campaigner: campaigner{cfg: cfg}, cli: cli, viewKey: redisViewKey(cfg.ClusterID), versionKey: redisVersionKey(cfg.ClusterID)}
}

func (e *redisElector) Campaign(ctx context.Context) (Leadership, error) {
	log := e.cfg.Logger.With("cluster_id", e.cfg.ClusterID, "address", e.cfg.Address)
	ttl := e.cfg.TTL
	ttlMs := strconv.FormatInt(ttl.Milliseconds(), 10)
	keys := []string{e.viewKey, e.versionKey}
	// Redis has no watch that survives every deployment (keyspace events are off by
	// default), so a standby polls at a modest interval.
	poll := retryDelay(ttl)
	for {
		if err := e.stopped(ctx); err != nil {
			return nil, err
		}
		rctx, cancel := withTimeout(ctx)
		sent := time.Now()
		v, err := campaignScript.Run(rctx, e.cli, keys, e.cfg.Address, ttlMs).Int64()
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("mooncake master campaign attempt failed; retrying", "err", err)
			}
		}
		if err != nil || v == 0 {
			if sleepCtx(ctx, poll) != nil {
				return nil, fmt.Errorf("ha: campaign for cluster %q: %w", e.cfg.ClusterID, ctx.Err())
			}
			continue
		}
		version := strconv.FormatInt(v, 10)
		view := View{Leader: e.cfg.Address, Version: uint64(v)}
		renew := func(ctx context.Context) (time.Duration, error) {
			ok, err := extendScript.Run(ctx, e.cli, keys, e.cfg.Address, version, ttlMs).Int64()
			if err != nil {
				return 0, err
			}
			if ok == 0 {
				return 0, fmt.Errorf("%w: Redis key %s expired or was taken over", ErrLeaderKeyLost, e.viewKey)
			}
			return ttl, nil
		}
		resign := func(ctx context.Context) error {
			err := resignScript.Run(ctx, e.cli, keys, e.cfg.Address, version).Err()
			if errors.Is(err, redis.Nil) {
				return nil
			}
			return err
		}
		t := newTerm(view, ttl, sent, log, renew, resign, nil)
		won, err := e.serve(ctx, t, log)
		if err != nil {
			return nil, err
		}
		if won != nil {
			return won, nil
		}
	}
}
