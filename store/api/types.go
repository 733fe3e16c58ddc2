package api

// MaxKeyLength is the longest key the store accepts, in bytes.
const MaxKeyLength = 4096

// ReplicaStatus is the lifecycle state of one replica (upstream numbering).
type ReplicaStatus int32

const (
	ReplicaUndefined   ReplicaStatus = 0
	ReplicaInitialized ReplicaStatus = 1
	ReplicaProcessing  ReplicaStatus = 2 // allocated by PutStart, being written
	ReplicaComplete    ReplicaStatus = 3 // readable
	ReplicaRemoved     ReplicaStatus = 4
	ReplicaFailed      ReplicaStatus = 5
)

func (s ReplicaStatus) String() string {
	switch s {
	case ReplicaInitialized:
		return "INITIALIZED"
	case ReplicaProcessing:
		return "PROCESSING"
	case ReplicaComplete:
		return "COMPLETE"
	case ReplicaRemoved:
		return "REMOVED"
	case ReplicaFailed:
		return "FAILED"
	}
	return "UNDEFINED"
}

// Segment is a memory range [Base, Base+Size) that a client contributes to the store. Name is the
// transfer-engine segment that owns the memory (what a peer passes to engine.OpenSegment); ID is
// unique per mount (one engine may contribute several ranges).
type Segment struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Base     uint64 `json:"base"`
	Size     uint64 `json:"size"`
	ClientID string `json:"client_id,omitempty"`
	// OffloadEndpoint is set by a client with SSD offload (setup(enable_ssd_offload=True)):
	// the host:port where it serves reads of the objects on its local disk.
	OffloadEndpoint string `json:"offload_endpoint,omitempty"`
	// OffloadCapacity is the bytes that client's offload directory may hold
	// (MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES, at most its filesystem's size); 0: not limited.
	OffloadCapacity uint64 `json:"offload_capacity,omitempty"`
	// Draining is set by the master while the segment is in an unmount's grace period
	// (unmount_segment with grace_period_seconds > 0): its objects stay readable, no new
	// object is placed on it. A mount request's value is ignored.
	Draining bool `json:"draining,omitempty"`
}

// Replica is where one copy of an object lives: Size bytes at the absolute address Addr inside
// the engine segment SegmentName (mounted as SegmentID).
//
// Kind says which tier holds the copy: memory (the default, also when empty), disk (a file of
// the G3 tier under the master's root_fs_dir, at Path relative to it, payload checksum
// Checksum: CRC-32, or CRC-32C in files of format version 1) or local_disk (a client's SSD offload).
type Replica struct {
	SegmentID   string        `json:"segment_id"`
	SegmentName string        `json:"segment_name"`
	Addr        uint64        `json:"addr"`
	Size        uint64        `json:"size"`
	Status      ReplicaStatus `json:"status"`
	Kind        string        `json:"kind,omitempty"`
	Path        string        `json:"path,omitempty"`
	Offset      int64         `json:"offset,omitempty"` // of the object in Path (bucket files)
	Checksum    uint32        `json:"checksum,omitempty"`
	Endpoint    string        `json:"endpoint,omitempty"` // local_disk: the holding client's offload read server
}

// Replica kinds.
const (
	KindMemory    = "memory"
	KindDisk      = "disk"
	KindLocalDisk = "local_disk"
)

// IsDisk reports whether the replica is a G3 file.
func (r Replica) IsDisk() bool { return r.Kind == KindDisk }

// IsLocalDisk reports whether the replica is a file on a client's local disk (SSD offload).
func (r Replica) IsLocalDisk() bool { return r.Kind == KindLocalDisk }

// IsFile reports whether the replica is a file of either disk tier.
func (r Replica) IsFile() bool { return r.Kind == KindDisk || r.Kind == KindLocalDisk }

// TierName is the replica's kind, "memory" when unset.
func (r Replica) TierName() string {
	if r.Kind == "" {
		return KindMemory
	}
	return r.Kind
}

