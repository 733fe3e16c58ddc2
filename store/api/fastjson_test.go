package api

import (
	"encoding/json"
	"reflect"
	"testing"
)

// hotSamples are values of every type with a writer and reader, with the cases that change
// their JSON: empty and nil slices, omitted fields, strings that need escaping, extremes.
func hotSamples() []any {
	odd := "k\"<&>\\\n\u2028é\xff"
	reps := []Replica{
		{SegmentID: "seg-1", SegmentName: "127.0.0.1:1234", Addr: 1 << 63, Size: 4096, Status: ReplicaComplete},
		{SegmentID: odd, SegmentName: "n", Addr: 0, Size: 0, Status: ReplicaProcessing, Kind: KindDisk,
			Path: "a/b c", Offset: -5, Checksum: 4294967295, Endpoint: "h:1"},
	}
	return []any{
		&KeyRequest{}, &KeyRequest{ClientID: "c1", Key: "key/1"}, &KeyRequest{ClientID: odd, Key: odd},
		&KeyRequest{ClientID: "c", Key: "k", Value: []byte("\x00\xffvalue bytes+/=")}, &KeyRequest{Key: "k", Value: []byte{1}},
		&KeyRequest{ClientID: "c", Key: "k", Reserved: "r", Value: []byte{1}, Confirmed: []string{"a", odd}},
		// ASCII escapes only (a reservation's name holds 0x1f): within the fast reader's subset.
		&KeyRequest{ClientID: "c", Key: "a<b>&\tc", Reserved: "\x1fput-reservation\x1fc/1", Confirmed: []string{"k\x1f", "x\"y\\z/\b\f\n\r\x00\x7f"}},
		&BatchKeysRequest{ClientID: "c", Keys: []string{"\x1fa", "<&>"}},
		&BatchKeysRequest{Keys: []string{"a", "b", "c"}, Values: [][]byte{[]byte("one"), nil, {}}},
		&BatchKeysRequest{Keys: []string{"a"}, Values: [][]byte{[]byte("xy")}},
		&BatchKeysRequest{}, &BatchKeysRequest{ClientID: "c", Keys: []string{}},
		&BatchKeysRequest{ClientID: "c", Keys: []string{"a", odd, ""}, Force: true},
		&Status{}, &Status{Code: -704, Message: "key \"x\" not found"}, &Status{Code: OBJECT_NOT_FOUND, Message: "plain"},
		&ExistKeyResponse{}, &ExistKeyResponse{Exists: true, Size: 18446744073709551615},
		&ExistKeyResponse{Status: Status{Code: -600, Message: odd}},
		&GetReplicaListResponse{}, &GetReplicaListResponse{Size: 4096, Replicas: reps, LeaseTTLMs: 5000},
		&GetReplicaListResponse{Status: Status{Code: -704, Message: "m"}, Replicas: []Replica{}, LeaseTTLMs: -1},
		&GetReplicaListResponse{Size: 3, Replicas: reps[:1], LeaseTTLMs: 5000, Value: []byte{0, 1, 255}},
		&PutStartResponse{}, &PutStartResponse{Replicas: reps, Retry: true},
		&BatchStatusResponse{}, &BatchStatusResponse{Results: []Status{}},
		&BatchStatusResponse{Status: Status{Code: -1}, Results: []Status{{}, {Code: -704, Message: odd}}},
		&BatchExistKeyResponse{Results: []ExistKeyResponse{{Exists: true, Size: 4096}, {}, {Status: Status{Code: -600, Message: "bad"}}}},
		&BatchGetReplicaListResponse{Results: []GetReplicaListResponse{{Size: 1, Replicas: reps[:1], LeaseTTLMs: 5}, {}}},
		&BatchPutStartResponse{Results: []PutStartResponse{{Replicas: reps}, {Retry: true}}},
	}
}

