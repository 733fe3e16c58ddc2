package ha

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdElector campaigns with a create-if-absent transaction on the leader key.
type etcdElector struct {
	campaigner
	cli *clientv3.Client
	key string
}

// NewElector makes an Elector on this connection's store.
func (c *Conn) NewElector(cfg ElectorConfig) (Elector, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if c.etcd != nil {
		return &etcdElector{campaigner: campaigner{cfg: cfg}, cli: c.etcd, key: etcdViewKey(cfg.ClusterID)}, nil
	}
	return newRedisElector(c.redis, cfg), nil
}

func (e *etcdElector) Campaign(ctx context.Context) (Leadership, error) {
	ttlSec := int64((e.cfg.TTL + time.Second - 1) / time.Second)
	log := e.cfg.Logger.With("cluster_id", e.cfg.ClusterID, "address", e.cfg.Address)
	for {
		if err := e.stopped(ctx); err != nil {
			return nil, err
		}
		t, watchRev, err := e.try(ctx, ttlSec, log)
		if err != nil {
			log.Warn("mooncake master campaign attempt failed; retrying", "err", err)
			if sleepCtx(ctx, retryDelay(e.cfg.TTL)) != nil {
				return nil, fmt.Errorf("ha: campaign for cluster %q: %w (last error: %v)", e.cfg.ClusterID, ctx.Err(), err)
			}
			continue
		}
		if t == nil {
			// Someone else leads: wait for the key to go, then try again.
			if err := e.waitDeleted(ctx, watchRev); err != nil && ctx.Err() != nil {
				return nil, fmt.Errorf("ha: campaign for cluster %q: %w", e.cfg.ClusterID, ctx.Err())
			}
			continue
		}
		won, err := e.serve(ctx, t, log)
		if err != nil {
			return nil, err
		}
		if won != nil {
			return won, nil
		}
	}
}

// try makes one attempt. It returns a term when this master won; otherwise the revision
// from which to watch the current leader key.
func (e *etcdElector) try(ctx context.Context, ttlSec int64, log *slog.Logger) (*term, int64, error) {
	rctx, cancel := withTimeout(ctx)
	defer cancel()
	sent := time.Now()
	lease, err := e.cli.Grant(rctx, ttlSec)
	if err != nil {
		return nil, 0, fmt.Errorf("ha: granting a %d s lease from etcd: %w", ttlSec, err)
	}
	resp, err := e.cli.Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(e.key), "=", 0)).
		Then(clientv3.OpPut(e.key, e.cfg.Address, clientv3.WithLease(lease.ID))).
		Else(clientv3.OpGet(e.key)).
		Commit()
	if err != nil || !resp.Succeeded {
		e.revoke(lease.ID)
		if err != nil {
			return nil, 0, fmt.Errorf("ha: creating leader key %s: %w", e.key, err)
		}
		return nil, resp.Header.Revision, nil
	}
	version := uint64(resp.Header.Revision) // the put's revision is the key's create revision
	ttl := time.Duration(lease.TTL) * time.Second
	view := View{Leader: e.cfg.Address, Version: version}
	wctx, wcancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go e.watchOwn(wctx, int64(version), gone)
	renew := func(ctx context.Context) (time.Duration, error) {
		ka, err := e.cli.KeepAliveOnce(ctx, lease.ID)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return 0, fmt.Errorf("%w: etcd lease %x not found", ErrLeaderKeyLost, lease.ID)
		}
		if err != nil {
			return 0, err
		}
		if ka.TTL <= 0 {
			return 0, fmt.Errorf("%w: etcd lease %x expired", ErrLeaderKeyLost, lease.ID)
		}
		return time.Duration(ka.TTL) * time.Second, nil
	}
	resign := func(ctx context.Context) error {
		defer wcancel()
		// Delete only our own key, then drop the lease.
		_, err := e.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(e.key), "=", int64(version))).
			Then(clientv3.OpDelete(e.key)).Commit()
		if _, rerr := e.cli.Revoke(ctx, lease.ID); rerr != nil && !errors.Is(rerr, rpctypes.ErrLeaseNotFound) && err == nil {
			err = rerr
		}
		return err
	}
	t := newTerm(view, ttl, sent, log, renew, resign, gone)
	go func() { <-t.lost; wcancel() }()
	return t, 0, nil
}

func (e *etcdElector) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	e.cli.Revoke(ctx, id)
}

// watchOwn reports on gone when the leader key stops being ours (deleted, or re-created by
// another lease). It ends quietly when ctx ends.
func (e *etcdElector) watchOwn(ctx context.Context, createRev int64, gone chan<- error) {
	rev := createRev + 1
	for ctx.Err() == nil {
		wch := e.cli.Watch(clientv3.WithRequireLeader(ctx), e.key, clientv3.WithRev(rev))
		for wr := range wch {
			if err := wr.Err(); err != nil {
				break // compacted or the member lost quorum: re-check below
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE || ev.Kv.CreateRevision != createRev {
					gone <- fmt.Errorf("%w: leader key %s was deleted or replaced at revision %d", ErrLeaderKeyLost, e.key, ev.Kv.ModRevision)
					return
				}
			}
			rev = wr.Header.Revision + 1
		}
		if ctx.Err() != nil {
			return
		}
		// Re-read the key before watching again.
		gctx, cancel := context.WithTimeout(ctx, DefaultTimeout)
		resp, err := e.cli.Get(gctx, e.key)
		cancel()
		if err != nil {
			// The store is unreachable: the lease deadline decides.
			sleepCtx(ctx, time.Second)
			continue
		}
		if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != createRev {
			gone <- fmt.Errorf("%w: leader key %s is no longer ours", ErrLeaderKeyLost, e.key)
			return
		}
		rev = resp.Header.Revision + 1
	}
}

// waitDeleted blocks until the leader key is deleted (at a revision after rev), an error
// occurs, or ctx ends.
func (e *etcdElector) waitDeleted(ctx context.Context, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := e.cli.Watch(clientv3.WithRequireLeader(wctx), e.key, clientv3.WithRev(rev+1))
	for wr := range wch {
		if err := wr.Err(); err != nil {
			sleepCtx(ctx, retryDelay(e.cfg.TTL))
			return err
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				return nil
			}
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// The watch ended (client closing?): avoid spinning.
	return sleepCtx(ctx, retryDelay(e.cfg.TTL))
}