// ReplicateConfig says how a put is placed. ReplicaNum 0 means 1. PreferredSegments are engine
// segment names (or mount IDs) tried first, in order.
//
// Soft pins: WithSoftPin (or SoftPinAction SoftPinEnable) pins the object for SoftPinTTLMs
// (nil: the master's --default_kv_soft_pin_ttl; capped by --max_kv_soft_pin_ttl; 0: not
// pinned). On an upsert, SoftPinPreserve keeps the pin the old value had, SoftPinDisable drops it.
type ReplicateConfig struct {
	ReplicaNum        int           `json:"replica_num"`
	WithSoftPin       bool          `json:"with_soft_pin,omitempty"`
	WithHardPin       bool          `json:"with_hard_pin,omitempty"`
	PreferredSegments []string      `json:"preferred_segments,omitempty"`
	SoftPinAction     SoftPinAction `json:"soft_pin_action,omitempty"`
	SoftPinTTLMs      *uint64       `json:"soft_pin_ttl_ms,omitempty"`
	// PreferAllocInSameNode (a client-side option) prefers the writing client's own segment
	// when PreferredSegments is empty.
	PreferAllocInSameNode bool `json:"-"`
}

// SoftPinAction says what a put does to the key's soft pin (upstream's numbering).
type SoftPinAction int32

const (
	SoftPinPreserve SoftPinAction = 0 // a new key is not pinned; an upserted one keeps its pin
	SoftPinEnable   SoftPinAction = 1
	SoftPinDisable  SoftPinAction = 2
)

// SoftPinEnabled reports whether the config asks for a soft pin.
func (c ReplicateConfig) SoftPinEnabled() bool {
	return c.WithSoftPin || c.SoftPinAction == SoftPinEnable
}

// Status is embedded in every response.
type Status struct {
	Code    ErrorCode `json:"code"`
	Message string    `json:"message,omitempty"`
}

// Err converts the status to a Go error (nil when OK).
func (s Status) Err() error { return s.Code.Err(s.Message) }

// StatusOf builds a Status from an error produced by the master (nil -> OK).
func StatusOf(err error) Status {
	if err == nil {
		return Status{}
	}
	return Status{Code: CodeOf(err), Message: err.Error()}
}

// ---- messages ----

type MountSegmentRequest struct {
	ClientID string  `json:"client_id"`
	Segment  Segment `json:"segment"`
}

type UnmountSegmentRequest struct {
	ClientID  string `json:"client_id"`
	SegmentID string `json:"segment_id"`
	// Drain, when set, does not unmount: it closes the segment to new objects and leaves
	// what it holds readable (the start of an unmount's grace period; the client unmounts it
	// when the period ends).
	Drain bool `json:"drain,omitempty"`
	// LocalDisk, when set, unmounts the client's local disk (SSD offload) instead, keeping its
	// memory segments (upstream's UnmountLocalDiskSegment; SegmentID is not needed): the disk
	// takes no more objects and the copies on it are dropped.
	LocalDisk bool `json:"local_disk,omitempty"`
}

type PingRequest struct {
	ClientID string `json:"client_id"`
}

// PingResponse lists the segments the master currently has mounted for the client; a client
// re-mounts any of its segments missing there (after its expiry or a master restart).
type PingResponse struct {
	Status
	MountedSegments []string `json:"mounted_segments"`
	ViewVersion     uint64   `json:"view_version"`
	ClientTTLMs     int64    `json:"client_ttl_ms"`
}

type PutStartRequest struct {
	ClientID string          `json:"client_id"`
	Key      string          `json:"key"`
	Size     uint64          `json:"size"`
	Config   ReplicateConfig `json:"config"`
	// Upsert replaces the key's value when it exists (the old value stays readable until the
	// new one is complete) instead of answering OBJECT_ALREADY_EXISTS.
	Upsert bool `json:"upsert,omitempty"`
	// WaitMs: when memory is full while objects move to a disk tier (an answer with Retry), the
	// master may hold the request up to this long and answer as soon as a move frees room,
	// instead of answering Retry at once and leaving the client to poll. 0: answer at once (and
	// what a master without the field does).
	WaitMs int64 `json:"wait_ms,omitempty"`
}

type PutStartResponse struct {
	Status
	Replicas []Replica `json:"replicas,omitempty"`
	// Retry is set on NO_AVAILABLE_HANDLE when memory is full but objects are on their way to
	// the G3 tier: the same put will find room shortly.
	Retry bool `json:"retry,omitempty"`
}

