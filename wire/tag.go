package wire

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

// AnySource as the peer of a receive matches a message from any peer.
const AnySource = -1

// Tag returns the tag of step in the op with sequence number seq.
func Tag(seq uint64, step uint16) uint64 { return collectiveBit | (seq&seqMask)<<16 | uint64(step) }

// SpaceOf returns the tag space of tag (the op it belongs to).
func SpaceOf(tag uint64) uint64 { return tag >> 16 }

// IsCollective reports whether tag belongs to a collective op (not a user point-to-point tag).
func IsCollective(tag uint64) bool { return tag&collectiveBit != 0 }

// IsAbortTag reports whether tag is an abort message's tag.
func IsAbortTag(tag uint64) bool { return tag&collectiveBit != 0 && tag&0xFFFF == AbortStep }

// AbortTag is the tag of the abort message for tag space space.
func AbortTag(space uint64) uint64 { return space<<16 | AbortStep }

// UserTag maps a user (torch) point-to-point tag into its own space.
func UserTag(tag int32) uint64 { return userBit | uint64(uint32(tag)) }
