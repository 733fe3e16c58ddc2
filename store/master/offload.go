package master

import (
	"fmt"

	"github.com/mooncake-go/mooncake/store/api"
)

// SSD offload: the local disk of a client set up with enable_ssd_offload as a tier under its
// memory segment (upstream's --enable_offload). It rides on the G3 machinery of tier.go:
//
//   - a client with SSD offload mounts its segment with an OffloadEndpoint (its read server);
//   - with --enable_offload, a move (evictPass, or right after a put unless --offload_on_evict)
//     of an object whose memory copy lies on such a client goes to that client's own disk
//     (offloadRec.local); the client packs small objects into bucket files and proposes
//     offload_done as for G3, and the object gains a local-disk replica (diskRec.client);
//   - a get lists that replica as kind local_disk with the endpoint: the holding client reads
//     its own file, any other client asks the holder's read server;
//   - the replica lives as long as its client: when the client's last segment goes (unmount,
//     or expiry after client_ttl) its local-disk replicas are dropped, and an object left with
//     no copy is gone (a get then answers OBJECT_NOT_FOUND).
//
// Every step is an entry (mount_segment, tick/put_end, offload_done, expire_client), so a
// standby and a restored snapshot know which objects live on which client's disk.

// LocalFile is a file on a client's local disk that no object references any more: the
// serving master hands it to that client (OffloadTasksResponse.Remove) to delete.
type LocalFile struct {
	Client, Path string
}

// ref is the file's key in State.fileRefs (files of different clients never share a name).
func (d *diskRec) ref() string {
	if d.client == "" {
		return d.path
	}
	return "local:" + d.client + ":" + d.path
}

// tiered reports whether eviction moves objects down rather than dropping them (for some
// objects at least).
func (s *State) tiered() bool { return s.cfg.RootFSDir != "" || s.cfg.EnableOffload }

// localTarget returns o's complete memory replica on a segment of a client with SSD offload,
// when --enable_offload is set (nil segment otherwise).
func (s *State) localTarget(o *object) (replicaRec, *segment) {
	if !s.cfg.EnableOffload {
		return replicaRec{}, nil
	}
	for _, r := range o.replicas {
		if seg, ok := s.segments[r.segID]; ok && r.status == api.ReplicaComplete && seg.OffloadEndpoint != "" {
			return r, seg
		}
	}
	return replicaRec{}, nil
}

// canOffload reports whether an eviction victim without a file can move down instead of
// being dropped: to G3, or to its client's local disk when that has room or can make it.
func (s *State) canOffload(o *object) bool {
	if o.unconfirmed {
		return false // its replicas may not hold it yet (unconfirmed.go): evicted as it is
	}
	if s.cfg.RootFSDir != "" {
		return true
	}
	_, seg := s.localTarget(o)
	return seg != nil && (s.localFits(seg.ClientID, o.size) || s.cfg.EnableDiskEviction && o.size <= s.localQuota(seg.ClientID))
}

// A client's local disk has a quota (upstream's storage-backend quota): --quota_bytes when set
// (at most the capacity the client reported), else 90% of that capacity
// (MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES, at most the size of its filesystem). A move that
// would take the disk past it makes room first with --enable_disk_eviction (the client's oldest
// local copies go, see localRoom), or is refused (the object moves to G3 if there is one, or is
// evicted as without SSD offload; a copy right after a put is simply not made).

// localQuota is how many bytes client's local disk may hold (0: no limit).
func (s *State) localQuota(client string) uint64 {
	var capacity uint64
	for _, id := range s.clients[client] {
		if c := s.segments[id].OffloadCapacity; c > 0 && (capacity == 0 || c < capacity) {
			capacity = c
		}
	}
	switch q := s.cfg.QuotaBytes; {
	case q > 0 && capacity > 0:
		return min(q, capacity)
	case q > 0:
		return q
	}
	return capacity - capacity/10
}

// localFits reports whether need more bytes fit client's quota as things stand.
func (s *State) localFits(client string, need uint64) bool {
	q := s.localQuota(client)
	if q == 0 {
		return true
	}
	return s.diskInUse(client)+need <= q
}

