package api

import (
	"reflect"
	"testing"
)

func TestCodecRoundTrip(t *testing.T) {
	c := jsonCodec{}
	in := &PutStartRequest{ClientID: "c", Key: "k\x00é", Size: 1 << 40, Config: ReplicateConfig{ReplicaNum: 2, WithHardPin: true, PreferredSegments: []string{"h:1"}}}
	b, err := c.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out := new(PutStartRequest)
	if err := c.Unmarshal(b, out); err != nil || !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip: %v %+v", err, out)
	}
	if err := c.Unmarshal([]byte("\x08\x01garbage"), out); err == nil {
		t.Fatal("garbage decoded")
	}
}

func TestCodeOf(t *testing.T) {
	err := Errorf(OBJECT_NOT_FOUND, "key %q not found", "x")
	if CodeOf(err) != OBJECT_NOT_FOUND || !Is(err, OBJECT_NOT_FOUND) || CodeOf(nil) != OK {
		t.Fatal("CodeOf")
	}
	if OBJECT_HAS_LEASE.String() != "OBJECT_HAS_LEASE" || ErrorCode(-12345).String() != "ERROR(-12345)" {
		t.Fatal("String")
	}
}

// FuzzDecodeRequests feeds arbitrary bytes to the decoder of every request the master accepts:
// it must return an error or a value, never panic.
func FuzzDecodeRequests(f *testing.F) {
	f.Add([]byte(`{"client_id":"c","key":"k","size":10,"config":{"replica_num":1}}`))
	f.Add([]byte(`{"keys":["a","b"],"sizes":[1,2]}`))
	f.Add([]byte(`{"segment":{"id":"x","name":"h:1","base":4096,"size":1e30}}`))
	f.Add([]byte("\xff\xfe"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := jsonCodec{}
		for _, v := range []any{new(MountSegmentRequest), new(UnmountSegmentRequest), new(PingRequest),
			new(PutStartRequest), new(KeyRequest), new(RemoveRequest), new(RemoveByRegexRequest),
			new(RemoveAllRequest), new(BatchPutStartRequest), new(BatchKeysRequest), new(ServiceStatusRequest)} {
			_ = c.Unmarshal(data, v)
		}
	})
}