type KeyRequest struct {
	ClientID string `json:"client_id"`
	Key      string `json:"key"`
	// Value, on a PutEnd only: the bytes just written to every replica, sent by a client for a
	// small value (MC_STORE_SMALL_VALUE_BYTES) so that the master may answer gets with them
	// (GetReplicaListResponse.Value). Empty: none.
	Value []byte `json:"value,omitempty"`
	// Reserved, on a PutEndReserved only: the reservation (a put of this client in progress)
	// whose replicas hold Key's value.
	Reserved string `json:"reserved,omitempty"`
	// Confirmed, on a PutEndReserved or PutEndUnconfirmed only: keys of this client's earlier
	// unconfirmed puts whose writes completed, confirmed before the put itself is applied (as
	// ConfirmPuts would). A master that predates unconfirmed puts ignores it: it holds none.
	Confirmed []string `json:"confirmed,omitempty"`
}

type GetReplicaListResponse struct {
	Status
	Size       uint64    `json:"size"`
	Replicas   []Replica `json:"replicas,omitempty"`
	LeaseTTLMs int64     `json:"lease_ttl_ms"`
	// Value is the object's bytes when the master holds them (a small value whose PutEnd carried
	// it, store/master's value cache): the reader needs no transfer. Empty: read a replica.
	Value []byte `json:"value,omitempty"`
	// Promote, with --promotion_on_hit, is a memory replica the reader should fill with the
	// bytes it reads from disk and then report with PromoteDone.
	Promote *Replica `json:"promote,omitempty"`
}

type ExistKeyResponse struct {
	Status
	Exists bool   `json:"exists"`
	Size   uint64 `json:"size,omitempty"` // the object's size when it exists
}

type RemoveRequest struct {
	ClientID string `json:"client_id"`
	Key      string `json:"key"`
	Force    bool   `json:"force,omitempty"`
}

type RemoveByRegexRequest struct {
	ClientID string `json:"client_id"`
	Pattern  string `json:"pattern"`
	Force    bool   `json:"force,omitempty"`
	// Scoped: only the keys of Tenant ("" = the default tenant), the pattern matched against
	// their user part (tenant.go). Unscoped: every key, as it is stored.
	Scoped bool   `json:"scoped,omitempty"`
	Tenant string `json:"tenant,omitempty"`
}

type CountResponse struct {
	Status
	Count int64 `json:"count"`
}

type RemoveAllRequest struct {
	ClientID string `json:"client_id"`
	Scoped   bool   `json:"scoped,omitempty"` // only the keys of Tenant, as in RemoveByRegexRequest
	Tenant   string `json:"tenant,omitempty"`
	// KeepHeld leaves the keys a plain remove would refuse (leased to a reader, hard-pinned):
	// upstream's remove_all(force=False). Without it every complete key goes.
	KeepHeld bool `json:"keep_held,omitempty"`
}

type BatchPutStartRequest struct {
	ClientID string          `json:"client_id"`
	Keys     []string        `json:"keys"`
	Sizes    []uint64        `json:"sizes"`
	Config   ReplicateConfig `json:"config"`
	Upsert   bool            `json:"upsert,omitempty"`  // replace the values of keys that exist
	WaitMs   int64           `json:"wait_ms,omitempty"` // as PutStartRequest's, for the keys answered Retry
}

// BatchResponse answers a batch call: the call's own status, and one result per key in the
// request's order.
type BatchResponse[T any] struct {
	Status
	Results []T `json:"results"`
}

type BatchPutStartResponse = BatchResponse[PutStartResponse]

type BatchKeysRequest struct {
	ClientID string   `json:"client_id"`
	Keys     []string `json:"keys"`
	Force    bool     `json:"force,omitempty"`
	// Values, on a BatchPutEnd only: Values[i] is KeyRequest.Value for Keys[i] (none: empty, or
	// Values shorter than Keys).
	Values [][]byte `json:"values,omitempty"`
}

type (
	BatchStatusResponse         = BatchResponse[Status]
	BatchGetReplicaListResponse = BatchResponse[GetReplicaListResponse]
	BatchExistKeyResponse       = BatchResponse[ExistKeyResponse]
)

