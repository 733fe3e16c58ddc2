package client

// Reservations: single puts in two round trips instead of three.
//
// A put is PutStart (the master places the replicas), the write, and PutEnd. After a single put
// of a small value, the client starts a few puts ahead, in the background, under names only
// it uses (one BatchPutStart), and keeps their replicas: a reservation is an ordinary put in
// progress to the master (store/master/reserve.go). The next single put of the same size and
// replica settings writes its value into one of them and sends one PutEndReserved, which
// renames the reservation to the user's key and completes it: the write and one master call.
//
// What keeps a write into a reservation from landing in memory that belongs to something
// else: the master frees a reservation's space only when the client revokes it, when the
// client expires (silent for client_ttl), when its segment is unmounted, or when the master
// loses its state (a restart without HA). So a reservation is written only while it is
// younger than reserveMaxAge (well under any client_ttl: the master saw this client when it
// granted it; a quarter of client_ttl when that is shorter) and while no master call of this
// client has failed, no new leader was followed and no ping found this client's segment
// unknown to the master since it was granted (masterConn.gen). What is left is the window a
// plain put also has between its PutStart and its write, here up to reserveMaxAge: a master
// that restarts without HA, a holder that re-mounts its segment and another client given the
// same range, all within that time and before this client's next master call.
//
// Reservations held are memory the store cannot evict: at most Config.PutReservations values
// per pool, reservePools pools (sizes) per client, values of at most reserveMaxBytes. A pool
// refills in batches sized to its puts: a batch doubles when the pool ran dry and halves when
// reservations aged out unused, and only while puts of that size follow each other within half
// a reservation's life, so a client that puts rarely makes none. Unused ones are revoked when
// they age out and at Close.

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/store/api"
)

const (
	// DefaultPutReservations is Config.PutReservations when it is 0.
	DefaultPutReservations = 64
	reserveFirstBatch      = 4                      // a new pool's first refill; each refill that ran dry doubles it
	reserveMaxBytes        = 64 << 10               // larger values are put the plain way
	reservePools           = 4                      // sizes (pools) kept at once; the least recently used goes
	reserveMaxAge          = 1 * time.Second        // an older reservation is revoked, not written
	reserveRetryAfter      = 500 * time.Millisecond // after a refill that got nothing
)

// reservation is a put this client started ahead: its key and replicas.
type reservation struct {
	key  string
	reps []api.Replica
	made time.Time // when the BatchPutStart that made it was sent
	gen  uint64    // masterConn.gen then
}

type reserveKey struct {
	size     uint64
	replicas int
	sameNode bool
}

type reservePool struct {
	free      []reservation // oldest first
	batch     int           // reservations per refill: doubled when the pool ran dry, halved when some aged out or were refused
	refilling bool
	refills   int       // refills done
	dry       bool      // a put found the pool empty since the last refill
	failedAt  time.Time // the last refill that got nothing
	used      time.Time // the last take
}

// reservations is a client's pools of reservations (Client.resv).
type reservations struct {
	per int // reservations made per refill; 0: off

	mu     sync.Mutex
	pools  map[reserveKey]*reservePool
	n      uint64 // names made
	off    bool   // the master does not know PutEndReserved
	closed bool   // Close began: no more reservations

	wgMu    sync.Mutex
	closing bool           // no more background work (closeReservations waits for wg)
	wg      sync.WaitGroup // refills and revokes in flight

	puts atomic.Uint64 // puts completed through a reservation
	ttl  atomic.Int64  // the master's client_ttl in ms, from the last ping (0: not known yet)
}

// maxAge is how old a reservation may be when written: reserveMaxAge, or a quarter of the
// master's client_ttl when that is shorter.
func (r *reservations) maxAge() time.Duration {
	if ttl := time.Duration(r.ttl.Load()) * time.Millisecond; ttl > 0 && ttl/4 < reserveMaxAge {
		return ttl / 4
	}
	return reserveMaxAge
}

// ReservedPuts is how many of this client's puts were completed through a reservation.
func (c *Client) ReservedPuts() uint64 { return c.resv.puts.Load() }

// goReserve runs f in the background unless the client is closing.
func (c *Client) goReserve(f func()) bool {
	r := &c.resv
	r.wgMu.Lock()
	defer r.wgMu.Unlock()
	if r.closing {
		return false
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		f()
	}()
	return true
}

// reserveKeyOf is the pool a single put may use, and whether it may use one.
func (c *Client) reserveKeyOf(size uint64, cfg api.ReplicateConfig, upsert bool) (reserveKey, bool) {
	if c.resv.per <= 0 || upsert || size == 0 || size > reserveMaxBytes || cfg.WithSoftPin || cfg.WithHardPin ||
		len(cfg.PreferredSegments) > 0 || cfg.SoftPinAction != api.SoftPinPreserve || cfg.SoftPinTTLMs != nil {
		return reserveKey{}, false
	}
	return reserveKey{size: size, replicas: cfg.ReplicaNum, sameNode: cfg.PreferAllocInSameNode}, true
}

