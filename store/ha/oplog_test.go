package ha

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/testsvc"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func mkEntries(from, to uint64, size int) []Entry {
	var out []Entry
	for s := from; s <= to; s++ {
		p := bytes.Repeat([]byte{byte(s)}, size)
		copy(p, fmt.Sprintf("op-%d", s))
		out = append(out, Entry{Seq: s, Type: uint32(s % 7), Payload: p})
	}
	return out
}

func checkEntries(t *testing.T, got []Entry, from, to uint64, size int) {
	t.Helper()
	want := mkEntries(from, to, size)
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d (%d..%d)", len(got), len(want), from, to)
	}
	for i := range want {
		g := got[i]
		if g.Seq != want[i].Seq || g.Type != want[i].Type || !bytes.Equal(g.Payload, want[i].Payload) || g.CRC != g.Checksum() {
			t.Fatalf("entry %d = %+v, want %+v", i, g, want[i])
		}
	}
}

// tailer collects what Tail delivers.
type tailer struct {
	mu   sync.Mutex
	got  []Entry
	more chan struct{}
	err  chan error
}

func startTail(ctx context.Context, l OpLog, from uint64) *tailer {
	tl := &tailer{more: make(chan struct{}, 1), err: make(chan error, 1)}
	go func() {
		tl.err <- l.Tail(ctx, from, func(es []Entry) error {
			tl.mu.Lock()
			tl.got = append(tl.got, es...)
			tl.mu.Unlock()
			select {
			case tl.more <- struct{}{}:
			default:
			}
			return nil
		})
	}()
	return tl
}

func (tl *tailer) waitFor(t *testing.T, n int, within time.Duration) []Entry {
	t.Helper()
	deadline := time.After(within)
	for {
		tl.mu.Lock()
		got := append([]Entry(nil), tl.got...)
		tl.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-tl.more:
		case err := <-tl.err:
			t.Fatalf("Tail ended: %v", err)
		case <-deadline:
			t.Fatalf("Tail delivered %d entries within %s, want %d", len(got), within, n)
		}
	}
}

