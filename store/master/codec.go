package master

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/mooncake-go/mooncake/store/api"
)

// stateFormat is the version of the snapshot encoding below; DecodeState rejects others.
const stateFormat = 1

type replicaJSON struct {
	Seg    string            `json:"seg"`
	Addr   uint64            `json:"addr"`
	Status api.ReplicaStatus `json:"status"`
}

type objectJSON struct {
	Key          string        `json:"key"`
	Size         uint64        `json:"size"`
	Replicas     []replicaJSON `json:"replicas"`
	Complete     bool          `json:"complete,omitempty"`
	PutClient    string        `json:"put_client,omitempty"`
	PutStarted   int64         `json:"put_started,omitempty"`
	LeaseUntil   int64         `json:"lease_until,omitempty"`
	LastAccess   int64         `json:"last_access,omitempty"`
	SoftPin      bool          `json:"soft_pin,omitempty"`
	SoftPinUntil int64         `json:"soft_pin_until,omitempty"`
	HardPin      bool          `json:"hard_pin,omitempty"`
	Disk         *diskJSON     `json:"disk,omitempty"`
	Offload      *moveJSON     `json:"offload,omitempty"`
	Promote      *moveJSON     `json:"promote,omitempty"`
	DiskHits     int           `json:"disk_hits,omitempty"`
	Upsert       bool          `json:"upsert,omitempty"`
	SoftPinTTL   int64         `json:"soft_pin_ttl,omitempty"`
	KeepPin      bool          `json:"keep_pin,omitempty"`
	Value        []byte        `json:"value,omitempty"`       // the value cache's copy (valuecache.go)
	Unconfirmed  bool          `json:"unconfirmed,omitempty"` // read from Value alone, its replicas being written (unconfirmed.go)
}

type retiredJSON struct {
	Seg   string `json:"seg"`
	Addr  uint64 `json:"addr"`
	Size  uint64 `json:"size"`
	Until int64  `json:"until"`
}

type diskJSON struct {
	Path     string `json:"path"`
	Offset   int64  `json:"offset,omitempty"`
	Sum      uint32 `json:"sum"`
	At       int64  `json:"at"`
	Client   string `json:"client,omitempty"`   // SSD offload: the client whose local disk holds it
	Endpoint string `json:"endpoint,omitempty"` // and its offload read server
}

