// Package ha holds the building blocks of a highly available master: leader election, the
// view clients follow to find the leader, and the operation log (oplog) a hot standby
// replays. Each comes in two flavours, etcd and Redis, chosen by the endpoint string the
// master is given (--etcd_endpoints):
//
//	http://h:p;http://h:p   etcd://h:p,h:p   h:p          etcd
//	redis://[:password@]h:p[/db][;redis://h:p]            Redis (several addresses: Redis Cluster)
//
// Dial parses that string and connects; the Conn then makes an Elector, an OpLog and a
// ViewWatcher that share its client. Clients that only need the leader's address call
// WatchView with the string they were given ("etcd://h:p,h:p" or "redis://h:p").
//
// # Election
//
// Elector.Campaign blocks until this master holds the leader key and may serve. On etcd the
// key is mooncake-store/<cluster_id>/master_view = "ip:port", attached to a lease (TTL 5 s by
// default) and created by a create-if-absent transaction; its create revision is the view
// version. On Redis the keys are mooncake-store/{<cluster_id>}/master_view (SET NX PX) and
// .../master_view_version (INCR, in the same Lua script), the braces being a hash tag so a
// Redis Cluster keeps both (and the oplog) in one slot; a Lua compare-and-extend script
// renews the key. Either way a new leader waits a margin (TTL/10) after winning before
// Campaign returns, so the previous leader has stopped serving first.
//
// A Leadership renews its lease every TTL/3. It counts its lease as ending one TTL after
// the last renewal request was sent (the server's clock starts later, so the server never
// expires it sooner), and Lost() is closed at once when that moment passes without a
// renewal, when the server says the lease or key is gone, when the key changes owner, or on
// Resign. The master must stop serving when Lost() fires; Valid() lets it check before
// acknowledging anything.
//
// # Why a new leader waits only a margin
//
// A standby wins only once the key is gone: the store expired the old leader's lease, or the
// old leader resigned (it stopped serving before it deleted the key). The store starts the
// lease clock when it receives a renewal, after the old leader sent it; the old leader counts
// its lease from the send and gives up leaseMargin = TTL/10 earlier (sent + 0.9 TTL on its own
// clock). So in real time the old leader stops at least 0.1 TTL before the store can expire
// its lease, as long as the two clocks' rates differ by less than about 10 % (0.9 TTL on a
// clock running 10 % slow lasts a whole TTL). Waiting one more TTL after the win, as before,
// only covered a clock running at half speed and cost a whole TTL of downtime at every
// failover. The winner now waits serveMargin = TTL/10 more, which doubles the gap (0.2 TTL:
// rate errors up to about 20 %; quartz clocks drift by parts per million, NTP slews by at most
// 500 ppm) and also covers a deposed leader whose key was deleted by hand or lost in a Redis
// failover, which learns it from its watch (etcd) or next renewal (every TTL/3) rather than
// from its clock: that notice is not bounded by the margin, and the oplog fence (below) is
// what keeps such a leader from acknowledging writes. What stays bounded by the clock alone
// are reads: a stalled old leader answers no reads after its local deadline.
//
// # Oplog
//
// OpLog.Append stores entries (sequence id, type, opaque payload, crc32c) and returns only
// once they are durable in the backing store: on etcd that means committed by a quorum of
// the etcd cluster; on Redis it means accepted by the Redis server, no more durable than
// that server's persistence settings (see docs/ha.md). An Append carries a fence (the
// leader's View): it is refused with ErrFenced once another master has taken the leader
// key, so a deposed leader cannot extend the log. Sequence ids are assigned by the caller
// and must continue the log without gaps (ErrSeqMismatch otherwise).
//
// etcd keys: /oplog/<cluster_id>/batches/<first seq, 20 digits> (one key per appended batch)
// and /oplog/<cluster_id>/last_seq. Redis keys: the stream mooncake-store/{<cluster_id>}/oplog
// (one stream entry per oplog entry, id "<seq>-0") and .../oplog_last_seq.
//
// What this package must not do: know what an entry means (the master's state machine
// does), or serve RPCs.
package ha