// takeReservation returns a reservation of pool k that may be written now, and starts a
// refill when the pool runs low while puts of its size come in a steady stream.
func (c *Client) takeReservation(k reserveKey, cfg api.ReplicateConfig) (reservation, bool) {
	r := &c.resv
	now := time.Now()
	gen := c.cc.gen.Load()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.off || r.closed {
		return reservation{}, false
	}
	p := r.pools[k]
	if p == nil {
		if len(r.pools) >= reservePools {
			c.dropLRUPoolLocked()
		}
		p = &reservePool{batch: min(reserveFirstBatch, r.per)}
		r.pools[k] = p
	}
	// Puts further apart than half a reservation's life would let most reservations age out
	// unused (a refill and a revoke per put): such puts take the plain path and make none.
	steady := !p.used.IsZero() && now.Sub(p.used) < r.maxAge()/2
	p.used = now
	var stale []string
	var got reservation
	ok := false
	for len(p.free) > 0 {
		res := p.free[0]
		p.free = p.free[1:]
		if res.gen != gen || now.Sub(res.made) >= r.maxAge() {
			stale = append(stale, res.key)
			continue
		}
		got, ok = res, true
		break
	}
	if len(stale) > 0 {
		p.batch = max(p.batch/2, 1) // more than this client's puts use in maxAge
	}
	if !ok && p.refills > 0 {
		p.dry = true // puts come faster than refills: the next refill doubles the batch
	}
	c.revokeLater(stale)
	if steady && len(p.free) <= p.batch/4 && !p.refilling && now.Sub(p.failedAt) >= reserveRetryAfter {
		n := p.batch - len(p.free)
		p.refilling = c.goReserve(func() { c.refill(k, cfg, n) })
	}
	return got, ok
}

// giveBack returns an unused (or written but not renamed) reservation to its pool.
func (c *Client) giveBack(k reserveKey, res reservation) {
	r := &c.resv
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.pools[k]; p != nil && !r.off && !r.closed {
		p.free = append([]reservation{res}, p.free...)
		return
	}
	c.revokeLater([]string{res.key})
}

// dropLRUPoolLocked revokes the reservations of the least recently used pool (r.mu held).
func (c *Client) dropLRUPoolLocked() {
	r := &c.resv
	var lru reserveKey
	var at time.Time
	first := true
	for k, p := range r.pools {
		if first || p.used.Before(at) {
			lru, at, first = k, p.used, false
		}
	}
	if p := r.pools[lru]; p != nil {
		keys := make([]string, 0, len(p.free))
		for _, res := range p.free {
			keys = append(keys, res.key)
		}
		c.revokeLater(keys)
		delete(r.pools, lru)
	}
}

// refill starts n puts ahead for pool k (one BatchPutStart) and adds those placed to it.
func (c *Client) refill(k reserveKey, cfg api.ReplicateConfig, n int) {
	r := &c.resv
	keys := make([]string, n)
	sizes := make([]uint64, n)
	r.mu.Lock()
	for i := range keys {
		r.n++
		keys[i] = reserveName(c.id, r.n)
		sizes[i] = k.size
	}
	r.mu.Unlock()
	made, gen := time.Now(), c.cc.gen.Load()
	ctx, cancel := c.rpcCtx(context.Background())
	resp, err := c.master.BatchPutStart(ctx, &api.BatchPutStartRequest{ClientID: c.id, Keys: keys, Sizes: sizes, Config: c.placement(cfg)})
	cancel()
	var got []reservation
	var failed []string
	if err != nil || resp.Code != api.OK || len(resp.Results) != len(keys) {
		failed = keys // the master may have placed some before the answer was lost
	} else {
		for i, res := range resp.Results {
			switch {
			case res.Code == api.OK && len(res.Replicas) > 0:
				got = append(got, reservation{key: keys[i], reps: res.Replicas, made: made, gen: gen})
			case res.Code == api.OK:
				failed = append(failed, keys[i]) // placed nowhere: cannot happen; let it go
			}
		}
	}
	r.mu.Lock()
	p := r.pools[k]
	if p == nil || r.off || r.closed {
		r.mu.Unlock()
		for _, res := range got {
			failed = append(failed, res.key)
		}
		c.revokeAll(failed)
		return
	}
	p.refilling = false
	p.refills++
	switch {
	case len(got) < len(keys):
		p.batch, p.dry = max(p.batch/2, 1), false // refused (no free room, or the share is spent)
	case p.dry:
		p.batch, p.dry = min(p.batch*2, r.per), false
	}
	if len(got) == 0 {
		p.failedAt = time.Now()
	}
	p.free = append(p.free, got...)
	r.mu.Unlock()
	c.revokeAll(failed)
}

