package metadata

import (
	"fmt"
	"strings"
	"testing"
)

func TestOpenP2P(t *testing.T) {
	for _, s := range []string{"P2PHANDSHAKE", " P2PHANDSHAKE ", "p2phandshake"} {
		st, err := Open(s)
		if err != nil || st != nil {
			t.Errorf("Open(%q) = %v, %v; want nil, nil", s, st, err)
		}
	}
}

func TestOpenMalformed(t *testing.T) {
	cases := map[string]string{
		"":                     "empty connection string",
		"   ":                  "empty connection string",
		"localhost":            "not a known form",
		"localhost:notaport":   "invalid port",
		"h:1,":                 "empty endpoint",
		":2379":                "no host",
		"etcd://":              "bad etcd connection string",
		"etcd://h:1,,h:2":      "empty endpoint",
		"etcd://h":             "not host:port",
		"etcd://h:70000":       "invalid port",
		"http://":              "has no host",
		"http:///metadata":     "has no host",
		"https://%zz/metadata": "bad HTTP metadata server URL",
		"redis://":             "has no host",
		"redis://h:1/notadb":   "bad Redis URL",
		"ftp://h:1":            `unknown scheme "ftp"`,
	}
	for conn, want := range cases {
		st, err := Open(conn)
		if err == nil {
			st.Close()
			t.Errorf("Open(%q) succeeded; want an error containing %q", conn, want)
			continue
		}
		if !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "metadata: ") {
			t.Errorf("Open(%q) error %q; want it to contain %q", conn, err, want)
		}
	}
}

func TestOpenKinds(t *testing.T) {
	cases := map[string]string{
		"http://127.0.0.1:8080/metadata":   "*metadata.httpStore",
		"HTTPS://example.com/metadata":     "*metadata.httpStore",
		"etcd://127.0.0.1:2379":            "*metadata.etcdStore",
		"etcd://a:1,b:2,[::1]:3":           "*metadata.etcdStore",
		"127.0.0.1:2379":                   "*metadata.etcdStore",
		"a:1,b:2":                          "*metadata.etcdStore",
		"redis://127.0.0.1:6379":           "*metadata.redisStore",
		"redis://:secret@127.0.0.1:6379/2": "*metadata.redisStore",
	}
	for conn, want := range cases {
		st, err := Open(conn)
		if err != nil {
			t.Errorf("Open(%q): %v", conn, err)
			continue
		}
		if got := typeName(st); got != want {
			t.Errorf("Open(%q) is %s, want %s", conn, got, want)
		}
		st.Close()
	}
}

// TestOpenRedisEnv: the settings of MC_REDIS_PASSWORD and MC_REDIS_DB_INDEX (Options) apply when
// the URL gives none.
func TestOpenRedisEnv(t *testing.T) {
	o := Options{RedisPassword: "envpw", RedisDBIndex: "3"}
	check := func(conn, pw string, db int) {
		t.Helper()
		st, err := OpenWith(conn, o)
		if err != nil {
			t.Fatalf("Open(%q): %v", conn, err)
		}
		defer st.Close()
		o := st.(*redisStore).cli.Options()
		if o.Password != pw || o.DB != db {
			t.Errorf("Open(%q): password %q db %d; want %q %d", conn, o.Password, o.DB, pw, db)
		}
	}
	check("redis://127.0.0.1:6379", "envpw", 3)
	check("redis://:urlpw@127.0.0.1:6379/5", "urlpw", 5)
	check("redis://127.0.0.1:6379/0", "envpw", 0)

	o.RedisDBIndex = "x"
	if _, err := OpenWith("redis://127.0.0.1:6379", o); err == nil || !strings.Contains(err.Error(), "MC_REDIS_DB_INDEX") {
		t.Errorf("bad MC_REDIS_DB_INDEX: err = %v", err)
	}
}

func TestHTTPKeyEncoding(t *testing.T) {
	st, err := openHTTP("http://h:1/metadata?cluster=a", Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := st.url("mooncake/ram/a b&c=d+e/é")
	want := "http://h:1/metadata?cluster=a&key=mooncake%2Fram%2Fa%20b%26c%3Dd%2Be%2F%C3%A9"
	if got != want {
		t.Errorf("url = %s\nwant  %s", got, want)
	}
}

func typeName(v any) string { return fmt.Sprintf("%T", v) }
