package master

import "github.com/mooncake-go/mooncake/store/api"

// Op names a state-machine operation. The strings are part of the log format (HA oplog,
// snapshots): never rename one.
type Op string

const (
	OpMountSegment   Op = "mount_segment"
	OpUnmountSegment Op = "unmount_segment"
	OpExpireClient   Op = "expire_client" // client missed client_ttl: unmount its segments, revoke its puts
	OpPutStart       Op = "put_start"
	OpPutEnd         Op = "put_end"
	OpPutRevoke      Op = "put_revoke"
	// OpPutEndReserved completes a put written into a reservation: a pending put the client
	// started ahead under a name of its own (Reserved) becomes Key's value (reserve.go).
	OpPutEndReserved Op = "put_end_reserved"
	// OpPutConfirm makes the replicas of a client's unconfirmed puts readable (Keys):
	// their writes completed (unconfirmed.go).
	OpPutConfirm    Op = "put_confirm"
	OpGrantLease    Op = "grant_lease" // GetReplicaList: lease + LRU touch
	OpRemove        Op = "remove"
	OpRemoveByRegex Op = "remove_by_regex"
	OpRemoveAll     Op = "remove_all"
	OpTick          Op = "tick"  // reclaim stale put-starts, watermark eviction
	OpBatch         Op = "batch" // Batch applied in order, all at Now
	// OpVerify carries the leader's state digest just before the entry; it changes nothing.
	// A standby applying it compares its own digest at the same point (verification).
	OpVerify Op = "verify"
	// Storage tiers (tier.go).
	OpOffloadDone  Op = "offload_done"  // a client wrote (or failed to write) an object's G3 file
	OpPromoteDone  Op = "promote_done"  // a client copied (or failed to copy) a G3 object back into memory
	OpReplicaClear Op = "replica_clear" // drop a key's copies on one segment (or all of them): upsert.go
	OpDrainSegment Op = "drain_segment" // close a segment to new objects (an unmount's grace period)
	// OpUnmountLocalDisk takes a client's local disk (SSD offload) out of the store: offload.go
	OpUnmountLocalDisk Op = "unmount_local_disk"
)

// Entry is one change to the master's metadata. Everything Apply needs is inside it, including
// the time (Now, unix nanoseconds) and the randomness (Seed), so applying the same entries in the
// same order to the same starting state gives the same state and the same results, on the
// leader, on a standby and on a restore.
type Entry struct {
	Op        Op                   `json:"op"`
	Now       int64                `json:"now"`
	Seed      uint64               `json:"seed,omitempty"`
	ClientID  string               `json:"client_id,omitempty"`
	Key       string               `json:"key,omitempty"`
	Size      uint64               `json:"size,omitempty"`
	Config    *api.ReplicateConfig `json:"config,omitempty"`
	Segment   *api.Segment         `json:"segment,omitempty"`
	SegmentID string               `json:"segment_id,omitempty"`
	Force     bool                 `json:"force,omitempty"`
	Upsert    bool                 `json:"upsert,omitempty"`   // OpPutStart: replace the key's value when it exists
	SegName   string               `json:"seg_name,omitempty"` // OpReplicaClear: the segment ("" = every copy)
	Pattern   string               `json:"pattern,omitempty"`
	Scoped    bool                 `json:"scoped,omitempty"` // OpRemoveByRegex/OpRemoveAll: only Tenant's keys (api/tenant.go)
	Tenant    string               `json:"tenant,omitempty"`
	KeepHeld  bool                 `json:"keep_held,omitempty"` // OpRemoveAll: leave leased and hard-pinned keys
	Batch     []Entry              `json:"batch,omitempty"`
	Digest    string               `json:"digest,omitempty"` // OpVerify
	Path      string               `json:"path,omitempty"`   // OpOffloadDone: the move (its assigned file name)
	File      string               `json:"file,omitempty"`   // OpOffloadDone: the file written, when not Path (a bucket)
	Offset    int64                `json:"offset,omitempty"` // OpOffloadDone: the object's offset in File
	Checksum  uint32               `json:"checksum,omitempty"`
	Error     string               `json:"error,omitempty"`    // OpOffloadDone/OpPromoteDone: why the move failed
	Value     []byte               `json:"value,omitempty"`    // OpPutEnd: the value written, for the value cache (valuecache.go)
	Reserved  string               `json:"reserved,omitempty"` // OpPutEndReserved: the reservation that holds Key's value
	// OpPutEndReserved: the write to the replicas is still under way; Key is read from Value
	// until an OpPutConfirm names it (unconfirmed.go).
	Unconfirmed bool `json:"unconfirmed,omitempty"`
	// OpPutConfirm, and OpPutEndReserved before its own change: ClientID's unconfirmed puts
	// whose writes completed.
	Keys []string `json:"keys,omitempty"`

	// results, on an OpBatch only: room for its results (Result.Batch), when the proposer
	// reuses it (Server.batch); nil: applying allocates it. Not part of the entry's meaning.
	results []Result
}

// Result is what applying an entry produced; the RPC layer turns it into a response.
type Result struct {
	Code     api.ErrorCode
	Message  string
	Replicas []api.Replica
	Size     uint64
	Count    int64
	Batch    []Result
	Retry    bool         // NO_AVAILABLE_HANDLE that a retry will likely get past (moves to G3 in progress)
	Promote  *api.Replica // grant_lease: a memory replica the reader should fill from disk, then report
	Value    []byte       // grant_lease: the object's bytes from the value cache (valuecache.go)
	Garbage  []string     // G3 files no longer referenced (see State.Apply)
	// LocalGarbage: files on clients' local disks (SSD offload) no longer referenced.
	LocalGarbage []LocalFile
}

// Err is the result as a Go error (nil when OK).
func (r Result) Err() error { return r.Code.Err(r.Message) }

// Status is the result as a wire status.
func (r Result) Status() api.Status { return api.Status{Code: r.Code, Message: r.Message} }

func fail(code api.ErrorCode, msg string) Result { return Result{Code: code, Message: msg} }