type moveJSON struct {
	Client   string `json:"client"`
	Seg      string `json:"seg"`
	Addr     uint64 `json:"addr"`
	Path     string `json:"path,omitempty"`
	Started  int64  `json:"started"`
	Local    bool   `json:"local,omitempty"`
	Keep     bool   `json:"keep,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
}

type segmentJSON struct {
	Segment   api.Segment `json:"segment"`
	AllocSize uint64      `json:"alloc_size"`
	AllocUsed uint64      `json:"alloc_used"`
	Free      [][2]uint64 `json:"free"` // [off, len], sorted by off
}

type stateJSON struct {
	Format      int           `json:"format"`
	Applied     uint64        `json:"applied"`
	Capacity    uint64        `json:"capacity"`
	Used        uint64        `json:"used"`
	Counters    Counters      `json:"counters"`
	DFSUsed     uint64        `json:"dfs_used,omitempty"`
	DFSReserved uint64        `json:"dfs_reserved,omitempty"`
	DFSGen      uint64        `json:"dfs_gen,omitempty"`
	LocalUsed   uint64        `json:"local_used,omitempty"`
	Segments    []segmentJSON `json:"segments"` // in segIDs order
	Objects     []objectJSON  `json:"objects"`  // sorted by key
	// Upserts are the upserts in progress beside a readable old version, sorted by key.
	Upserts []objectJSON  `json:"upserts,omitempty"`
	Retired []retiredJSON `json:"retired,omitempty"`
}

// Encode serialises the whole state (the snapshot payload). Applying the same entries to a
// decoded copy gives the same results as applying them to the original: the allocators' free
// lists are stored exactly.
func (s *State) Encode() ([]byte, error) {
	out := stateJSON{Format: stateFormat, Applied: s.applied, Capacity: s.capacity, Used: s.used, Counters: s.counters,
		DFSUsed: s.dfsUsed, DFSReserved: s.dfsReserved, DFSGen: s.dfsGen, LocalUsed: s.localUsed}
	for _, id := range s.segIDs {
		seg := s.segments[id]
		sj := segmentJSON{Segment: seg.Segment, AllocSize: seg.alloc.size, AllocUsed: seg.alloc.used}
		for _, sp := range seg.alloc.free {
			sj.Free = append(sj.Free, [2]uint64{sp.off, sp.len})
		}
		out.Segments = append(out.Segments, sj)
	}
	for _, k := range s.sortedKeys() {
		out.Objects = append(out.Objects, encodeObject(s.objects[k]))
	}
	for _, o := range s.pendingUpserts() {
		out.Upserts = append(out.Upserts, encodeObject(o))
	}
	for _, r := range s.retired {
		out.Retired = append(out.Retired, retiredJSON{Seg: r.segID, Addr: r.addr, Size: r.size, Until: r.until})
	}
	return json.Marshal(out)
}

func encodeObject(o *object) objectJSON {
	oj := objectJSON{Key: o.key, Size: o.size, Complete: o.complete, PutClient: o.putClient, PutStarted: o.putStarted,
		LeaseUntil: o.leaseUntil, LastAccess: o.lastAccess, SoftPin: o.softPin, SoftPinUntil: o.softPinUntil, HardPin: o.hardPin}
	for _, r := range o.replicas {
		oj.Replicas = append(oj.Replicas, replicaJSON{Seg: r.segID, Addr: r.addr, Status: r.status})
	}
	oj.DiskHits = o.diskHits
	if d := o.disk; d != nil {
		oj.Disk = &diskJSON{Path: d.path, Offset: d.offset, Sum: d.sum, At: d.at, Client: d.client, Endpoint: d.endpoint}
	}
	if m := o.offload; m != nil {
		oj.Offload = &moveJSON{Client: m.client, Seg: m.segID, Addr: m.addr, Path: m.path, Started: m.started,
			Local: m.local, Keep: m.keep, Endpoint: m.endpoint}
	}
	if m := o.promote; m != nil {
		oj.Promote = &moveJSON{Client: m.client, Seg: m.segID, Addr: m.addr, Started: m.started}
	}
	oj.Upsert, oj.SoftPinTTL, oj.KeepPin = o.upsert, o.softPinTTL, o.keepPin
	oj.Value = o.value
	oj.Unconfirmed = o.unconfirmed
	return oj
}

// DecodeState rebuilds a state encoded by Encode, with cfg's store policy.
func DecodeState(cfg Config, b []byte) (*State, error) {
	var in stateJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, fmt.Errorf("decode master state: %w", err)
	}
	if in.Format != stateFormat {
		return nil, fmt.Errorf("decode master state: format %d, want %d", in.Format, stateFormat)
	}
	s := NewState(cfg)
	s.applied, s.capacity, s.used, s.counters = in.Applied, in.Capacity, in.Used, in.Counters
	s.dfsUsed, s.dfsReserved, s.dfsGen, s.localUsed = in.DFSUsed, in.DFSReserved, in.DFSGen, in.LocalUsed
	for _, sj := range in.Segments {
		if sj.Segment.ID == "" {
			return nil, fmt.Errorf("decode master state: segment without an id")
		}
		a := &rangeAllocator{size: sj.AllocSize, used: sj.AllocUsed}
		for _, f := range sj.Free {
			a.free = append(a.free, span{f[0], f[1]})
		}
		s.segments[sj.Segment.ID] = &segment{Segment: sj.Segment, alloc: a}
		s.segIDs = insertSorted(s.segIDs, sj.Segment.ID)
		s.clients[sj.Segment.ClientID] = insertSorted(s.clients[sj.Segment.ClientID], sj.Segment.ID)
	}
	for _, oj := range in.Objects {
		o, err := s.decodeObject(oj)
		if err != nil {
			return nil, err
		}
		s.objects[o.key] = o
		s.holdName(o)
		s.noteResident(o)
		s.restat(o)
		s.noteTimed(o, 0) // the time is not known here: whatever ever had a pin or a lease
		if !o.complete {
			s.pending[o.key] = o
			s.noteReservation(o, 1)
		}
		if o.offload != nil || o.promote != nil {
			s.moving[o.key] = o
		}
	}
	for _, oj := range in.Upserts {
		o, err := s.decodeObject(oj)
		if err != nil {
			return nil, err
		}
		s.pending[o.key] = o
	}
	for _, r := range in.Retired {
		if _, ok := s.segments[r.Seg]; !ok {
			return nil, fmt.Errorf("decode master state: a retired copy on unknown segment %s", r.Seg)
		}
		s.retired = append(s.retired, retiredRec{segID: r.Seg, addr: r.Addr, size: r.Size, until: r.Until})
	}
	s.linkValues() // valuecache.go
	return s, nil
}

func (s *State) decodeObject(oj objectJSON) (*object, error) {
	o := &object{key: oj.Key, size: oj.Size, complete: oj.Complete, putClient: oj.PutClient, putStarted: oj.PutStarted,
		leaseUntil: oj.LeaseUntil, lastAccess: oj.LastAccess, softPin: oj.SoftPin, softPinUntil: oj.SoftPinUntil, hardPin: oj.HardPin}
	for _, r := range oj.Replicas {
		if _, ok := s.segments[r.Seg]; !ok {
			return nil, fmt.Errorf("decode master state: object %q has a replica on unknown segment %s", oj.Key, r.Seg)
		}
		o.replicas = append(o.replicas, replicaRec{segID: r.Seg, addr: r.Addr, status: r.Status})
	}
	o.diskHits = oj.DiskHits
	if d := oj.Disk; d != nil {
		o.disk = &diskRec{path: d.Path, offset: d.Offset, sum: d.Sum, at: d.At, client: d.Client, endpoint: d.Endpoint}
		s.fileRefs[o.disk.ref()]++
		s.noteDisk(o)
		if o.disk.client != "" {
			s.stats.localDisk++
		}
	}
	if m := oj.Offload; m != nil {
		s.setOffload(o, &offloadRec{client: m.Client, segID: m.Seg, addr: m.Addr, path: m.Path, gen: genOf(m.Path), started: m.Started,
			local: m.Local, keep: m.Keep, endpoint: m.Endpoint})
		s.holdRoom(moveTier(o.offload), o.size)
	}
	if m := oj.Promote; m != nil {
		o.promote = &promoteRec{client: m.Client, segID: m.Seg, addr: m.Addr, started: m.Started}
	}
	o.upsert, o.softPinTTL, o.keepPin = oj.Upsert, oj.SoftPinTTL, oj.KeepPin
	if len(oj.Value) > 0 {
		if uint64(len(oj.Value)) != o.size {
			return nil, fmt.Errorf("decode master state: object %q holds %d cached bytes of a %d-byte value", oj.Key, len(oj.Value), o.size)
		}
		o.value = oj.Value
		s.valueBytes += o.size
	}
	if oj.Unconfirmed {
		if o.value == nil || !o.complete {
			return nil, fmt.Errorf("decode master state: object %q is unconfirmed without its value", oj.Key)
		}
		o.unconfirmed = true
	}
	return o, nil
}

// Digest is the SHA-256 of Encode: two states that applied the same entries have the same
// digest (the encoding is deterministic), which is how a standby verifies itself.
func (s *State) Digest() string {
	b, err := s.Encode()
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