// localRoom reports whether need more bytes fit client's quota, making room with
// --enable_disk_eviction: the client's oldest local copies (not leased, not being promoted) go
// until 90% of the quota holds need too (room for the next copies, as upstream's low disk
// watermark), through diskOrder (diskorder.go). A copy of an object that is still in memory
// goes alone; an object with no other copy goes.
func (s *State) localRoom(client string, need uint64, now int64) bool {
	if s.localFits(client, need) {
		return true
	}
	q := s.localQuota(client)
	if !s.cfg.EnableDiskEviction || need > q {
		return false
	}
	target := q - q/10
	s.dropOldest(client, now, func() bool { return s.diskInUse(client)+need <= target },
		func(*object) { s.counters.LocalDiskEvicted++ })
	return s.localFits(client, need)
}

func (s *State) localReplica(o *object) api.Replica {
	name := ""
	if ids := s.clients[o.disk.client]; len(ids) > 0 {
		name = s.segments[ids[0]].Name
	}
	return api.Replica{SegmentID: "local:" + o.disk.client, SegmentName: name, Size: o.size, Status: api.ReplicaComplete,
		Kind: api.KindLocalDisk, Path: o.disk.path, Offset: o.disk.offset, Checksum: o.disk.sum, Endpoint: o.disk.endpoint}
}

// offloadAfterPut starts the copy to local disk of an object just completed, when SSD offload
// writes behind puts (--enable_offload without --offload_on_evict).
func (s *State) offloadAfterPut(o *object, now int64) {
	if !s.cfg.EnableOffload || s.cfg.OffloadOnEvict || o.disk != nil || o.offload != nil {
		return
	}
	s.startOffload(o, now, true)
}

// clientDisksGone drops the local-disk replicas of a client whose last segment went: their
// files are unreachable now. An object left without any copy is removed.
func (s *State) clientDisksGone(client string) {
	if s.stats.localDisk == 0 {
		return // nothing on any local disk: no walk over every object for each client that goes
	}
	for _, key := range s.sortedKeys() {
		o := s.objects[key]
		if o.disk == nil || o.disk.client != client {
			continue
		}
		s.counters.LocalDiskLost++
		s.dropDisk(o)
		switch {
		case s.inMemory(o):
		case o.promote != nil:
			s.cancelPromote(o) // its source is gone: the object goes with the promotion's replica
		case len(o.replicas) == 0:
			s.deleteObject(o)
		}
	}
}

// unmountLocalDisk takes e's client's local disk out of the store (upstream's
// unmount_local_disk_segment): its segments stop offering the disk (no new move goes there, and
// with --enable_offload eviction drops their objects as without SSD offload), the moves to it in
// progress are cancelled (the objects stay in memory) and the copies on it are dropped, as when
// the client goes (clientDisksGone: an object left with no copy is removed). The client's memory
// segments stay. A client without a local disk: nothing to do.
func (s *State) unmountLocalDisk(e Entry) Result {
	if e.ClientID == "" {
		return fail(api.INVALID_PARAMS, "unmount_local_disk without a client id")
	}
	ids := s.clients[e.ClientID]
	if len(ids) == 0 {
		return fail(api.SEGMENT_NOT_FOUND, fmt.Sprintf("client %s has no segment mounted", e.ClientID))
	}
	for _, id := range ids {
		seg := s.segments[id]
		seg.OffloadEndpoint, seg.OffloadCapacity = "", 0
	}
	for _, key := range sortedMapKeys(s.moving) {
		if o := s.moving[key]; o.offload != nil && o.offload.local && o.offload.client == e.ClientID {
			s.cancelOffload(o)
		}
	}
	s.clientDisksGone(e.ClientID)
	return Result{}
}

// offloadingAny counts moves to disk in flight, copies after puts included (a put waiting for
// room retries while any is in flight: its end may let eviction free memory at once).
func (s *State) offloadingAny() int { return s.offN }
