package master

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mooncake-go/mooncake/store/api"
)

// framedMounted dials addr over the framed RPC and mounts client c1's segment s1 (1 MiB) there;
// the connection and the context end with the test.
func framedMounted(t *testing.T, addr string) (*api.FramedConn, *api.MasterClient, context.Context) {
	t.Helper()
	framed, err := api.DialFramed(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { framed.Close() })
	l := api.NewMasterClient(framed)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	st, err := l.MountSegment(ctx, &api.MountSegmentRequest{ClientID: "c1", Segment: api.Segment{ID: "s1", Name: "h1:1", Base: 4096, Size: 1 << 20}})
	if err != nil || st.Code != api.OK {
		t.Fatalf("mount over the framed RPC: %v %+v", err, st)
	}
	return framed, l, ctx
}

// The framed RPC and gRPC share one port and one state: what a framed-RPC client writes, a gRPC client
// sees, and the per-method metrics count both.
func TestFramedRPCAndGRPCOnOnePort(t *testing.T) {
	srv, g, addr := startServer(t)
	framed, l, ctx := framedMounted(t, addr)
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

// Values travel as binary attachments over the framed RPC (store/api/attach.go) and as base64
// over gRPC: a value put through one is read back byte for byte through both, single and batch.
func TestFramedRPCAttachedValues(t *testing.T) {
	_, g, addr := startServer(t)
	_, l, ctx := framedMounted(t, addr)
	value := func(i, n int) []byte {
		v := make([]byte, n)
		for j := range v {
			v[j] = byte(i*7 + j) // every byte value, quotes and backslashes included
		}
		return v
	}
	put := func(key string, size int) {
		t.Helper()
		ps, err := l.PutStart(ctx, &api.PutStartRequest{ClientID: "c1", Key: key, Size: uint64(size), Config: api.ReplicateConfig{ReplicaNum: 1}})
		if err != nil || ps.Code != api.OK {
			t.Fatalf("put start %s: %v %+v", key, err, ps)
		}
	}
	put("one", 4096)
	if st, err := l.PutEnd(ctx, &api.KeyRequest{ClientID: "c1", Key: "one", Value: value(1, 4096)}); err != nil || st.Code != api.OK {
		t.Fatalf("put end: %v %+v", err, st)
	}
	keys := []string{"b0", "b1", "b2"}
	for _, k := range keys {
		put(k, 100)
	}
	// b1 sends no value: its answer carries none, and the others' stay in place.
	vals := [][]byte{value(10, 100), nil, value(12, 100)}
	if res, err := l.BatchPutEnd(ctx, &api.BatchKeysRequest{ClientID: "c1", Keys: keys, Values: vals}); err != nil || res.Code != api.OK {
		t.Fatalf("batch put end: %v %+v", err, res)
	}
	for name, c := range map[string]*api.MasterClient{"framed": l, "gRPC": g} {
		one, err := c.GetReplicaList(ctx, &api.KeyRequest{Key: "one"})
		if err != nil || one.Code != api.OK || !bytes.Equal(one.Value, value(1, 4096)) || len(one.Replicas) != 1 {
			t.Fatalf("%s: get of the single put: %v code %v, %d value bytes", name, err, one.Code, len(one.Value))
		}
		batch, err := c.BatchGetReplicaList(ctx, &api.BatchKeysRequest{Keys: append([]string{"one", "missing"}, keys...)})
		if err != nil || len(batch.Results) != 5 {
			t.Fatalf("%s: batch get: %v %+v", name, err, batch)
		}
		want := [][]byte{value(1, 4096), nil, vals[0], nil, vals[2]}
		for i, r := range batch.Results {
			if !bytes.Equal(r.Value, want[i]) {
				t.Errorf("%s: batch result %d: %d value bytes, want %d", name, i, len(r.Value), len(want[i]))
			}
		}
		if batch.Results[1].Code != api.OBJECT_NOT_FOUND {
			t.Errorf("%s: missing key answered %v", name, batch.Results[1].Code)
		}
	}
	// The caller's request is not changed by the framed client's detaching of its values.
	req := &api.KeyRequest{ClientID: "c1", Key: "one", Value: []byte("x")}
	l.PutEnd(ctx, req)
	if string(req.Value) != "x" {
		t.Errorf("the request's value changed to %q", req.Value)
	}
	// A client older than attachments (plain method names) still gets the value as base64 in
	// the JSON of a kind-0 reply.
	reply := rawFramedCall(t, rawFramedConn(t, addr), "/"+api.ServiceName+"/GetReplicaList", []byte(`{"client_id":"old","key":"one"}`))
	var old api.GetReplicaListResponse
	if reply[0] != 0 || json.Unmarshal(reply[1:], &old) != nil || !bytes.Equal(old.Value, value(1, 4096)) {
		t.Errorf("plain-layout get: reply kind %d, %d value bytes", reply[0], len(old.Value))
	}
}

// A marked call whose attachment layout is malformed is an InvalidArgument status, and the
// connection stays usable; a master that predates attachments (it answers the marked name
// "unknown method") gets the call again in the plain layout.
func TestFramedRPCAttachmentLayout(t *testing.T) {
	_, _, addr := startServer(t)
	conn := rawFramedConn(t, addr)
	call := func(body []byte) (byte, string) {
		t.Helper()
		reply := rawFramedCall(t, conn, "+/"+api.ServiceName+"/ExistKey", body)
		return reply[0], string(reply[1:])
	}
	msg := []byte(`{"client_id":"c","key":"k"}`)
	good := append(binary.LittleEndian.AppendUint32(nil, uint32(len(msg))), msg...)
	good = binary.LittleEndian.AppendUint32(good, 0)
	for _, bad := range [][]byte{msg, good[:len(good)-2], append(append([]byte{}, good...), 'x'),
		binary.LittleEndian.AppendUint32(bytes.Clone(good[:len(good)-4]), 1<<30)} {
		if kind, msg := call(bad); kind != 1 || !strings.Contains(msg, "attachment layout") {
			t.Errorf("malformed layout %q: reply kind %d %q", bad, kind, msg)
		}
	}
	if kind, msg := call(good); kind != 0 || msg != `{"code":0,"exists":false}` {
		t.Errorf("well-formed marked call: reply kind %d %q", kind, msg)
	}

	// An old master, as its frames go: the marked name is an unknown method; the plain one works.
	old, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	go func() {
		c, err := old.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		magic := make([]byte, 8)
		io.ReadFull(c, magic)
		for {
			var hdr [4]byte
			if _, err := io.ReadFull(c, hdr[:]); err != nil {
				return
			}
			f := make([]byte, binary.LittleEndian.Uint32(hdr[:]))
			if _, err := io.ReadFull(c, f); err != nil {
				return
			}
			name := string(f[1 : 1+int(f[0])])
			var reply []byte
			if strings.HasPrefix(name, "+") {
				reply = binary.LittleEndian.AppendUint32([]byte{1}, uint32(codes.Unimplemented))
				reply = append(reply, `unknown method "`+name+`"`...)
			} else {
				reply = append([]byte{0}, `{"code":0,"exists":true,"size":7}`...)
			}
			c.Write(append(binary.LittleEndian.AppendUint32(nil, uint32(len(reply))), reply...))
		}
	}()
	framed, _ := api.DialFramed(old.Addr().String())
	defer framed.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := 0; i < 2; i++ {
		ex, err := api.NewMasterClient(framed).ExistKey(ctx, &api.KeyRequest{Key: "k"})
		if err != nil || !ex.Exists || ex.Size != 7 {
			t.Fatalf("call %d to an old master: %v %+v", i, err, ex)
		}
	}
}

// rawFramedConn is a plain TCP connection to addr that has sent the framed RPC's magic; it
// closes when the test ends.
func rawFramedConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	conn.Write([]byte("MCLANE1\n"))
	return conn
}