func testOpLog(t *testing.T, s store) {
	ctx := context.Background()
	c := s.dial(t)
	el := s.elector(t, c, "c1", "10.0.0.1:50051")
	lead, err := el.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fence := lead.View()
	// A small batch limit makes etcd split appends into several transactions.
	log, err := c.NewOpLog(OpLogConfig{ClusterID: "c1", MaxBatchBytes: 200})
	if err != nil {
		t.Fatal(err)
	}
	const size = 64

	if last, err := log.LastSeq(ctx); err != nil || last != 0 {
		t.Fatalf("empty LastSeq = %d, %v", last, err)
	}
	if es, err := log.ReadFrom(ctx, 1, 0); err != nil || len(es) != 0 {
		t.Fatalf("empty ReadFrom = %v, %v", es, err)
	}
	// A standby tails from the start before anything is written.
	tctx, tcancel := context.WithCancel(ctx)
	defer tcancel()
	tl := startTail(tctx, log, 1)

	if err := log.Append(ctx, fence, mkEntries(1, 3, size)); err != nil {
		t.Fatal(err)
	}
	if err := log.Append(ctx, fence, mkEntries(5, 5, size)); !errors.Is(err, ErrSeqMismatch) {
		t.Fatalf("gap after the log's end: %v", err)
	}
	if err := log.Append(ctx, fence, mkEntries(3, 4, size)); !errors.Is(err, ErrSeqMismatch) {
		t.Fatalf("overlapping append: %v", err)
	}
	if err := log.Append(ctx, fence, mkEntries(4, 20, size)); err != nil {
		t.Fatal(err)
	}
	if err := log.Append(ctx, fence, nil); err != nil {
		t.Fatalf("empty append: %v", err)
	}
	if last, err := log.LastSeq(ctx); err != nil || last != 20 {
		t.Fatalf("LastSeq = %d, %v", last, err)
	}
	es, err := log.ReadFrom(ctx, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, es, 1, 20, size)
	es, err = log.ReadFrom(ctx, 7, 5)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, es, 7, 11, size)
	if es, err := log.ReadFrom(ctx, 21, 0); err != nil || len(es) != 0 {
		t.Fatalf("ReadFrom past the end = %v, %v", es, err)
	}
	checkEntries(t, tl.waitFor(t, 20, 5*time.Second), 1, 20, size)

	// A second tail from the middle; new appends reach both.
	tl2 := startTail(tctx, log, 15)
	if err := log.Append(ctx, fence, mkEntries(21, 25, size)); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, tl.waitFor(t, 25, 5*time.Second), 1, 25, size)
	checkEntries(t, tl2.waitFor(t, 11, 5*time.Second), 15, 25, size)

	// Fencing: a wrong view is refused, as is the real one once it is gone.
	if err := log.Append(ctx, View{Leader: fence.Leader, Version: fence.Version + 1000}, mkEntries(26, 26, size)); !errors.Is(err, ErrFenced) {
		t.Fatalf("append with a stale view: %v", err)
	}
	if err := log.Append(ctx, View{Leader: "10.9.9.9:1", Version: fence.Version}, mkEntries(26, 26, size)); !errors.Is(err, ErrFenced) {
		t.Fatalf("append with another address: %v", err)
	}
	other := s.elector(t, s.dial(t), "c1", "10.0.0.2:50051")
	och := campaignAsync(other, ctx)
	if err := lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := log.Append(ctx, fence, mkEntries(26, 26, size)); !errors.Is(err, ErrFenced) {
		t.Fatalf("append after resigning: %v", err)
	}
	newLead := waitResult(t, och, 4*s.ttl, "second leader")
	if err := log.Append(ctx, fence, mkEntries(26, 26, size)); !errors.Is(err, ErrFenced) {
		t.Fatalf("deposed leader's append: %v", err)
	}
	// The new leader continues the same log.
	if err := log.Append(ctx, newLead.l.View(), mkEntries(26, 30, size)); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, tl.waitFor(t, 30, 5*time.Second), 1, 30, size)

	// Truncate keeps LastSeq and makes older reads fail with ErrCompacted.
	if err := log.Truncate(ctx, 12); err != nil {
		t.Fatal(err)
	}
	if _, err := log.ReadFrom(ctx, 1, 0); !errors.Is(err, ErrCompacted) {
		t.Fatalf("read of truncated entries: %v", err)
	}
	es, err = log.ReadFrom(ctx, 12, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, es, 12, 30, size)
	if last, _ := log.LastSeq(ctx); last != 30 {
		t.Fatalf("LastSeq after truncate = %d", last)
	}
	if err := log.Truncate(ctx, 31); err != nil {
		t.Fatal(err)
	}
	if err := log.Tail(ctx, 2, func([]Entry) error { return nil }); !errors.Is(err, ErrCompacted) {
		t.Fatalf("Tail from a truncated seq: %v", err)
	}
	// A Tail stops with its callback's error.
	stop := errors.New("stop")
	if err := log.Tail(ctx, 30, func([]Entry) error { return stop }); !errors.Is(err, stop) && !errors.Is(err, ErrCompacted) {
		t.Fatalf("Tail's callback error: %v", err)
	}
	tcancel()
	select {
	case err := <-tl.err:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Tail: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Tail did not end after its context was cancelled")
	}

	// An empty store accepts any first seq (a log restarted after a snapshot restore).
	log2, _ := c.NewOpLog(OpLogConfig{ClusterID: "c9"})
	if err := log2.Append(ctx, View{}, mkEntries(1001, 1002, size)); err != nil {
		t.Fatal(err)
	}
	if _, err := log2.ReadFrom(ctx, 500, 0); !errors.Is(err, ErrCompacted) {
		t.Fatalf("read before the log's start: %v", err)
	}
	es, err = log2.ReadFrom(ctx, 1001, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, es, 1001, 1002, size)
}

func TestOpLogEtcd(t *testing.T) {
	t.Parallel()
	s := etcdStore(t)
	testOpLog(t, s)

	// A corrupt stored batch is reported, not returned.
	c := s.dial(t)
	log, _ := c.NewOpLog(OpLogConfig{ClusterID: "bad"})
	if err := log.Append(context.Background(), View{}, mkEntries(1, 2, 8)); err != nil {
		t.Fatal(err)
	}
	key := etcdOplogPrefix("bad") + fmt.Sprintf("batches/%020d", 1)
	resp, _ := c.Etcd().Get(context.Background(), key)
	v := resp.Kvs[0].Value
	v[len(v)-1] ^= 0xff
	c.Etcd().Put(context.Background(), key, string(v))
	if _, err := log.ReadFrom(context.Background(), 1, 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt batch: %v", err)
	}
}

func TestOpLogRedis(t *testing.T) {
	t.Parallel()
	s := redisStore(t)
	testOpLog(t, s)

	c := s.dial(t)
	log, _ := c.NewOpLog(OpLogConfig{ClusterID: "bad"})
	if err := log.Append(context.Background(), View{}, mkEntries(1, 1, 8)); err != nil {
		t.Fatal(err)
	}
	c.Redis().XAdd(context.Background(), &redis.XAddArgs{Stream: redisOplogKey("bad"), ID: "2-0",
		Values: []any{"t", "1", "c", "12345", "p", "payload"}})
	if _, err := log.ReadFrom(context.Background(), 1, 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt stream entry: %v", err)
	}
	// WAIT with no replicas attached fails clearly instead of pretending.
	wl, _ := c.NewOpLog(OpLogConfig{ClusterID: "w", RedisWaitReplicas: 1, RedisWaitTimeout: 100 * time.Millisecond})
	if err := wl.Append(context.Background(), View{}, mkEntries(1, 1, 8)); err == nil {
		t.Fatal("append waiting for a replica that does not exist succeeded")
	}
}

