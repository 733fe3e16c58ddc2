package api

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

// ServiceName is the gRPC service of mooncake_master.
const ServiceName = "mooncake.store.MasterService"

// MasterServer is implemented by the master (store/master.Server).
type MasterServer interface {
	MountSegment(context.Context, *MountSegmentRequest) (*Status, error)
	UnmountSegment(context.Context, *UnmountSegmentRequest) (*Status, error)
	Ping(context.Context, *PingRequest) (*PingResponse, error)
	PutStart(context.Context, *PutStartRequest) (*PutStartResponse, error)
	PutEnd(context.Context, *KeyRequest) (*Status, error)
	// PutEndReserved is PutEnd of a value written into the reservation KeyRequest.Reserved (a
	// put the client started ahead under a name of its own): the master renames it to Key.
	PutEndReserved(context.Context, *KeyRequest) (*Status, error)
	// PutEndUnconfirmed is PutEndReserved sent while the client's write to the reservation's
	// replicas is still under way, with the whole value in KeyRequest.Value. The master makes
	// Key readable from Value at once and its replicas readable only when ConfirmPuts (or
	// Confirmed of a later end) names Key; a client whose write failed revokes Key (PutRevoke).
	// Refused with REPLICA_IS_NOT_READY, changing nothing, when the master cannot hold the value
	// (then end the put after the write). A method of its own, not a flag of PutEndReserved,
	// so that a master that predates it refuses it (Unimplemented) rather than take it for an
	// end after the write and hand out replicas still being written.
	PutEndUnconfirmed(context.Context, *KeyRequest) (*Status, error)
	// ConfirmPuts makes the replicas of the client's unconfirmed puts among Keys readable: their
	// writes completed (PutEndUnconfirmed).
	ConfirmPuts(context.Context, *BatchKeysRequest) (*Status, error)
	PutRevoke(context.Context, *KeyRequest) (*Status, error)
	GetReplicaList(context.Context, *KeyRequest) (*GetReplicaListResponse, error)
	ExistKey(context.Context, *KeyRequest) (*ExistKeyResponse, error)
	Remove(context.Context, *RemoveRequest) (*Status, error)
	RemoveByRegex(context.Context, *RemoveByRegexRequest) (*CountResponse, error)
	RemoveAll(context.Context, *RemoveAllRequest) (*CountResponse, error)
	BatchPutStart(context.Context, *BatchPutStartRequest) (*BatchPutStartResponse, error)
	BatchPutEnd(context.Context, *BatchKeysRequest) (*BatchStatusResponse, error)
	BatchPutRevoke(context.Context, *BatchKeysRequest) (*BatchStatusResponse, error)
	BatchGetReplicaList(context.Context, *BatchKeysRequest) (*BatchGetReplicaListResponse, error)
	BatchExistKey(context.Context, *BatchKeysRequest) (*BatchExistKeyResponse, error)
	BatchRemove(context.Context, *BatchKeysRequest) (*BatchStatusResponse, error)
	ServiceStatus(context.Context, *ServiceStatusRequest) (*ServiceStatusResponse, error)
	FetchOffloadTasks(context.Context, *OffloadTasksRequest) (*OffloadTasksResponse, error)
	OffloadDone(context.Context, *OffloadDoneRequest) (*Status, error)
	PromoteDone(context.Context, *OffloadDoneRequest) (*Status, error)
	GetReplicaDesc(context.Context, *KeyRequest) (*GetReplicaListResponse, error)
	BatchOffloadDone(context.Context, *BatchOffloadDoneRequest) (*BatchStatusResponse, error)
	BatchReplicaClear(context.Context, *BatchReplicaClearRequest) (*BatchReplicaClearResponse, error)
}

func method[Req any, Resp any](name string, call func(MasterServer, context.Context, *Req) (*Resp, error)) grpc.MethodDesc {
	full := "/" + ServiceName + "/" + name
	return grpc.MethodDesc{
		MethodName: name,
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(Req)
			if err := dec(in); err != nil {
				return nil, err
			}
			s := srv.(MasterServer)
			if icpt == nil {
				return call(s, ctx, in)
			}
			info := &grpc.UnaryServerInfo{Server: srv, FullMethod: full}
			return icpt(ctx, in, info, func(ctx context.Context, req any) (any, error) {
				return call(s, ctx, req.(*Req))
			})
		},
	}
}