func TestFastJSONWritesEncodingJSONsBytes(t *testing.T) {
	for _, v := range hotSamples() {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := fastMarshal(v)
		if !ok {
			t.Fatalf("%T has no writer", v)
		}
		if string(got) != string(want) {
			t.Errorf("%T:\n fast %s\n json %s", v, got, want)
		}
	}
	// A Promote replica is left to encoding/json; the codec's output is the same either way.
	v := &GetReplicaListResponse{Size: 1, Promote: &Replica{SegmentID: "s"}}
	if _, ok := fastMarshal(v); ok {
		t.Fatal("a response with Promote was written by the fast writer")
	}
	got, err := jsonCodec{}.Marshal(v)
	want, _ := json.Marshal(v)
	if err != nil || string(got) != string(want) {
		t.Fatalf("codec: %s, %v; want %s", got, err, want)
	}
	// Types that embed Status but have no writer of their own go to encoding/json whole.
	for _, v := range []any{&CountResponse{Count: 3}, &PingResponse{MountedSegments: []string{"a"}, ClientTTLMs: 7}} {
		if _, ok := fastMarshal(v); ok {
			t.Fatalf("%T was written by the fast writer", v)
		}
	}
}

// decodeBoth decodes data with the codec and with encoding/json into new values of v's type
// and checks they agree (both the value and whether it is an error).
func decodeBoth(t *testing.T, v any, data string) {
	t.Helper()
	typ := reflect.TypeOf(v).Elem()
	a, b := reflect.New(typ).Interface(), reflect.New(typ).Interface()
	errA := jsonCodec{}.Unmarshal([]byte(data), a)
	errB := json.Unmarshal([]byte(data), b)
	if (errA == nil) != (errB == nil) {
		t.Fatalf("%T from %s: codec error %v, encoding/json error %v", v, data, errA, errB)
	}
	if errB == nil && !reflect.DeepEqual(a, b) {
		t.Fatalf("%T from %s:\n codec %#v\n json  %#v", v, data, a, b)
	}
}