// reserveName is the key of a reservation: no user key can be it (api.ReservationPrefix holds
// the tenant separator, which clients refuse in user keys).
func reserveName(clientID string, n uint64) string {
	return api.ReservationPrefix + clientID + "/" + strconv.FormatUint(n, 10)
}

// revokeAll ends the puts of reservations keys (one BatchPutRevoke). A reservation renamed or
// already gone answers an error of its own, which changes nothing.
func (c *Client) revokeAll(keys []string) {
	if len(keys) == 0 {
		return
	}
	ctx, cancel := c.rpcCtx(context.Background())
	defer cancel()
	c.master.BatchPutRevoke(ctx, &api.BatchKeysRequest{ClientID: c.id, Keys: keys})
}

// revokeLater revokes keys in the background; once the client is closing they are left to
// closeReservations (or, renamed or not, to the master's expiry of this client).
func (c *Client) revokeLater(keys []string) {
	if len(keys) > 0 {
		c.goReserve(func() { c.revokeAll(keys) })
	}
}

// dropReservations revokes every reservation held (the master may have lost them).
func (c *Client) dropReservations() {
	r := &c.resv
	r.mu.Lock()
	keys := r.emptyPoolsLocked()
	r.mu.Unlock()
	c.revokeLater(keys)
}

// emptyPoolsLocked drops every pool and returns the reservations they held (r.mu held).
func (r *reservations) emptyPoolsLocked() []string {
	var keys []string
	for k, p := range r.pools {
		for _, res := range p.free {
			keys = append(keys, res.key)
		}
		delete(r.pools, k)
	}
	return keys
}

// closeReservations revokes every reservation and waits for refills and revokes in flight.
func (c *Client) closeReservations() {
	r := &c.resv
	r.mu.Lock()
	r.closed = true
	keys := r.emptyPoolsLocked()
	r.mu.Unlock()
	r.wgMu.Lock()
	r.closing = true
	r.wgMu.Unlock()
	r.wg.Wait()
	c.revokeAll(keys)
}

// putReserved puts a value through a reservation of pool k: the write, then PutEndReserved.
// done is false when the put must go the plain way instead (nothing was stored under key).
func (c *Client) putReserved(ctx context.Context, key string, parts []buf, k reserveKey, cfg api.ReplicateConfig) (done bool, err error) {
	res, ok := c.takeReservation(k, cfg)
	if !ok {
		return false, nil
	}
	small := c.smallValue(parts)
	if small != nil && c.confirms.on.Load() {
		done, fellBack, err := c.putUnconfirmed(ctx, key, parts, small, res, k) // unconfirmed.go
		if !fellBack {
			return done, err
		}
	} else if err := c.writeReplicas(ctx, parts, res.reps); err != nil {
		c.revokeLater([]string{res.key}) // its segment may be gone; the plain put may place elsewhere
		return false, nil
	}
	confirmed := c.takeConfirms()
	rctx, cancel := c.rpcCtx(ctx)
	st, err := c.master.PutEndReserved(rctx, &api.KeyRequest{ClientID: c.id, Key: key, Reserved: res.key, Value: small, Confirmed: confirmed})
	cancel()
	if err != nil || st.Code != api.OK {
		c.addConfirms(confirmed, confirmDelay) // unknown whether the master applied them
	}
	if err != nil {
		if c.noReservations(err, res) {
			return false, nil
		}
		// Unknown whether the rename happened: the reservation is not used again (if it was
		// not renamed, the revoke frees it; if it was, the revoke answers an error).
		c.revokeLater([]string{res.key})
		return true, c.rpcErr("put "+quote(key), err)
	}
	return c.endStatus(key, st, res, k)
}

// noReservations reports whether err says that the master predates reservations, and turns
// them off for good then (plain puts from now on).
func (c *Client) noReservations(err error, res reservation) bool {
	if status.Code(err) != codes.Unimplemented {
		return false
	}
	c.resv.mu.Lock()
	c.resv.off = true
	c.resv.mu.Unlock()
	c.revokeLater([]string{res.key})
	c.dropReservations()
	return true
}

// endStatus is putReserved's outcome from the master's answer to its PutEndReserved.
func (c *Client) endStatus(key string, st *api.Status, res reservation, k reserveKey) (done bool, err error) {
	switch st.Code {
	case api.OK:
		c.resv.puts.Add(1)
		return true, nil
	case api.OBJECT_ALREADY_EXISTS:
		c.giveBack(k, res) // write-once: the key keeps its value; the reservation is still open
		return true, nil
	case api.OBJECT_NOT_FOUND:
		// The master no longer knows the reservation (a new master without HA, or the client
		// was expired): neither the others; put the plain way.
		c.dropReservations()
		return false, nil
	case api.OBJECT_REPLICA_BUSY:
		c.giveBack(k, res)
	default:
		c.revokeLater([]string{res.key})
	}
	return true, fmt.Errorf("put %s: %w", quote(key), st.Err())
}
