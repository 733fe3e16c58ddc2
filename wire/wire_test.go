package wire

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
)

func TestTagLayout(t *testing.T) {
	tag := Tag(5, 3)
	if tag != 1<<63|5<<16|3 {
		t.Fatalf("Tag(5, 3) = %#x", tag)
	}
	if SpaceOf(tag) != SpaceOf(Tag(5, 7)) || SpaceOf(tag) == SpaceOf(Tag(6, 3)) {
		t.Fatalf("spaces: %#x %#x %#x", SpaceOf(tag), SpaceOf(Tag(5, 7)), SpaceOf(Tag(6, 3)))
	}
	ab := AbortTag(SpaceOf(tag))
	if ab != Tag(5, AbortStep) || !IsAbortTag(ab) || IsAbortTag(tag) || SpaceOf(ab) != SpaceOf(tag) {
		t.Fatalf("AbortTag = %#x", ab)
	}
	// The sequence number wraps within its 47 bits instead of reaching the marker bits.
	if got := Tag(1<<47+2, 1); got != Tag(2, 1) {
		t.Fatalf("Tag(2^47+2, 1) = %#x, want %#x", got, Tag(2, 1))
	}
	u := UserTag(-1)
	if u != 1<<62|0xFFFFFFFF || IsCollective(u) || !IsCollective(tag) || IsAbortTag(UserTag(0xFFFF)) {
		t.Fatalf("UserTag(-1) = %#x", u)
	}
	if SpaceOf(UserTag(7)) == SpaceOf(Tag(0, 7)) {
		t.Fatal("a user tag shares a collective op's space")
	}
}

func TestAbortEncoding(t *testing.T) {
	for _, a := range []*AbortError{
		{Peer: 3, Reason: "all_reduce: timed out", Failed: []int{1, 2}},
		{Peer: 0, Reason: "", Failed: nil},
		{Peer: 1, Reason: "x", Failed: []int{-1}},
	} {
		got := DecodeAbort(EncodeAbort(a))
		if got.Peer != -1 || got.Reason != a.Reason || !reflect.DeepEqual(got.Failed, a.Failed) {
			t.Errorf("%+v: decoded %+v", a, got)
		}
	}
	// Not the encoding (too short, or a count past the end): the bytes are the reason.
	for _, b := range []string{"ab", "\x09\x00\x00\x00oops"} {
		if got := DecodeAbort([]byte(b)); got.Reason != b || got.Failed != nil || got.Peer != -1 {
			t.Errorf("%q: decoded %+v", b, got)
		}
	}
	if s := (&AbortError{Peer: 2, Reason: "boom"}).Error(); s != "rank 2 gave up on the op: boom" {
		t.Errorf("Error() = %q", s)
	}
	if err := fmt.Errorf("rank 4 is gone: %w", ErrPeerDead); !errors.Is(err, ErrPeerDead) ||
		err.Error() != "rank 4 is gone: its process does not answer liveness probes" {
		t.Errorf("wrapped: %v", err)
	}
}