func TestFastJSONReadsWhatEncodingJSONReads(t *testing.T) {
	for _, v := range hotSamples() {
		data, _ := json.Marshal(v)
		decodeBoth(t, v, string(data))
		// Within the subset (ASCII, escapes of ASCII only), the fast reader itself must have
		// read it.
		if isASCII(string(data)) && asciiEscapes(string(data)) {
			fresh := reflect.New(reflect.TypeOf(v).Elem()).Interface()
			if !fastUnmarshal(data, fresh) {
				t.Fatalf("%T: the fast reader gave up on %s", v, data)
			}
			if !reflect.DeepEqual(fresh, v) && !hasEmptyVsNil(v) {
				t.Fatalf("%T: fast reader made %#v of %s", v, fresh, data)
			}
		}
	}
	// Inputs outside the subset, or not JSON at all: the codec answers as encoding/json does.
	odd := []struct {
		v    any
		data string
	}{
		{&KeyRequest{}, `{"client_id":"a\u0041","key":"k"}`}, // an escape
		{&KeyRequest{}, `{"client_id":"\u001Fx\/\b\f\n\r\t\"\\\u003c","key":"k"}`},
		{&KeyRequest{}, `{"client\u005fid":"a","key":"k"}`},
		{&KeyRequest{}, `{"client_id":"a\u00e9","key":"k"}`},       // a non-ASCII escape
		{&KeyRequest{}, `{"client_id":"a\ud83d\ude00","key":"k"}`}, // a surrogate pair
		{&KeyRequest{}, `{"client_id":"a\ud83d","key":"k"}`},       // a lone surrogate
		{&KeyRequest{}, `{"client_id":"a\u00","key":"k"}`},         // cut short
		{&KeyRequest{}, `{"client_id":"a\u004G","key":"k"}`},       // not hex
		{&KeyRequest{}, `{"client_id":"a\x41","key":"k"}`},         // no such escape
		{&KeyRequest{}, `{"client_id":"a\u0041\`},
		{&KeyRequest{}, "{\"client_id\":\"a\\u0041\x01\",\"key\":\"k\"}"}, // a raw control byte
		{&KeyRequest{}, `{"Client_ID":"a","key":"k"}`},                    // another case
		{&KeyRequest{}, `{"client_id":"a","key":"k","x":[1]}`},            // an unknown field
		{&KeyRequest{}, ` { "client_id" : "a" , "key" : "k" } `},
		{&KeyRequest{}, `{"client_id":"a","key":"k"`}, // cut short
		{&KeyRequest{}, `{"client_id":"a","key":"k"}x`},
		{&KeyRequest{}, `{"client_id":1}`},
		{&KeyRequest{}, `null`},
		{&KeyRequest{}, `{"key":"é"}`},
		{&BatchKeysRequest{}, `{"client_id":"c","keys":null}`},
		{&BatchKeysRequest{}, `{"client_id":"c","keys":[]}`},
		{&BatchKeysRequest{}, `{"client_id":"c","keys":["a",]}`},
		{&BatchKeysRequest{}, `{"client_id":"c","keys":["a","b"],"force":false,"keys":["z"]}`},
		{&Status{}, `{"code":2147483648}`},
		{&Status{}, `{"code":-1.5}`},
		{&Status{}, `{"code":1e3}`},
		{&Status{}, `{}`},
		{&ExistKeyResponse{}, `{"code":0,"exists":true,"size":-1}`},
		{&ExistKeyResponse{}, `{"code":0,"exists":1}`},
		{&GetReplicaListResponse{}, `{"code":0,"size":1,"replicas":[{"segment_id":"s","addr":1,"status":3}],"promote":{"segment_id":"p"}}`},
		{&GetReplicaListResponse{}, `{"code":0,"replicas":null,"lease_ttl_ms":1}`},
		{&BatchExistKeyResponse{}, `{"code":0,"results":[{"exists":true},{"exists":false,"size":3}]}`},
		{&BatchExistKeyResponse{}, `{"code":0,"results":null}`},
		{&BatchExistKeyResponse{}, `{"results":[{"exists":true}`},
		{&BatchStatusResponse{}, `{"code":0,"results":[{"code":-704,"message":"m"},{}]}`},
		{&BatchPutStartResponse{}, `{"results":[{"replicas":[],"retry":true}]}`},
		{&KeyRequest{}, `{"key":"k","value":"AAE="}`},
		{&KeyRequest{}, `{"key":"k","value":"AAE"}`},  // bad padding
		{&KeyRequest{}, `{"key":"k","value":"!!!!"}`}, // not base64
		{&KeyRequest{}, `{"key":"k","value":""}`},
		{&KeyRequest{}, `{"key":"k","value":null}`},
		{&KeyRequest{}, `{"key":"k","value":"AA\nE="}`},
		{&KeyRequest{}, "{\"key\":\"k\",\"value\":\"AA\nE=\"}"}, // a raw newline in a string: not JSON
		{&KeyRequest{}, "{\"key\":\"k\",\"value\":\"AA\rE=\"}"},
		{&KeyRequest{}, `{"key":"k","value":"AAE=`},
		{&BatchKeysRequest{}, `{"keys":["a","b"],"values":["AAE=",null,""]}`},
		{&BatchKeysRequest{}, `{"keys":["a"],"values":[]}`},
		{&BatchKeysRequest{}, `{"keys":["a"],"values":null}`},
		{&GetReplicaListResponse{}, `{"code":0,"size":2,"value":"AAE="}`},
	}
	for _, c := range odd {
		decodeBoth(t, c.v, c.data)
	}
}

// asciiEscapes reports whether every \u escape of s is of an ASCII character.
func asciiEscapes(s string) bool {
	for i := 0; i+1 < len(s); i++ {
		if s[i] != '\\' {
			continue
		}
		if s[i+1] == 'u' && (i+6 > len(s) || s[i+2:i+4] != "00" || s[i+4] > '7') {
			return false
		}
		i++ // the escaped character
	}
	return true
}

// hasEmptyVsNil: encoding/json writes an empty Replicas as absent (omitempty), which reads back
// as nil: such a sample does not round-trip through any JSON reader.
func hasEmptyVsNil(v any) bool {
	switch m := v.(type) {
	case *GetReplicaListResponse:
		return m.Replicas != nil && len(m.Replicas) == 0
	}
	return false
}

// BenchmarkCodecBatchExist: one batch_is_exist of 64 keys, request and answer, both ends.
func BenchmarkCodecBatchExist(b *testing.B) {
	req := &BatchKeysRequest{ClientID: "client-0123456789"}
	resp := &BatchExistKeyResponse{}
	for i := range 64 {
		req.Keys = append(req.Keys, "r0/4 KiB/put_batch/"+string(rune('a'+i%26))+"x")
		resp.Results = append(resp.Results, ExistKeyResponse{Exists: true, Size: 4096})
	}
	for _, mode := range []string{"fast", "encoding/json"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				var rq BatchKeysRequest
				var rs BatchExistKeyResponse
				if mode == "fast" {
					q, _ := jsonCodec{}.Marshal(req)
					jsonCodec{}.Unmarshal(q, &rq)
					s, _ := jsonCodec{}.Marshal(resp)
					jsonCodec{}.Unmarshal(s, &rs)
				} else {
					q, _ := json.Marshal(req)
					json.Unmarshal(q, &rq)
					s, _ := json.Marshal(resp)
					json.Unmarshal(s, &rs)
				}
			}
		})
	}
}

// BenchmarkCodecBatchReplicaList: the answer of a batch get of 64 keys (one memory replica
// each, all on one segment), written and read.
func BenchmarkCodecBatchReplicaList(b *testing.B) {
	resp := &BatchGetReplicaListResponse{}
	for i := range 64 {
		resp.Results = append(resp.Results, GetReplicaListResponse{Size: 4096, LeaseTTLMs: 5000,
			Replicas: []Replica{{SegmentID: "seg-3f9a1c2e", SegmentName: "10.0.0.2:12345", Addr: 1<<40 + uint64(i)*4096, Size: 4096, Status: ReplicaComplete, Kind: KindMemory}}})
	}
	s, _ := jsonCodec{}.Marshal(resp)
	b.Run("write", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			jsonCodec{}.Marshal(resp)
		}
	})
	b.Run("read", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var rs BatchGetReplicaListResponse
			if err := (jsonCodec{}).Unmarshal(s, &rs); err != nil || len(rs.Results) != 64 {
				b.Fatal(err)
			}
		}
	})
}

