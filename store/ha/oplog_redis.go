package ha

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// appendScript checks the fence and the log's last seq, then XADDs every entry and moves
// oplog_last_seq, all atomically.
//
// KEYS: view, view version, stream, last seq.
// ARGV: fence leader ("" = no fence), fence version, expected previous seq, new last seq,
// then seq, type, crc, payload per entry.
// Returns {1, last} on success, {-1, holder} when fenced, {-2, last} on a seq mismatch.
var appendScript = redis.NewScript(`
if ARGV[1] ~= '' then
  local holder = redis.call('GET', KEYS[1])
  if holder ~= ARGV[1] or redis.call('GET', KEYS[2]) ~= ARGV[2] then
    return {-1, holder or ''}
  end
end
local last = redis.call('GET', KEYS[4])
if last and last ~= ARGV[3] then
  return {-2, last}
end
for i = 5, #ARGV, 4 do
  redis.call('XADD', KEYS[3], ARGV[i] .. '-0', 't', ARGV[i+1], 'c', ARGV[i+2], 'p', ARGV[i+3])
end
redis.call('SET', KEYS[4], ARGV[4])
return {1, ARGV[4]}`)

// redisOpLog keeps one stream entry per oplog entry (id "<seq>-0", fields t, c, p) and
// the last seq in a separate key that survives trimming.
type redisOpLog struct {
	cli  redis.UniversalClient
	ep   Endpoints
	cfg  OpLogConfig
	keys []string // view, version, stream, last
}

func newRedisOpLog(c *Conn, cfg OpLogConfig) *redisOpLog {
	id := cfg.ClusterID
	return &redisOpLog{cli: c.redis, ep: c.ep, cfg: cfg,
		keys: []string{redisViewKey(id), redisVersionKey(id), redisOplogKey(id), redisOplogLastKey(id)}}
}

func (l *redisOpLog) Append(ctx context.Context, fence View, entries []Entry) error {
	entries, err := checkAppend(entries)
	if err != nil || len(entries) == 0 {
		return err
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	first, last := entries[0].Seq, entries[len(entries)-1].Seq
	args := make([]any, 0, 4+4*len(entries))
	if fence.Version != 0 {
		args = append(args, fence.Leader, strconv.FormatUint(fence.Version, 10))
	} else {
		args = append(args, "", "")
	}
	args = append(args, strconv.FormatUint(first-1, 10), strconv.FormatUint(last, 10))
	for _, e := range entries {
		args = append(args, strconv.FormatUint(e.Seq, 10), strconv.FormatUint(uint64(e.Type), 10),
			strconv.FormatUint(uint64(e.CRC), 10), e.Payload)
	}
	var sc redis.Scripter = l.cli
	var conn *redis.Conn
	if l.cfg.RedisWaitReplicas > 0 {
		// WAIT counts the writes of its own connection, so run both on one.
		conn, err = l.stickyConn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		sc = conn
	}
	res, err := appendScript.Run(ctx, sc, l.keys, args...).Slice()
	if err != nil {
		return fmt.Errorf("ha: appending oplog entries %d..%d to %s: %w", first, last, l.ep, err)
	}
	code, _ := res[0].(int64)
	info, _ := res[1].(string)
	switch code {
	case 1:
	case -1:
		if info == "" {
			return fmt.Errorf("ha: appending oplog entries %d..%d: no master holds the leader key (view %d expired): %w", first, last, fence.Version, ErrFenced)
		}
		return fmt.Errorf("ha: appending oplog entries %d..%d: leader key is held by %s, not view %d of %s: %w",
			first, last, info, fence.Version, fence.Leader, ErrFenced)
	case -2:
		return fmt.Errorf("ha: appending oplog entries from %d: the log's last entry is %s, not %d: %w", first, info, first-1, ErrSeqMismatch)
	default:
		return fmt.Errorf("ha: appending oplog entries %d..%d: unexpected reply %v from %s", first, last, res, l.ep)
	}
	if conn != nil {
		n, err := conn.Wait(ctx, l.cfg.RedisWaitReplicas, l.cfg.RedisWaitTimeout).Result()
		if err != nil {
			return fmt.Errorf("ha: waiting for Redis replicas to acknowledge oplog entries %d..%d: %w", first, last, err)
		}
		if n < int64(l.cfg.RedisWaitReplicas) {
			return fmt.Errorf("ha: oplog entries %d..%d reached %d Redis replicas within %s, want %d",
				first, last, n, l.cfg.RedisWaitTimeout, l.cfg.RedisWaitReplicas)
		}
	}
	return nil
}

// stickyConn returns one connection to the node that holds the oplog keys.
func (l *redisOpLog) stickyConn(ctx context.Context) (*redis.Conn, error) {
	switch c := l.cli.(type) {
	case *redis.Client:
		return c.Conn(), nil
	case *redis.ClusterClient:
		node, err := c.MasterForKey(ctx, l.keys[2])
		if err != nil {
			return nil, fmt.Errorf("ha: finding the Redis Cluster node for %s: %w", l.keys[2], err)
		}
		return node.Conn(), nil
	default:
		return nil, fmt.Errorf("ha: RedisWaitReplicas needs a plain or cluster Redis client, not %T", l.cli)
	}
}

func (l *redisOpLog) LastSeq(ctx context.Context) (uint64, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	s, err := l.cli.Get(ctx, l.keys[3]).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("ha: reading %s from %s: %w", l.keys[3], l.ep, err)
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("ha: %s holds %q, not a sequence id: %w", l.keys[3], s, ErrCorrupt)
	}
	return n, nil
}

