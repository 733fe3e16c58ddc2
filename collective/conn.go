package collective

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
)

// Conn is the transport the algorithms run on: tagged, ordered point-to-point messages between
// ranks. Messages from one peer with one tag arrive in the order they were sent.
//
// Send may return before the peer posts the matching Recv: the transport buffers (and drains
// its receive side on its own), so Send waits at most for flow control, never for a matching
// Recv. Recv takes the first message from peer with tag (peer AnySource: from any peer); a
// message longer than buf is an error, a shorter one returns its length.
//
// Abort ends the op whose tags are in tag space space (see SpaceOf): pending and later Recvs
// for tags in that space fail with an *AbortError, on this rank and on every rank in peers
// (told best effort, without blocking the caller), and messages in that space are dropped.
// The peers get abort with Peer set to this rank (the transport fills it in on arrival).
type Conn interface {
	Send(ctx context.Context, peer int, tag uint64, data []byte) error
	Recv(ctx context.Context, peer int, tag uint64, buf []byte) (n int, err error)
	Abort(space uint64, peers []int, abort *AbortError)
}

// AnySource as the peer of a Recv matches a message from any peer.
const AnySource = -1

// Tag layout: bit 63 marks collective tags, bits 16..62 hold the op sequence number and bits
// 0..15 the step within the op; the tag space of an op is tag>>16. User point-to-point tags have
// bit 62 set and bit 63 clear (UserTag), so they never meet collective tags.
const (
	collectiveBit = uint64(1) << 63
	userBit       = uint64(1) << 62
	seqMask       = uint64(1)<<47 - 1
	// AbortStep is the step reserved for abort messages.
	AbortStep = 0xFFFF
)

// Tag returns the tag of step in the op with sequence number seq.
func Tag(seq uint64, step uint16) uint64 { return collectiveBit | (seq&seqMask)<<16 | uint64(step) }

// SpaceOf returns the tag space of tag (the op it belongs to).
func SpaceOf(tag uint64) uint64 { return tag >> 16 }

// IsAbortTag reports whether tag is an abort message's tag.
func IsAbortTag(tag uint64) bool { return tag&collectiveBit != 0 && tag&0xFFFF == AbortStep }

// AbortTag is the tag of the abort message for tag space space.
func AbortTag(space uint64) uint64 { return space<<16 | AbortStep }

// UserTag maps a user (torch) point-to-point tag into its own space.
func UserTag(tag int32) uint64 { return userBit | uint64(uint32(tag)) }

// AbortError is what a Recv returns once its op was aborted, here or by a peer.
type AbortError struct {
	Peer   int    // the rank that aborted
	Reason string // its error
	Failed []int  // its failed-ranks hint
}

func (e *AbortError) Error() string {
	return fmt.Sprintf("rank %d gave up on the op: %s", e.Peer, e.Reason)
}

// ErrTimeout marks errors caused by the op's deadline passing.
var ErrTimeout = errors.New("timed out")

// PeerError is an op failure that involves a peer rank (it did not answer, a transfer to it
// failed, it aborted the op).
type PeerError struct {
	Op      string
	Rank    int // local rank
	Peer    int
	More    []int  // further peers that did not answer (the shared-memory path names them all)
	Timeout string // non-empty: the peer did not answer within this long
	Err     error
}

func (e *PeerError) Error() string {
	var ae *AbortError
	switch {
	case e.Timeout != "" && len(e.More) > 0:
		ranks := fmt.Sprint(e.Peer)
		for _, r := range e.More {
			ranks += fmt.Sprintf(", %d", r)
		}
		return fmt.Sprintf("%s on rank %d: peer ranks %s did not answer within %s", e.Op, e.Rank, ranks, e.Timeout)
	case e.Timeout != "":
		return fmt.Sprintf("%s on rank %d: peer rank %d did not answer within %s", e.Op, e.Rank, e.Peer, e.Timeout)
	case errors.As(e.Err, &ae):
		return fmt.Sprintf("%s on rank %d: %v", e.Op, e.Rank, ae)
	default:
		return fmt.Sprintf("%s on rank %d: with peer rank %d: %v", e.Op, e.Rank, e.Peer, e.Err)
	}
}

func (e *PeerError) Unwrap() error {
	if e.Timeout != "" {
		return errors.Join(ErrTimeout, e.Err)
	}
	return e.Err
}

// FailedRanks is the failed-ranks hint: the peer, or, when the peer aborted the op, the
// ranks the peer found failed.
func (e *PeerError) FailedRanks() []int {
	var ae *AbortError
	if errors.As(e.Err, &ae) {
		return append([]int(nil), ae.Failed...)
	}
	return append([]int{e.Peer}, e.More...)
}

// MismatchError is an op whose ranks disagree on its arguments; every rank reports the same one.
type MismatchError struct {
	Msg string
	// Membership: the members had applied different numbers of membership decisions.
	Membership bool
}

func (e *MismatchError) Error() string { return e.Msg }

// EncodeAbort is the wire form of an abort message: the failed-ranks count (uint32), the
// ranks (int32 each), then the reason, little-endian.
func EncodeAbort(a *AbortError) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(a.Failed)))
	for _, r := range a.Failed {
		b = binary.LittleEndian.AppendUint32(b, uint32(int32(r)))
	}
	return append(b, a.Reason...)
}

// DecodeAbort parses EncodeAbort's output (Peer is left -1 for the transport to set).
func DecodeAbort(b []byte) *AbortError {
	a := &AbortError{Peer: -1}
	if len(b) < 4 {
		a.Reason = string(b)
		return a
	}
	n := int(binary.LittleEndian.Uint32(b))
	if n < 0 || 4+4*n > len(b) {
		a.Reason = string(b)
		return a
	}
	for i := 0; i < n; i++ {
		a.Failed = append(a.Failed, int(int32(binary.LittleEndian.Uint32(b[4+4*i:]))))
	}
	a.Reason = string(b[4+4*n:])
	return a
}

// ErrPeerDead marks a failure caused by a peer that is gone: its process does not answer a
// liveness probe, or the membership protocol declared it failed. Transports wrap it; the
// fault-tolerance layer tells a dead peer (exclude it, go on) from a slow one (keep waiting).
var ErrPeerDead = errors.New("its process does not answer liveness probes")

// LivenessChecker is implemented by transports that can tell whether a peer is alive
// (p2p.Endpoint). The same-host fast path calls PeerAlive while it waits on a silent peer.
type LivenessChecker interface {
	// PeerAlive returns nil when rank answers, else an error wrapping ErrPeerDead.
	PeerAlive(ctx context.Context, rank int) error
}
