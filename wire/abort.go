package wire

import (
	"encoding/binary"
	"fmt"
)

// AbortError is what a receive returns once its op was aborted, here or by a peer.
type AbortError struct {
	Peer   int    // the rank that aborted
	Reason string // its error
	Failed []int  // its failed-ranks hint
}

func (e *AbortError) Error() string {
	return fmt.Sprintf("rank %d gave up on the op: %s", e.Peer, e.Reason)
}

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
