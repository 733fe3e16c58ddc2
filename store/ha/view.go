package ha

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultPollInterval is how often a Redis ViewWatcher reads the view.
const DefaultPollInterval = time.Second

// ReadView reads the cluster's current view (the zero View when no master leads).
func (c *Conn) ReadView(ctx context.Context, clusterID string) (View, error) {
	if err := checkClusterID(clusterID); err != nil {
		return View{}, err
	}
	v, _, err := c.readView(ctx, clusterID)
	return v, err
}

// readView also returns the etcd revision of the read (0 for Redis).
func (c *Conn) readView(ctx context.Context, clusterID string) (View, int64, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	if c.etcd != nil {
		key := etcdViewKey(clusterID)
		resp, err := c.etcd.Get(ctx, key)
		if err != nil {
			return View{}, 0, fmt.Errorf("ha: reading leader key %s from %s: %w", key, c.ep, err)
		}
		if len(resp.Kvs) == 0 {
			return View{}, resp.Header.Revision, nil
		}
		kv := resp.Kvs[0]
		return View{Leader: string(kv.Value), Version: uint64(kv.CreateRevision)}, resp.Header.Revision, nil
	}
	key, vkey := redisViewKey(clusterID), redisVersionKey(clusterID)
	vals, err := c.redis.MGet(ctx, key, vkey).Result()
	if err != nil {
		return View{}, 0, fmt.Errorf("ha: reading leader key %s from %s: %w", key, c.ep, err)
	}
	leader, _ := vals[0].(string)
	if leader == "" {
		return View{}, 0, nil
	}
	verStr, _ := vals[1].(string)
	ver, err := strconv.ParseUint(verStr, 10, 64)
	if err != nil {
		return View{}, 0, fmt.Errorf("ha: Redis key %s holds %q, not a version number", vkey, verStr)
	}
	return View{Leader: leader, Version: ver}, 0, nil
}

// ViewWatcher follows the cluster's view: who leads, and changes to it.
type ViewWatcher struct {
	conn    *Conn
	ownConn bool
	cluster string
	poll    time.Duration
	dial    Options // WatchView's store settings (WithOptions)

	mu      sync.Mutex
	cur     View
	changes chan View
	cancel  context.CancelFunc
	done    chan struct{}
}

// WatchOption tunes a ViewWatcher.
type WatchOption func(*ViewWatcher)

// WithOptions gives WatchView the store settings its endpoints leave out (a Redis password or
// database); a watcher on an existing Conn ignores it.
func WithOptions(o Options) WatchOption {
	return func(w *ViewWatcher) { w.dial = o }
}

// WithPollInterval sets how often a Redis watcher reads the view (default 1 s; etcd
// watchers are pushed changes and ignore it).
func WithPollInterval(d time.Duration) WatchOption {
	return func(w *ViewWatcher) {
		if d > 0 {
			w.poll = d
		}
	}
}

// WatchView dials endpoints ("etcd://h:p,h:p", "redis://h:p", or any form ParseEndpoints
// takes) and follows the view of clusterID. Close releases the connection.
func WatchView(ctx context.Context, endpoints, clusterID string, opts ...WatchOption) (*ViewWatcher, error) {
	var pre ViewWatcher
	for _, o := range opts {
		o(&pre)
	}
	c, err := DialWith(ctx, endpoints, pre.dial)
	if err != nil {
		return nil, err
	}
	w, err := c.WatchView(ctx, clusterID, opts...)
	if err != nil {
		c.Close()
		return nil, err
	}
	w.ownConn = true
	return w, nil
}

// WatchView follows the view of clusterID on this connection. The first read happens
// before it returns, so Current is meaningful at once.
func (c *Conn) WatchView(ctx context.Context, clusterID string, opts ...WatchOption) (*ViewWatcher, error) {
	if err := checkClusterID(clusterID); err != nil {
		return nil, err
	}
	w := &ViewWatcher{conn: c, cluster: clusterID, poll: DefaultPollInterval,
		changes: make(chan View, 1), done: make(chan struct{})}
	for _, o := range opts {
		o(w)
	}
	v, rev, err := c.readView(ctx, clusterID)
	if err != nil {
		return nil, err
	}
	w.cur = v
	wctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	if c.etcd != nil {
		go w.runEtcd(wctx, rev)
	} else {
		go w.runRedis(wctx)
	}
	return w, nil
}

// Current returns the latest view seen (the zero View when no master leads).
func (w *ViewWatcher) Current() View {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur
}

// Changes delivers each new view. It holds only the latest: a slow reader skips
// intermediate views, never the newest. It is closed by Close.
func (w *ViewWatcher) Changes() <-chan View { return w.changes }

// WaitLeader blocks until some master leads and returns its view. Several goroutines may
// wait at once (each also polls Current: the Changes channel wakes only one reader).
func (w *ViewWatcher) WaitLeader(ctx context.Context) (View, error) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if v := w.Current(); v.Leader != "" {
			return v, nil
		}
		select {
		case <-ctx.Done():
			return View{}, fmt.Errorf("ha: waiting for a leader of cluster %q: %w", w.cluster, ctx.Err())
		case <-t.C:
		case _, ok := <-w.changes:
			if !ok {
				return View{}, fmt.Errorf("ha: view watcher of cluster %q is closed", w.cluster)
			}
		}
	}
}

// Close stops watching (and closes the connection when WatchView dialled it).
func (w *ViewWatcher) Close() error {
	w.cancel()
	<-w.done
	if w.ownConn {
		return w.conn.Close()
	}
	return nil
}

func (w *ViewWatcher) publish(v View) {
	w.mu.Lock()
	if v == w.cur {
		w.mu.Unlock()
		return
	}
	w.cur = v
	w.mu.Unlock()
	select {
	case <-w.changes:
	default:
	}
	w.changes <- v
}

func (w *ViewWatcher) runEtcd(ctx context.Context, rev int64) {
	defer close(w.done)
	defer close(w.changes)
	cli, key := w.conn.etcd, etcdViewKey(w.cluster)
	for ctx.Err() == nil {
		wch := cli.Watch(clientv3.WithRequireLeader(ctx), key, clientv3.WithRev(rev+1))
		for wr := range wch {
			if wr.Err() != nil {
				break
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					w.publish(View{})
				} else {
					w.publish(View{Leader: string(ev.Kv.Value), Version: uint64(ev.Kv.CreateRevision)})
				}
			}
			rev = wr.Header.Revision
		}
		if sleepCtx(ctx, 200*time.Millisecond) != nil {
			return
		}
		// Compaction, a member without quorum, or a reconnect: read afresh.
		v, r, err := w.conn.readView(ctx, w.cluster)
		if err != nil {
			sleepCtx(ctx, time.Second)
			continue
		}
		w.publish(v)
		rev = r
	}
}

func (w *ViewWatcher) runRedis(ctx context.Context) {
	defer close(w.done)
	defer close(w.changes)
	tick := time.NewTicker(w.poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		v, _, err := w.conn.readView(ctx, w.cluster)
		if err != nil && !errors.Is(err, redis.Nil) {
			continue // keep the last view; Redis may be restarting
		}
		w.publish(v)
	}
}
