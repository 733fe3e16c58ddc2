package memview

import "testing"

func TestBytesRoundTrip(t *testing.T) {
	buf := []byte{1, 2, 3, 4}
	v := Bytes(Addr(buf), 4)
	v[2] = 9
	if buf[2] != 9 || len(v) != 4 {
		t.Fatalf("view does not alias the buffer: %v", buf)
	}
	if Bytes(0, 4) != nil || Bytes(Addr(buf), 0) != nil {
		t.Fatal("empty views must be nil")
	}
}