// ServiceDesc is the hand-written descriptor of the master service (see the package doc).
var ServiceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*MasterServer)(nil),
	Methods: []grpc.MethodDesc{
		method("MountSegment", MasterServer.MountSegment),
		method("UnmountSegment", MasterServer.UnmountSegment),
		method("Ping", MasterServer.Ping),
		method("PutStart", MasterServer.PutStart),
		method("PutEnd", MasterServer.PutEnd),
		method("PutEndReserved", MasterServer.PutEndReserved),
		method("PutEndUnconfirmed", MasterServer.PutEndUnconfirmed),
		method("ConfirmPuts", MasterServer.ConfirmPuts),
		method("PutRevoke", MasterServer.PutRevoke),
		method("GetReplicaList", MasterServer.GetReplicaList),
		method("ExistKey", MasterServer.ExistKey),
		method("Remove", MasterServer.Remove),
		method("RemoveByRegex", MasterServer.RemoveByRegex),
		method("RemoveAll", MasterServer.RemoveAll),
		method("BatchPutStart", MasterServer.BatchPutStart),
		method("BatchPutEnd", MasterServer.BatchPutEnd),
		method("BatchPutRevoke", MasterServer.BatchPutRevoke),
		method("BatchGetReplicaList", MasterServer.BatchGetReplicaList),
		method("BatchExistKey", MasterServer.BatchExistKey),
		method("BatchRemove", MasterServer.BatchRemove),
		method("ServiceStatus", MasterServer.ServiceStatus),
		method("FetchOffloadTasks", MasterServer.FetchOffloadTasks),
		method("OffloadDone", MasterServer.OffloadDone),
		method("PromoteDone", MasterServer.PromoteDone),
		method("GetReplicaDesc", MasterServer.GetReplicaDesc),
		method("BatchOffloadDone", MasterServer.BatchOffloadDone),
		method("BatchReplicaClear", MasterServer.BatchReplicaClear),
	},
	Metadata: "store/api (hand-written, JSON codec)",
}

// RegisterMasterServer attaches srv to s.
func RegisterMasterServer(s *grpc.Server, srv MasterServer) { s.RegisterService(&ServiceDesc, srv) }

// MasterClient is the typed client stub of the master service.
type MasterClient struct{ cc grpc.ClientConnInterface }

// NewMasterClient wraps a connection made with [DialOptions].
func NewMasterClient(cc grpc.ClientConnInterface) *MasterClient { return &MasterClient{cc: cc} }

func invoke[Resp any](ctx context.Context, c *MasterClient, name string, req any) (*Resp, error) {
	out := new(Resp)
	if err := c.cc.Invoke(ctx, "/"+ServiceName+"/"+name, req, out, grpc.CallContentSubtype(CodecName)); err != nil {
		return nil, fmt.Errorf("master rpc %s: %w", name, err)
	}
	return out, nil
}