// rawFramedCall writes one request frame (method, then body as it is) and returns the reply
// frame (its kind byte first).
func rawFramedCall(t *testing.T, conn net.Conn, method string, body []byte) []byte {
	t.Helper()
	f := append(append([]byte{byte(len(method))}, method...), body...)
	if _, err := conn.Write(append(binary.LittleEndian.AppendUint32(nil, uint32(len(f))), f...)); err != nil {
		t.Fatal(err)
	}
	var hdr [4]byte
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		t.Fatal(err)
	}
	reply := make([]byte, binary.LittleEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(conn, reply); err != nil {
		t.Fatal(err)
	}
	return reply
}

// A connection reads each request into the frame buffer of its last one and writes each
// answer from the buffer of its last answer: what a request left in the state (keys, client
// ids, a small value's bytes) must not change when the next request of the same size is read
// over it, nor an answer when the next is written.
func TestFramedRequestsOutliveTheirFrame(t *testing.T) {
	srv, _, addr := startServer(t)
	framedMounted(t, addr) // mounts c1's segment
	conn := rawFramedConn(t, addr)
	method := func(name string) string { return "/" + api.ServiceName + "/" + name }
	value := func(c byte) []byte { return bytes.Repeat([]byte{c}, 64) }
	// A first request larger than all the others: each later one is read into its buffer.
	var many []string
	for i := range 200 {
		many = append(many, fmt.Sprintf("absent-%d", i))
	}
	big, _ := json.Marshal(api.BatchKeysRequest{ClientID: "c1", Keys: many})
	if r := rawFramedCall(t, conn, method("BatchExistKey"), big); r[0] != 0 {
		t.Fatalf("batch exist: %q", r)
	}
	var answers [][]byte
	for _, c := range []byte{'A', 'B', 'C'} {
		key := "key-" + strings.Repeat(string(c), 8)
		start, _ := json.Marshal(api.PutStartRequest{ClientID: "c1", Key: key, Size: 64, Config: api.ReplicateConfig{ReplicaNum: 1}})
		if r := rawFramedCall(t, conn, method("PutStart"), start); r[0] != 0 || !strings.Contains(string(r), `"replicas"`) {
			t.Fatalf("put start %s: %q", key, r)
		}
		end, _ := json.Marshal(api.KeyRequest{ClientID: "c1", Key: key, Value: value(c)})
		if r := rawFramedCall(t, conn, method("PutEnd"), end); r[0] != 0 || string(r[1:]) != `{"code":0}` {
			t.Fatalf("put end %s: %q", key, r)
		}
		// A reader of its own: the master keeps its id (liveness), decoded by the fast reader.
		get := fmt.Sprintf(`{"client_id":"reader-%s","key":%q}`, strings.Repeat(string(c), 8), key)
		answers = append(answers, rawFramedCall(t, conn, method("GetReplicaList"), []byte(get)))
	}
	for i, c := range []byte{'A', 'B', 'C'} {
		var got api.GetReplicaListResponse
		if err := json.Unmarshal(answers[i][1:], &got); err != nil || got.Code != api.OK || !bytes.Equal(got.Value, value(c)) {
			t.Fatalf("answer %d: %v %+v", i, err, got)
		}
		key := "key-" + strings.Repeat(string(c), 8)
		var r api.GetReplicaListResponse
		if err := json.Unmarshal(rawFramedCall(t, conn, method("GetReplicaList"), []byte(fmt.Sprintf(`{"client_id":"c2","key":%q}`, key)))[1:], &r); err != nil ||
			r.Code != api.OK || !bytes.Equal(r.Value, value(c)) {
			t.Fatalf("get %s after the later requests: %v %+v", key, err, r)
		}
	}
	srv.View(func(st *State) {
		if keys := st.Keys(); !slices.Equal(keys, []string{"key-AAAAAAAA", "key-BBBBBBBB", "key-CCCCCCCC"}) {
			t.Errorf("the master's keys: %q", keys)
		}
	})
	srv.mu.Lock()
	var seen []string
	for id := range srv.lastSeen {
		seen = append(seen, id)
	}
	srv.mu.Unlock()
	slices.Sort(seen)
	if want := []string{"c1", "c2", "reader-AAAAAAAA", "reader-BBBBBBBB", "reader-CCCCCCCC"}; !slices.Equal(seen, want) {
		t.Errorf("clients the master heard from: %q, want %q", seen, want)
	}
}