type ServiceStatusRequest struct{}

type ServiceStatusResponse struct {
	Status
	Role        string `json:"role"`
	ClusterID   string `json:"cluster_id"`
	ViewVersion uint64 `json:"view_version"`
	RootFSDir   string `json:"root_fs_dir,omitempty"` // the G3 tier's directory ("" = no tier)
	// HA discovery, set when the master runs with --enable_ha: the store holding the leader key
	// ("etcd" or "redis") and the endpoints a client follows it with, in the client form
	// ("etcd://h:p,h:p", no password). A client given this master's plain address follows the
	// leader of ClusterID there, as one given the etcd:// address would.
	HABackend   string `json:"ha_backend,omitempty"`
	HAEndpoints string `json:"ha_endpoints,omitempty"`
	// UnconfirmedPuts: this master takes PutEndUnconfirmed (its value cache is on). A hint
	// only: a master that predates them answers the call Unimplemented, changing nothing.
	UnconfirmedPuts bool `json:"unconfirmed_puts,omitempty"`
}

// OffloadTasksRequest asks for the G3 moves assigned to a client, waiting up to WaitMs for one.
// AfterGen > 0 asks only for moves started after the answer whose Gen it was (the client
// already holds the earlier ones): answers then carry each move once instead of every move in
// progress, and the wait lasts until a new one starts. 0 asks for every move in progress.
type OffloadTasksRequest struct {
	ClientID string `json:"client_id"`
	WaitMs   int64  `json:"wait_ms,omitempty"`
	AfterGen uint64 `json:"after_gen,omitempty"`
}

// OffloadTask asks a client to write Size bytes at Addr of its segment SegmentID (the memory
// replica of Key) to the G3 file Path (relative to RootFSDir).
type OffloadTask struct {
	Key       string `json:"key"`
	Path      string `json:"path"`
	Size      uint64 `json:"size"`
	SegmentID string `json:"segment_id"`
	Addr      uint64 `json:"addr"`
	Local     bool   `json:"local,omitempty"` // write to the client's SSD offload directory, not G3
}

type OffloadTasksResponse struct {
	Status
	RootFSDir string `json:"root_fs_dir,omitempty"`
	// Gen is the master's move generation when it built the answer: every later move has a
	// higher one, so it is the next request's AfterGen. One below the AfterGen sent means the
	// master's state started over (a master restarted without its state): ask for everything.
	// 0 from a master that does not number its answers.
	Gen   uint64        `json:"gen,omitempty"`
	Tasks []OffloadTask `json:"tasks,omitempty"`
	// Remove lists files in the client's SSD offload directory no object references any more.
	Remove []string `json:"remove,omitempty"`
}

// OffloadDoneRequest reports a task's end: the file is in place with payload checksum
// Checksum, or Error says why not.
type OffloadDoneRequest struct {
	ClientID string `json:"client_id"`
	Key      string `json:"key"`
	Path     string `json:"path"`
	File     string `json:"file,omitempty"`   // the file written when not Path: a bucket of small objects
	Offset   int64  `json:"offset,omitempty"` // the object's offset in File
	Checksum uint32 `json:"checksum"`
	Error    string `json:"error,omitempty"`
}

// BatchOffloadDoneRequest reports several moves at once (the objects of one bucket file).
type BatchOffloadDoneRequest struct {
	ClientID string               `json:"client_id"`
	Items    []OffloadDoneRequest `json:"items"`
}

// StatusCode lets middleware read the code of any response (every response embeds Status).
func (s *Status) StatusCode() ErrorCode { return s.Code }

// Coded is implemented by every response message.
type Coded interface{ StatusCode() ErrorCode }

// BatchReplicaClearRequest asks to drop the copies of Keys on SegmentName (every copy when
// empty); see the master's replicaClear.
type BatchReplicaClearRequest struct {
	ClientID    string   `json:"client_id"`
	Keys        []string `json:"keys"`
	SegmentName string   `json:"segment_name,omitempty"`
}

// BatchReplicaClearResponse lists the keys that were cleared.
type BatchReplicaClearResponse struct {
	Status
	ClearedKeys []string `json:"cleared_keys"`
}