func (c *MasterClient) MountSegment(ctx context.Context, r *MountSegmentRequest) (*Status, error) {
	return invoke[Status](ctx, c, "MountSegment", r)
}
func (c *MasterClient) UnmountSegment(ctx context.Context, r *UnmountSegmentRequest) (*Status, error) {
	return invoke[Status](ctx, c, "UnmountSegment", r)
}
func (c *MasterClient) Ping(ctx context.Context, r *PingRequest) (*PingResponse, error) {
	return invoke[PingResponse](ctx, c, "Ping", r)
}
func (c *MasterClient) PutStart(ctx context.Context, r *PutStartRequest) (*PutStartResponse, error) {
	return invoke[PutStartResponse](ctx, c, "PutStart", r)
}
func (c *MasterClient) PutEnd(ctx context.Context, r *KeyRequest) (*Status, error) {
	return invoke[Status](ctx, c, "PutEnd", r)
}
func (c *MasterClient) PutRevoke(ctx context.Context, r *KeyRequest) (*Status, error) {
	return invoke[Status](ctx, c, "PutRevoke", r)
}
func (c *MasterClient) GetReplicaList(ctx context.Context, r *KeyRequest) (*GetReplicaListResponse, error) {
	return invoke[GetReplicaListResponse](ctx, c, "GetReplicaList", r)
}
func (c *MasterClient) ExistKey(ctx context.Context, r *KeyRequest) (*ExistKeyResponse, error) {
	return invoke[ExistKeyResponse](ctx, c, "ExistKey", r)
}
func (c *MasterClient) Remove(ctx context.Context, r *RemoveRequest) (*Status, error) {
	return invoke[Status](ctx, c, "Remove", r)
}
func (c *MasterClient) RemoveByRegex(ctx context.Context, r *RemoveByRegexRequest) (*CountResponse, error) {
	return invoke[CountResponse](ctx, c, "RemoveByRegex", r)
}
func (c *MasterClient) RemoveAll(ctx context.Context, r *RemoveAllRequest) (*CountResponse, error) {
	return invoke[CountResponse](ctx, c, "RemoveAll", r)
}
func (c *MasterClient) BatchPutStart(ctx context.Context, r *BatchPutStartRequest) (*BatchPutStartResponse, error) {
	return invoke[BatchPutStartResponse](ctx, c, "BatchPutStart", r)
}
func (c *MasterClient) PutEndReserved(ctx context.Context, r *KeyRequest) (*Status, error) {
	return invoke[Status](ctx, c, "PutEndReserved", r)
}
func (c *MasterClient) PutEndUnconfirmed(ctx context.Context, r *KeyRequest) (*Status, error) {
	return invoke[Status](ctx, c, "PutEndUnconfirmed", r)
}
func (c *MasterClient) ConfirmPuts(ctx context.Context, r *BatchKeysRequest) (*Status, error) {
	return invoke[Status](ctx, c, "ConfirmPuts", r)
}
func (c *MasterClient) BatchPutEnd(ctx context.Context, r *BatchKeysRequest) (*BatchStatusResponse, error) {
	return invoke[BatchStatusResponse](ctx, c, "BatchPutEnd", r)
}
func (c *MasterClient) BatchPutRevoke(ctx context.Context, r *BatchKeysRequest) (*BatchStatusResponse, error) {
	return invoke[BatchStatusResponse](ctx, c, "BatchPutRevoke", r)
}
func (c *MasterClient) BatchGetReplicaList(ctx context.Context, r *BatchKeysRequest) (*BatchGetReplicaListResponse, error) {
	return invoke[BatchGetReplicaListResponse](ctx, c, "BatchGetReplicaList", r)
}
func (c *MasterClient) BatchExistKey(ctx context.Context, r *BatchKeysRequest) (*BatchExistKeyResponse, error) {
	return invoke[BatchExistKeyResponse](ctx, c, "BatchExistKey", r)
}
func (c *MasterClient) BatchRemove(ctx context.Context, r *BatchKeysRequest) (*BatchStatusResponse, error) {
	return invoke[BatchStatusResponse](ctx, c, "BatchRemove", r)
}
func (c *MasterClient) ServiceStatus(ctx context.Context, r *ServiceStatusRequest) (*ServiceStatusResponse, error) {
	return invoke[ServiceStatusResponse](ctx, c, "ServiceStatus", r)
}

func (c *MasterClient) FetchOffloadTasks(ctx context.Context, r *OffloadTasksRequest) (*OffloadTasksResponse, error) {
	return invoke[OffloadTasksResponse](ctx, c, "FetchOffloadTasks", r)
}
func (c *MasterClient) OffloadDone(ctx context.Context, r *OffloadDoneRequest) (*Status, error) {
	return invoke[Status](ctx, c, "OffloadDone", r)
}
func (c *MasterClient) PromoteDone(ctx context.Context, r *OffloadDoneRequest) (*Status, error) {
	return invoke[Status](ctx, c, "PromoteDone", r)
}

// GetReplicaDesc describes where key's copies live without taking a lease or counting a read.
func (c *MasterClient) GetReplicaDesc(ctx context.Context, r *KeyRequest) (*GetReplicaListResponse, error) {
	return invoke[GetReplicaListResponse](ctx, c, "GetReplicaDesc", r)
}

// BatchOffloadDone is OffloadDone for several moves, applied as one batch entry.
func (c *MasterClient) BatchOffloadDone(ctx context.Context, r *BatchOffloadDoneRequest) (*BatchStatusResponse, error) {
	return invoke[BatchStatusResponse](ctx, c, "BatchOffloadDone", r)
}

// BatchReplicaClear drops keys' copies on one segment (or every copy).
func (c *MasterClient) BatchReplicaClear(ctx context.Context, r *BatchReplicaClearRequest) (*BatchReplicaClearResponse, error) {
	return invoke[BatchReplicaClearResponse](ctx, c, "BatchReplicaClear", r)
}

// DialOptions are the options a master connection needs: the JSON codec, plaintext (the master
// speaks inside the cluster), and keepalives so a dead master is noticed.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype(CodecName)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
	}
}

// Dial connects to a master at addr ("host:port"). The connection is lazy: failures appear on the
// first call, bounded by that call's context.
func Dial(addr string, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	if addr == "" {
		return nil, Errorf(INVALID_PARAMS, "master address is empty")
	}
	cc, err := grpc.NewClient(addr, append(DialOptions(), extra...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to master %q: %w", addr, err)
	}
	return cc, nil
}
