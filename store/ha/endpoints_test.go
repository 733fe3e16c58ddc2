package ha

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseEndpoints(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Endpoints
	}{
		{`"http://h1:2379;http://h2:2379"`, Endpoints{Kind: KindEtcd, Addrs: []string{"http://h1:2379", "http://h2:2379"}}},
		{"etcd://10.0.0.1:2379,10.0.0.2:2379", Endpoints{Kind: KindEtcd, Addrs: []string{"http://10.0.0.1:2379", "http://10.0.0.2:2379"}}},
		{"127.0.0.1:2379", Endpoints{Kind: KindEtcd, Addrs: []string{"http://127.0.0.1:2379"}}},
		{"redis://h:6379", Endpoints{Kind: KindRedis, Addrs: []string{"h:6379"}}},
		{"redis://:pw@h:6379/3", Endpoints{Kind: KindRedis, Addrs: []string{"h:6379"}, Password: "pw", DB: 3}},
		{"redis://a:1;redis://b:2", Endpoints{Kind: KindRedis, Addrs: []string{"a:1", "b:2"}}},
		{"redis://a:1,b:2", Endpoints{Kind: KindRedis, Addrs: []string{"a:1", "b:2"}}},
		{"rediss://u:p@a:1", Endpoints{Kind: KindRedis, Addrs: []string{"a:1"}, Username: "u", Password: "p", TLS: true}},
		{"https://h1:2379;https://h2:2379", Endpoints{Kind: KindEtcd, Addrs: []string{"https://h1:2379", "https://h2:2379"}, TLS: true}},
		{"etcds://h1:2379,h2:2379", Endpoints{Kind: KindEtcd, Addrs: []string{"https://h1:2379", "https://h2:2379"}, TLS: true}},
	} {
		got, err := ParseEndpoints(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseEndpoints(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "ftp://h:1", "http://h", "redis://h:1;http://h:2", "h:99999", "https://h:2379;http://h:2380", "etcd://a:1,https://b:2",
		"redis://h:1/x", "redis://a:1/2;redis://b:1"} {
		if _, err := ParseEndpoints(bad); err == nil {
			t.Errorf("ParseEndpoints(%q) accepted", bad)
		}
	}
	// Options carry MC_REDIS_PASSWORD and MC_REDIS_DB_INDEX.
	o := Options{RedisPassword: "envpw", RedisDBIndex: "2"}
	got, err := ParseEndpointsWith("redis://h:1", o)
	if err != nil || got.Password != "envpw" || got.DB != 2 {
		t.Errorf("env not applied: %+v, %v", got, err)
	}
	got, _ = ParseEndpointsWith("redis://:urlpw@h:1/5", o)
	if got.Password != "urlpw" || got.DB != 5 {
		t.Errorf("URL must win over env: %+v", got)
	}
	o.RedisDBIndex = "x"
	if _, err := ParseEndpointsWith("redis://h:1", o); err == nil || !strings.Contains(err.Error(), "MC_REDIS_DB_INDEX") {
		t.Errorf("bad MC_REDIS_DB_INDEX: %v", err)
	}
}

func TestKeys(t *testing.T) {
	if got := etcdViewKey("c1"); got != "mooncake-store/c1/master_view" {
		t.Fatal(got)
	}
	if got := redisViewKey("a{b}c"); got != "mooncake-store/{a_b_c}/master_view" {
		t.Fatal(got)
	}
	if got := redisVersionKey("c1"); got != "mooncake-store/{c1}/master_view_version" {
		t.Fatal(got)
	}
}

func TestBatchCodec(t *testing.T) {
	in, err := checkAppend([]Entry{{Seq: 7, Type: 1, Payload: []byte("a")}, {Seq: 8, Type: 2}, {Seq: 9, Type: 3, Payload: bytes.Repeat([]byte{0xff}, 300)}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := decodeBatch(encodeBatch(in))
	if err != nil || checkRead(7, out) != nil || len(out) != 3 || !bytes.Equal(out[2].Payload, in[2].Payload) {
		t.Fatalf("round trip: %+v, %v", out, err)
	}
	enc := encodeBatch(in)
	enc[30] ^= 1 // inside the first payload or header fields
	if out, err := decodeBatch(enc); err == nil {
		if err := checkRead(7, out); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flipped bit not caught: %v", err)
		}
	}
	if _, err := checkAppend([]Entry{{Seq: 1}, {Seq: 3}}); !errors.Is(err, ErrSeqMismatch) {
		t.Fatalf("gap accepted: %v", err)
	}
	if _, err := checkAppend([]Entry{{Seq: 0}}); !errors.Is(err, ErrSeqMismatch) {
		t.Fatalf("seq 0 accepted: %v", err)
	}
}

func FuzzDecodeBatch(f *testing.F) {
	e, _ := checkAppend([]Entry{{Seq: 1, Type: 1, Payload: []byte("x")}, {Seq: 2}})
	f.Add(encodeBatch(e))
	f.Add([]byte("MCO1\xff\xff\xff\xff"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := decodeBatch(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error without ErrCorrupt: %v", err)
			}
			return
		}
		if !bytes.Equal(encodeBatch(out), b) {
			t.Fatal("decode/encode not inverse")
		}
	})
}

func TestClientForm(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:2379;http://10.0.0.2:2379": "etcd://127.0.0.1:2379,10.0.0.2:2379",
		"127.0.0.1:2379":                   "etcd://127.0.0.1:2379",
		"etcds://h:1,h2:2":                 "etcds://h:1,h2:2",
		"redis://:secret@127.0.0.1:6379/3": "redis://127.0.0.1:6379/3",
		"rediss://a:1;rediss://b:2":        "rediss://a:1,b:2",
	} {
		ep, err := ParseEndpoints(in)
		if err != nil {
			t.Fatalf("ParseEndpoints(%q): %v", in, err)
		}
		if got := ep.ClientForm(); got != want {
			t.Errorf("ClientForm of %q = %q, want %q", in, got, want)
		}
		back, err := ParseEndpoints(want)
		if err != nil || back.Kind != ep.Kind || back.TLS != ep.TLS || back.DB != ep.DB || strings.Join(back.Addrs, ",") != strings.Join(ep.Addrs, ",") {
			t.Errorf("ParseEndpoints(%q) = %+v, %v; want the endpoints of %q", want, back, err, in)
		}
	}
}