// FuzzFastJSONAgreesWithEncodingJSON: whatever the input, the codec's requests decode to what
// encoding/json makes of them (the fast reader's strings with escapes included).
func FuzzFastJSONAgreesWithEncodingJSON(f *testing.F) {
	f.Add(`{"client_id":"c","key":"k","reserved":"\u001fput-reservation\u001fc/1","confirmed":["a\u001f"]}`)
	f.Add(`{"client_id":"\u001Fx\/\b\f\n\r\t\"\\\u003c","key":"k"}`)
	f.Add(`{"client_id":"a\ud83d\ude00","key":"\u00e9"}`)
	f.Add(`{"client_id":"c","keys":["\u0041",""],"force":true,"values":["AAE=",null]}`)
	f.Fuzz(func(t *testing.T, data string) {
		decodeBoth(t, &KeyRequest{}, data)
		decodeBoth(t, &BatchKeysRequest{}, data)
	})
}

// TestStringsAreWrittenAsEncodingJSONWritesThem: every ASCII byte, alone and among others, and
// strings beyond ASCII.
func TestStringsAreWrittenAsEncodingJSONWritesThem(t *testing.T) {
	var all []byte
	for c := range 0x80 {
		all = append(all, byte(c))
	}
	cases := []string{"", "plain", string(all), "\x1fput-reservation\x1fc/1", "é", "a\u2028b", "\xff", "<é>"}
	for c := range 0x80 {
		cases = append(cases, string(rune(c)), "a"+string(rune(c))+"b")
	}
	for _, s := range cases {
		want, _ := json.Marshal(s)
		if got := appendStr([]byte("x"), s); string(got) != "x"+string(want) {
			t.Fatalf("%q written as %s, encoding/json writes %s", s, got[1:], want)
		}
	}
}
