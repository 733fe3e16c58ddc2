package ha

import (
	"context"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdOpLog keeps one key per appended batch, /oplog/<cluster>/batches/<first seq>, and
// the last sequence id in /oplog/<cluster>/last_seq, both written by one transaction that
// also checks the fence.
type etcdOpLog struct {
	cli     *clientv3.Client
	ep      Endpoints
	cfg     OpLogConfig
	viewKey string
	batches string // prefix
	lastKey string
}

func newEtcdOpLog(c *Conn, cfg OpLogConfig) *etcdOpLog {
	p := etcdOplogPrefix(cfg.ClusterID)
	return &etcdOpLog{cli: c.etcd, ep: c.ep, cfg: cfg, viewKey: etcdViewKey(cfg.ClusterID),
		batches: p + "batches/", lastKey: p + "last_seq"}
}

func (l *etcdOpLog) batchKey(seq uint64) string { return fmt.Sprintf("%s%020d", l.batches, seq) }

func (l *etcdOpLog) Append(ctx context.Context, fence View, entries []Entry) error {
	entries, err := checkAppend(entries)
	if err != nil || len(entries) == 0 {
		return err
	}
	// Split by size; every piece is one transaction.
	for start := 0; start < len(entries); {
		end, size := start, 0
		for end < len(entries) && (end == start || size+20+len(entries[end].Payload) <= l.cfg.MaxBatchBytes) {
			size += 20 + len(entries[end].Payload)
			end++
		}
		if err := l.appendBatch(ctx, fence, entries[start:end]); err != nil {
			return err
		}
		start = end
	}
	return nil
}

func (l *etcdOpLog) appendBatch(ctx context.Context, fence View, entries []Entry) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	first, last := entries[0].Seq, entries[len(entries)-1].Seq
	var fenceCmp []clientv3.Cmp
	if fence.Version != 0 {
		fenceCmp = []clientv3.Cmp{
			clientv3.Compare(clientv3.CreateRevision(l.viewKey), "=", int64(fence.Version)),
			clientv3.Compare(clientv3.Value(l.viewKey), "=", fence.Leader),
		}
	}
	put := []clientv3.Op{
		clientv3.OpPut(l.batchKey(first), string(encodeBatch(entries))),
		clientv3.OpPut(l.lastKey, strconv.FormatUint(last, 10)),
	}
	check := []clientv3.Op{clientv3.OpGet(l.viewKey), clientv3.OpGet(l.lastKey)}
	// The common case: last_seq holds first-1. An empty store (no last_seq) accepts any
	// first seq; that needs a second transaction the first time only.
	prevCmp := clientv3.Compare(clientv3.Value(l.lastKey), "=", strconv.FormatUint(first-1, 10))
	for try := 0; try < 2; try++ {
		resp, err := l.cli.Txn(ctx).If(append(fenceCmp, prevCmp)...).Then(put...).Else(check...).Commit()
		if err != nil {
			return fmt.Errorf("ha: appending oplog entries %d..%d to %s: %w", first, last, l.ep, err)
		}
		if resp.Succeeded {
			return nil
		}
		view, lastResp := resp.Responses[0].GetResponseRange(), resp.Responses[1].GetResponseRange()
		if fence.Version != 0 {
			if len(view.Kvs) == 0 {
				return fmt.Errorf("ha: appending oplog entries %d..%d: no master holds the leader key (view %d expired): %w", first, last, fence.Version, ErrFenced)
			}
			if kv := view.Kvs[0]; kv.CreateRevision != int64(fence.Version) || string(kv.Value) != fence.Leader {
				return fmt.Errorf("ha: appending oplog entries %d..%d: leader is now %s (view %d), not view %d: %w",
					first, last, kv.Value, kv.CreateRevision, fence.Version, ErrFenced)
			}
		}
		if len(lastResp.Kvs) == 0 && try == 0 {
			prevCmp = clientv3.Compare(clientv3.CreateRevision(l.lastKey), "=", 0)
			continue
		}
		cur := "none"
		if len(lastResp.Kvs) > 0 {
			cur = string(lastResp.Kvs[0].Value)
		}
		return fmt.Errorf("ha: appending oplog entries from %d: the log's last entry is %s, not %d: %w", first, cur, first-1, ErrSeqMismatch)
	}
	return fmt.Errorf("ha: appending oplog entries from %d: the log changed during the append: %w", first, ErrSeqMismatch)
}

func (l *etcdOpLog) LastSeq(ctx context.Context) (uint64, error) { return l.lastSeqAt(ctx, 0) }

