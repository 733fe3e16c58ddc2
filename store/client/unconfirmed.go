package client

import (
	"context"
	"errors"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/store/api"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Unconfirmed puts: a single small put in one round trip (store/master/unconfirmed.go).
//
// A put written into a reservation whose value the master's value cache may hold (at most
// Config.SmallValueBytes) sends its PutEndReserved with the value and Unconfirmed first, writes
// the replicas while the master applies it (api.OnSent: both on the calling thread), and then
// reads the master's answer: the write and the master call overlap, where they followed each
// other. The master makes the key readable from the value at once and its replicas only when
// this client confirms the write, which costs no call of its own while puts follow each other:
// the keys whose writes completed go with the next PutEndReserved (Confirmed), or after
// confirmDelay in one ConfirmPuts.
//
// What the put returns is what it did before: success once both the write and the end
// succeeded. A write that fails after the master made the key readable revokes the key before
// the put goes on the plain way (readers meanwhile got exactly the bytes being put, never a
// replica's), so a failed put may be briefly readable, with its own value (and, when the
// master's answer was lost too, readable so until removed or evicted: a revoke sent later
// could undo a retry of the same put). A master that refuses
// the unconfirmed end (its cache is full of them, REPLICA_IS_NOT_READY) changed nothing: the put
// is ended the plain way after its write. Keys whose confirmation could not be sent are sent
// again, to whichever master leads then; a confirmation of a key the master no longer holds
// as unconfirmed changes nothing. A client that dies before confirming leaves those puts
// readable from their values (the master keeps them when it expires the client; their replicas
// are never handed out).
//
// Only a master whose ServiceStatus says UnconfirmedPuts gets unconfirmed ends, and they go in
// a method of their own (PutEndUnconfirmed): a master that predates them, such as an older one
// that took over after this client connected, refuses the call unknown, changing nothing,
// where a flag on PutEndReserved would have been ignored and the replicas made readable before
// they were written. The client then ends its small puts after their writes, for good.

const (
	confirmDelay = 2 * time.Millisecond   // how long a completed write waits for a PutEndReserved to carry its confirmation
	confirmRetry = 100 * time.Millisecond // after a ConfirmPuts that failed
)

// confirmQueue is the keys of this client's unconfirmed puts whose writes completed, until a
// master call carries them (Client.confirms).
type confirmQueue struct {
	on atomic.Bool // the master takes unconfirmed ends (ServiceStatus.UnconfirmedPuts)
	n  atomic.Uint64

	mu     sync.Mutex
	keys   []string
	oldest time.Time // when the first of keys was added
	timer  *time.Timer
	closed bool
}

// UnconfirmedPuts is how many puts were ended while their writes were under way.
func (c *Client) UnconfirmedPuts() uint64 { return c.confirms.n.Load() }

// addConfirms queues keys for confirmation, within wait unless a PutEndReserved carries them first.
func (c *Client) addConfirms(keys []string, wait time.Duration) {
	q := &c.confirms
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(keys) == 0 || q.closed {
		return
	}
	if len(q.keys) == 0 {
		q.oldest = time.Now().Add(wait - confirmDelay)
	}
	q.keys = append(q.keys, keys...)
	if q.timer == nil {
		q.timer = time.AfterFunc(wait, c.confirmDue)
	}
}

// takeConfirms empties the queue for a PutEndReserved to carry.
func (c *Client) takeConfirms() []string {
	q := &c.confirms
	q.mu.Lock()
	defer q.mu.Unlock()
	keys := q.keys
	q.keys = nil
	return keys
}

// confirmDue sends the keys that waited confirmDelay (the timer's function).
func (c *Client) confirmDue() {
	q := &c.confirms
	q.mu.Lock()
	q.timer = nil
	if len(q.keys) == 0 || q.closed {
		q.mu.Unlock()
		return
	}
	if wait := confirmDelay - time.Since(q.oldest); wait > 0 {
		q.timer = time.AfterFunc(wait, c.confirmDue) // taken and queued again since
		q.mu.Unlock()
		return
	}
	keys := q.keys
	q.keys = nil
	q.mu.Unlock()
	if err := c.sendConfirms(keys); err != nil {
		if errors.Is(err, errNoUnconfirmed) {
			// The master predates unconfirmed puts, so it holds none of these: nothing to confirm.
			log.Printf("mooncake store client: master %s does not know unconfirmed puts: %d confirmation(s) dropped", c.cc.describe(), len(keys))
			c.confirms.on.Store(false)
			return
		}
		log.Printf("mooncake store client: confirming %d put(s) failed, retrying in %v: %v", len(keys), confirmRetry, err)
		c.addConfirms(keys, confirmRetry)
	}
}

// errNoUnconfirmed: the master answered ConfirmPuts as an unknown method.
var errNoUnconfirmed = errors.New("the master predates unconfirmed puts")

func (c *Client) sendConfirms(keys []string) error {
	ctx, cancel := c.rpcCtx(context.Background())
	defer cancel()
	st, err := c.master.ConfirmPuts(ctx, &api.BatchKeysRequest{ClientID: c.id, Keys: keys})
	if status.Code(err) == codes.Unimplemented {
		return errNoUnconfirmed
	}
	if err == nil {
		err = st.Err()
	}
	if err != nil {
		return c.rpcErr("confirm puts", err)
	}
	return nil
}

// closeConfirms sends what is queued, once, and queues nothing more (Close).
func (c *Client) closeConfirms() {
	q := &c.confirms
	q.mu.Lock()
	q.closed = true
	if q.timer != nil {
		q.timer.Stop()
		q.timer = nil
	}
	keys := q.keys
	q.keys = nil
	q.mu.Unlock()
	if len(keys) > 0 {
		if err := c.sendConfirms(keys); err != nil {
			log.Printf("mooncake store client: confirming %d put(s) at close failed: %v", len(keys), err)
		}
	}
}

// putUnconfirmed ends the put of key into reservation res while writing it (parts): the
// overlapped path of putReserved, for a value small (the bytes the end carries). done and err
// are putReserved's; fellBack: the master refused the unconfirmed end and the write succeeded,
// so the caller ends the put the plain way.
func (c *Client) putUnconfirmed(ctx context.Context, key string, parts []buf, small []byte, res reservation, k reserveKey) (done, fellBack bool, err error) {
	var werr error
	var once sync.Once
	write := func() { once.Do(func() { werr = c.writeReplicas(ctx, parts, res.reps) }) }
	confirmed := c.takeConfirms()
	rctx, cancel := c.rpcCtx(ctx)
	st, err := c.master.PutEndUnconfirmed(api.OnSent(rctx, write),
		&api.KeyRequest{ClientID: c.id, Key: key, Reserved: res.key, Value: small, Confirmed: confirmed})
	cancel()
	write()
	if status.Code(err) == codes.Unimplemented {
		// A master that predates unconfirmed ends (one that took over from a newer one, say)
		// changed nothing, as a refusal would: end this put and every later one after its
		// write. confirmed is dropped: such a master holds no unconfirmed put (a standby of
		// that version stops on their log entries rather than lead without them).
		if c.confirms.on.Swap(false) {
			log.Printf("mooncake store client: master %s does not take unconfirmed ends: small puts end after their writes from now on", c.cc.describe())
		}
		st, err, confirmed = &api.Status{Code: api.REPLICA_IS_NOT_READY}, nil, nil
	}
	if err == nil && st.Code != api.OK {
		c.addConfirms(confirmed, confirmDelay) // a master that did not apply the entry (not the leader) applied none
	}
	if err != nil {
		// Unknown whether the end (and the confirmations) happened: confirming again changes
		// nothing, and a reservation that was renamed answers its revoke with an error. The key
		// itself is not revoked when its write failed: a revoke in the background could come
		// after a retry of this put had succeeded (and find that put unconfirmed). If the end
		// happened, the key stays readable from its own bytes until removed or evicted, as a
		// put whose outcome is unknown may.
		c.addConfirms(confirmed, confirmDelay)
		if werr == nil {
			c.addConfirms([]string{key}, confirmDelay)
		}
		c.revokeLater([]string{res.key})
		return true, false, c.rpcErr("put "+quote(key), err)
	}
	switch {
	case st.Code == api.OK && werr == nil:
		c.addConfirms([]string{key}, confirmDelay)
		c.confirms.n.Add(1)
		c.resv.puts.Add(1)
		return true, false, nil
	case st.Code == api.OK:
		// Readable from its value, but the replicas did not get it: take the key back, then
		// put it the plain way.
		rctx, cancel := c.rpcCtx(ctx)
		rst, rerr := c.master.PutRevoke(rctx, &api.KeyRequest{ClientID: c.id, Key: key})
		cancel()
		if rerr == nil {
			rerr = rst.Err()
		}
		if rerr != nil {
			return true, false, c.rpcErr("put "+quote(key)+": revoke after a failed write", rerr)
		}
		return false, false, nil
	case st.Code == api.REPLICA_IS_NOT_READY && werr == nil:
		return false, true, nil // nothing changed: end it the plain way
	case werr != nil:
		c.revokeLater([]string{res.key}) // its segment may be gone; the plain put may place elsewhere
		return false, false, nil
	}
	done, err = c.endStatus(key, st, res, k)
	return done, false, err
}