// TestEtcdClusterMemberDown: with one of three etcd members killed, leadership,
// election and the oplog keep working.
func TestEtcdClusterMemberDown(t *testing.T) {
	t.Parallel()
	cl := testsvc.StartEtcdCluster(t, 3)
	eps := "etcd://" + cl.Endpoints[0] + "," + cl.Endpoints[1] + "," + cl.Endpoints[2]
	// 3 s: a raft re-election (about 1 s here) fits inside one lease.
	s := store{"etcd3", eps, 3 * time.Second}
	ctx := context.Background()
	ca, cb := s.dial(t), s.dial(t)
	ea := s.elector(t, ca, "c1", "10.0.0.1:50051")
	la, err := ea.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	log, _ := ca.NewOpLog(OpLogConfig{ClusterID: "c1"})
	if err := log.Append(ctx, la.View(), mkEntries(1, 10, 32)); err != nil {
		t.Fatal(err)
	}
	standby, _ := cb.NewOpLog(OpLogConfig{ClusterID: "c1"})
	tctx, tcancel := context.WithCancel(ctx)
	defer tcancel()
	tl := startTail(tctx, standby, 1)
	tl.waitFor(t, 10, 5*time.Second)

	// Kill the member that is the raft leader, the harder case: a new raft leader must be
	// elected while leases and watches carry on.
	leaderIdx := raftLeader(t, ca.Etcd(), cl.Endpoints)
	t.Logf("killing etcd member %d (raft leader)", leaderIdx)
	cl.Kill(leaderIdx)

	// Appends succeed again within a few seconds (retried while raft re-elects). Should A
	// lose its lease meanwhile (the raft election took most of a TTL), it stands again and
	// the election itself must work on two members.
	cur := la
	deadline := time.Now().Add(20 * time.Second)
	for next := uint64(11); next <= 20; {
		if time.Now().After(deadline) {
			t.Fatalf("no progress with one member down; log at %d", next-1)
		}
		select {
		case <-cur.Lost():
			t.Logf("A lost its lease during the raft election (%v); standing again", cur.Err())
			cctx, cancel := context.WithTimeout(ctx, 6*s.ttl)
			l, err := ea.Campaign(cctx)
			cancel()
			if err != nil {
				t.Fatalf("campaign with one member down: %v", err)
			}
			cur = l
		default:
		}
		err := log.Append(ctx, cur.View(), mkEntries(next, next, 32))
		if err == nil {
			next++
			continue
		}
		if last, lerr := log.LastSeq(ctx); lerr == nil && last >= next {
			next = last + 1 // an append that failed on the wire but landed
			continue
		}
		if !errors.Is(err, ErrFenced) {
			t.Logf("append %d with one member down: %v (retrying)", next, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	checkEntries(t, tl.waitFor(t, 20, 10*time.Second), 1, 20, 32)

	// B takes over after A resigns, on two members, and continues the same log.
	eb := s.elector(t, cb, "c1", "10.0.0.2:50051")
	bch := campaignAsync(eb, ctx)
	if err := cur.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	rb := waitResult(t, bch, 6*s.ttl, "B on a two-member cluster")
	blog, _ := cb.NewOpLog(OpLogConfig{ClusterID: "c1"})
	last, err := blog.LastSeq(ctx)
	if err != nil || last != 20 {
		t.Fatalf("LastSeq on the new leader = %d, %v", last, err)
	}
	appendEventually(t, blog, rb.l, mkEntries(21, 25, 32), 10*time.Second)
	checkEntries(t, tl.waitFor(t, 25, 10*time.Second), 1, 25, 32)
	if err := log.Append(ctx, cur.View(), mkEntries(26, 26, 32)); !errors.Is(err, ErrFenced) {
		t.Fatalf("old leader's append: %v", err)
	}
}

// appendEventually retries an append that fails for reasons other than fencing or a
// sequence mismatch (the cluster electing a new raft leader). A retry after an error
// whose append did land shows up as ErrSeqMismatch with LastSeq at the batch's end.
func appendEventually(t *testing.T, log OpLog, l Leadership, es []Entry, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := log.Append(context.Background(), l.View(), es)
		if err == nil {
			return
		}
		if errors.Is(err, ErrSeqMismatch) {
			if last, _ := log.LastSeq(context.Background()); last == es[len(es)-1].Seq {
				return
			}
		}
		if errors.Is(err, ErrFenced) || time.Now().After(deadline) {
			t.Fatalf("append: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func raftLeader(t *testing.T, cli *clientv3.Client, eps []string) int {
	t.Helper()
	for i, ep := range eps {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := cli.Status(ctx, "http://"+ep)
		cancel()
		if err == nil && st.Leader == st.Header.MemberId {
			return i
		}
	}
	t.Fatal("no etcd member says it is the raft leader")
	return -1
}