// lastSeqAt reads last_seq at revision rev (0: the newest).
func (l *etcdOpLog) lastSeqAt(ctx context.Context, rev int64) (uint64, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := l.cli.Get(ctx, l.lastKey, clientv3.WithRev(rev))
	if err != nil {
		return 0, fmt.Errorf("ha: reading %s from %s: %w", l.lastKey, l.ep, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	n, err := strconv.ParseUint(string(resp.Kvs[0].Value), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("ha: %s holds %q, not a sequence id: %w", l.lastKey, resp.Kvs[0].Value, ErrCorrupt)
	}
	return n, nil
}

func (l *etcdOpLog) ReadFrom(ctx context.Context, seq uint64, limit int) ([]Entry, error) {
	entries, _, err := l.readFrom(ctx, seq, limit)
	return entries, err
}

// readFrom also returns the etcd revision the read saw.
func (l *etcdOpLog) readFrom(ctx context.Context, seq uint64, limit int) ([]Entry, int64, error) {
	seq, limit = readBounds(seq, limit)
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	// The batch holding seq is the last one starting at or before it.
	from := l.batchKey(seq)
	resp, err := l.cli.Get(ctx, l.batches, clientv3.WithRange(l.batchKey(seq+1)),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(1), clientv3.WithKeysOnly())
	if err != nil {
		return nil, 0, fmt.Errorf("ha: reading the oplog from %s: %w", l.ep, err)
	}
	if len(resp.Kvs) == 1 {
		from = string(resp.Kvs[0].Key)
	}
	// Everything below reads at this one revision (a response's header carries the
	// store's current revision, not the one a WithRev read saw).
	rev := resp.Header.Revision
	// Each batch holds at least one entry, so limit batches are enough; at most 64 (up to
	// 64 MaxBatchBytes) per read keeps memory bounded.
	nb := min(limit, 64)
	resp, err = l.cli.Get(ctx, from, clientv3.WithRange(clientv3.GetPrefixRangeEnd(l.batches)),
		clientv3.WithLimit(int64(nb)), clientv3.WithRev(rev))
	if err != nil {
		return nil, 0, fmt.Errorf("ha: reading the oplog from %s: %w", l.ep, err)
	}
	var out []Entry
	for _, kv := range resp.Kvs {
		batch, err := decodeBatch(kv.Value)
		if err != nil {
			return nil, 0, fmt.Errorf("ha: oplog key %s: %w", kv.Key, err)
		}
		for _, e := range batch {
			if e.Seq >= seq && len(out) < limit {
				out = append(out, e)
			}
		}
		if len(out) >= limit {
			break
		}
	}
	if err := checkRead(seq, out); err != nil {
		return nil, 0, err
	}
	if len(out) == 0 {
		// Nothing at or after seq. If the log's last entry (at the same revision) is at or
		// after seq, those entries were truncated.
		if last, err := l.lastSeqAt(ctx, rev); err == nil && last >= seq {
			return nil, 0, fmt.Errorf("ha: oplog from %d asked, entries up to %d were truncated: %w", seq, last, ErrCompacted)
		}
	}
	return out, rev, nil
}

func (l *etcdOpLog) Tail(ctx context.Context, seq uint64, fn func([]Entry) error) error {
	// Read everything available, then watch for the next batch from the read's revision.
	var rev int64
	read := func(ctx context.Context, seq uint64) ([]Entry, error) {
		entries, r, err := l.readFrom(ctx, seq, defaultReadLimit)
		rev = r
		return entries, err
	}
	return tail(ctx, seq, fn, read, func(ctx context.Context, _ uint64) { l.waitPut(ctx, rev) })
}

// waitPut blocks until some batch key is written after rev (or the watch fails).
func (l *etcdOpLog) waitPut(ctx context.Context, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := l.cli.Watch(clientv3.WithRequireLeader(wctx), l.batches, clientv3.WithPrefix(),
		clientv3.WithRev(rev+1), clientv3.WithFilterDelete())
	for wr := range wch {
		if err := wr.Err(); err != nil {
			sleepCtx(ctx, retryDelay(DefaultTTL))
			return err
		}
		if len(wr.Events) > 0 {
			return nil
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return sleepCtx(ctx, retryDelay(DefaultTTL))
}

func (l *etcdOpLog) Truncate(ctx context.Context, seq uint64) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := l.cli.Get(ctx, l.batches, clientv3.WithRange(l.batchKey(seq+1)),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(1), clientv3.WithKeysOnly())
	if err != nil {
		return fmt.Errorf("ha: truncating the oplog before %d on %s: %w", seq, l.ep, err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	end := string(resp.Kvs[0].Key)
	// Keep the batch that holds seq; drop every batch before it.
	if _, err := l.cli.Delete(ctx, l.batches, clientv3.WithRange(end)); err != nil {
		return fmt.Errorf("ha: truncating the oplog before %d on %s: %w", seq, l.ep, err)
	}
	return nil
}