func parseStreamEntry(m redis.XMessage) (Entry, error) {
	seqStr, _, _ := strings.Cut(m.ID, "-")
	seq, err := strconv.ParseUint(seqStr, 10, 64)
	if err != nil {
		return Entry{}, fmt.Errorf("ha: oplog stream id %q: %w", m.ID, ErrCorrupt)
	}
	t, err1 := strconv.ParseUint(fmt.Sprint(m.Values["t"]), 10, 32)
	c, err2 := strconv.ParseUint(fmt.Sprint(m.Values["c"]), 10, 32)
	p, ok := m.Values["p"].(string)
	if err1 != nil || err2 != nil || !ok {
		return Entry{}, fmt.Errorf("ha: oplog stream entry %s has bad fields: %w", m.ID, ErrCorrupt)
	}
	return Entry{Seq: seq, Type: uint32(t), CRC: uint32(c), Payload: []byte(p)}, nil
}

func (l *redisOpLog) ReadFrom(ctx context.Context, seq uint64, limit int) ([]Entry, error) {
	seq, limit = readBounds(seq, limit)
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	// Read the stream and the last seq together, so an append in between cannot make a
	// not-yet-seen entry look truncated.
	var xr *redis.XMessageSliceCmd
	var lastCmd *redis.StringCmd
	_, err := l.cli.TxPipelined(ctx, func(p redis.Pipeliner) error {
		xr = p.XRangeN(ctx, l.keys[2], strconv.FormatUint(seq, 10)+"-0", "+", int64(limit))
		lastCmd = p.Get(ctx, l.keys[3])
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("ha: reading the oplog from %s: %w", l.ep, err)
	}
	msgs, err := xr.Result()
	if err != nil {
		return nil, fmt.Errorf("ha: reading the oplog from %s: %w", l.ep, err)
	}
	out := make([]Entry, 0, len(msgs))
	for _, m := range msgs {
		e, err := parseStreamEntry(m)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	if err := checkRead(seq, out); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		if last, err := strconv.ParseUint(lastCmd.Val(), 10, 64); err == nil && last >= seq {
			return nil, fmt.Errorf("ha: oplog from %d asked, entries up to %d were truncated: %w", seq, last, ErrCompacted)
		}
	}
	return out, nil
}

// tailBlock is how long one blocking stream read waits before checking ctx again.
const tailBlock = 2 * time.Second

func (l *redisOpLog) Tail(ctx context.Context, seq uint64, fn func([]Entry) error) error {
	// Catch up with plain reads (these detect truncation), then block on the stream.
	read := func(ctx context.Context, seq uint64) ([]Entry, error) { return l.ReadFrom(ctx, seq, defaultReadLimit) }
	return tail(ctx, seq, fn, read, func(ctx context.Context, seq uint64) {
		// XREAD returns entries with ids above the one given, i.e. seq and later. Something
		// arrived, or the block timed out: either way the next read goes through ReadFrom.
		_, err := l.cli.XRead(ctx, &redis.XReadArgs{
			Streams: []string{l.keys[2], strconv.FormatUint(seq-1, 10) + "-0"},
			Count:   1, Block: tailBlock,
		}).Result()
		if err != nil && !errors.Is(err, redis.Nil) && ctx.Err() == nil {
			sleepCtx(ctx, retryDelay(DefaultTTL))
		}
	})
}

func (l *redisOpLog) Truncate(ctx context.Context, seq uint64) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	if err := l.cli.XTrimMinID(ctx, l.keys[2], strconv.FormatUint(seq, 10)+"-0").Err(); err != nil {
		return fmt.Errorf("ha: truncating the oplog before %d on %s: %w", seq, l.ep, err)
	}
	return nil
}
