package transport

import (
	"errors"
	"testing"
)

func TestDecodeDescriptor(t *testing.T) {
	good := `{"name":"h:1","protocol":"tcp","tcp_data_port":1,"buffers":[{"name":"cpu:0","addr":4096,"length":100,"shm":{"pid":1,"fd":3,"name":"x","size":100}}]}`
	d, err := DecodeDescriptor([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if b := d.Find(4096, 100); b == nil || b.Shm == nil {
		t.Fatal("Find")
	}
	if d.Find(4096, 101) != nil || d.Find(4095, 1) != nil || d.Find(1<<63, 1<<63) != nil {
		t.Fatal("Find out of range")
	}
	for _, bad := range []string{
		``, `{`, `[]`, `{"name":""}`,
		`{"name":"a","buffers":[{"name":"","addr":1,"length":1}]}`,
		`{"name":"a","buffers":[{"name":"b","addr":0,"length":1}]}`,
		`{"name":"a","buffers":[{"name":"b","addr":1,"length":0}]}`,
		`{"name":"a","buffers":[{"name":"b","addr":18446744073709551615,"length":2}]}`,
		`{"name":"a","tcp_data_port":70000}`,
		`{"name":"a","buffers":[{"name":"b","addr":1,"length":10,"shm":{"pid":1,"fd":3,"size":5}}]}`,
	} {
		if _, err := DecodeDescriptor([]byte(bad)); !errors.Is(err, ErrMalformedDescriptor) {
			t.Fatalf("%q: %v", bad, err)
		}
	}
	d2, err := DecodeDescriptor(d.Encode())
	if err != nil || d2.Name != d.Name || len(d2.Buffers) != 1 {
		t.Fatal("round trip", err)
	}
}

func FuzzDecodeDescriptor(f *testing.F) {
	f.Add([]byte(`{"name":"h:1","protocol":"tcp","tcp_data_port":1,"buffers":[{"name":"cpu:0","addr":4096,"length":100}]}`))
	f.Add([]byte(`{"name":"a","buffers":[{"name":"b","addr":1,"length":10,"shm":{"pid":1,"fd":3,"name":"n","size":10}}]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := DecodeDescriptor(data)
		if err != nil {
			return
		}
		if d.Name == "" {
			t.Fatal("accepted an empty name")
		}
		for _, b := range d.Buffers {
			if b.Name == "" || b.Addr == 0 || b.Length == 0 || b.Addr+b.Length < b.Addr {
				t.Fatalf("accepted a bad buffer %+v", b)
			}
			if d.Find(b.Addr, b.Length) == nil {
				t.Fatal("Find misses a buffer")
			}
		}
		if _, err := DecodeDescriptor(d.Encode()); err != nil {
			t.Fatalf("re-encoded descriptor rejected: %v", err)
		}
	})
}
