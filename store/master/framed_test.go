package master

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/store/api"
)

// The framed RPC and gRPC share one port and one state: what a framed-RPC client writes, a gRPC client
// sees, and the per-method metrics count both.
func TestFramedRPCAndGRPCOnOnePort(t *testing.T) {
	srv, g, addr := startServer(t)
	framed, err := api.DialFramed(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer framed.Close()
	l := api.NewMasterClient(framed)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := l.MountSegment(ctx, &api.MountSegmentRequest{ClientID: "c1", Segment: api.Segment{ID: "s1", Name: "h1:1", Base: 4096, Size: 1 << 20}})
	if err != nil || st.Code != api.OK {
		t.Fatalf("mount over the framed: %v %+v", err, st)
	}
	ps, err := l.PutStart(ctx, &api.PutStartRequest{ClientID: "c1", Key: "k", Size: 10, Config: api.ReplicateConfig{ReplicaNum: 1}})
	if err != nil || ps.Code != api.OK || len(ps.Replicas) != 1 || ps.Replicas[0].SegmentName != "h1:1" {
		t.Fatalf("put start over the framed: %v %+v", err, ps)
	}
	if st, err := l.PutEnd(ctx, &api.KeyRequest{ClientID: "c1", Key: "k"}); err != nil || st.Code != api.OK {
		t.Fatalf("put end over the framed: %v %+v", err, st)
	}
	ex, err := g.ExistKey(ctx, &api.KeyRequest{Key: "k"})
	if err != nil || !ex.Exists || ex.Size != 10 {
		t.Fatalf("gRPC does not see the framed RPC's put: %v %+v", err, ex)
	}
	// An error status (not a transport error) comes back as the same response a gRPC call gets.
	again, err := l.PutStart(ctx, &api.PutStartRequest{ClientID: "c2", Key: "k", Size: 10, Config: api.ReplicateConfig{ReplicaNum: 1}})
	if err != nil || again.Code != api.OBJECT_ALREADY_EXISTS {
		t.Fatalf("second put start: %v %+v", err, again)
	}
	if body := get(t, srv.AdminHandler(), "/metrics"); !strings.Contains(body, `mooncake_master_rpc_requests_total{method="PutStart"} 2`) {
		t.Errorf("framed-RPC calls not counted in /metrics")
	}
	// Unknown methods and undecodable requests are gRPC status errors, and the socket stays usable.
	var out api.Status
	if err := framed.Invoke(ctx, "/nope/Nope", &api.KeyRequest{}, &out); status.Code(err) != codes.Unimplemented {
		t.Fatalf("unknown method: %v", err)
	}
	if err := framed.Invoke(ctx, "/"+api.ServiceName+"/PutEnd", 42, &out); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("undecodable request: %v", err)
	}
	if _, err := l.ExistKey(ctx, &api.KeyRequest{Key: "k"}); err != nil {
		t.Fatalf("framed RPC unusable after failed calls: %v", err)
	}
}

// Malformed frames after the framed RPC's magic drop that connection and nothing else.
func TestFramedRPCMalformedFrames(t *testing.T) {
	_, g, addr := startServer(t)
	huge := binary.LittleEndian.AppendUint32([]byte("MCLANE1\n"), 1<<31)
	badName := append(binary.LittleEndian.AppendUint32([]byte("MCLANE1\n"), 3), 200, 'a', 'b')
	for _, junk := range [][]byte{huge, badName, []byte("MCLANE1\n\x01\x00")} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		conn.Write(junk)
		if len(junk) > 10 { // complete frames: the server must hang up, not wait
			if _, err := io.ReadAll(conn); err != nil {
				t.Fatalf("server did not close the connection after %q: %v", junk, err)
			}
		}
		conn.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := g.ServiceStatus(ctx, &api.ServiceStatusRequest{}); err != nil {
		t.Fatalf("master unusable after malformed framed-RPC frames: %v", err)
	}
	framed, _ := api.DialFramed(addr)
	defer framed.Close()
	if _, err := api.NewMasterClient(framed).ServiceStatus(ctx, &api.ServiceStatusRequest{}); err != nil {
		t.Fatalf("framed RPC unusable after malformed frames: %v", err)
	}
}

// A master that is not there: Unavailable at once; a context that ends: DeadlineExceeded.
func TestFramedRPCUnreachableMaster(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	framed, _ := api.DialFramed(addr)
	defer framed.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	t0 := time.Now()
	var out api.Status
	err = framed.Invoke(ctx, "/"+api.ServiceName+"/ServiceStatus", &api.ServiceStatusRequest{}, &out)
	if status.Code(err) != codes.Unavailable || time.Since(t0) > 2*time.Second {
		t.Fatalf("call to a closed port: %v after %v", err, time.Since(t0))
	}
	// A listener that accepts but never answers: the call ends with its context.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	framed2, _ := api.DialFramed(silent.Addr().String())
	defer framed2.Close()
	sctx, scancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer scancel()
	if err := framed2.Invoke(sctx, "/"+api.ServiceName+"/ServiceStatus", &api.ServiceStatusRequest{}, &out); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("call to a silent master: %v", err)
	}
}
