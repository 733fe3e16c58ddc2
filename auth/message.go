package auth

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ErrMalformed wraps every decoding failure: the bytes are not a handshake message.
var ErrMalformed = errors.New("malformed authentication message")

// MsgType is a handshake message's type.
type MsgType uint8

const (
	MsgHello     MsgType = 1 // client -> server: nonce, identity
	MsgChallenge MsgType = 2 // server -> client: nonce, identity
	MsgProof     MsgType = 3 // client -> server: mac
	MsgResult    MsgType = 4 // server -> client: ok, mac
)

const (
	magic     = "MCAU"
	version   = 1
	hdrLen    = 8
	NonceLen  = 32
	MACLen    = 32
	MaxIDLen  = 255
	maxBody   = NonceLen + 1 + MaxIDLen
	resultLen = 1 + MACLen
)

// Message is one decoded handshake message; which fields count depends on Type.
type Message struct {
	Type  MsgType
	Nonce [NonceLen]byte // Hello, Challenge
	ID    string         // Hello, Challenge: at most MaxIDLen bytes
	MAC   [MACLen]byte   // Proof, Result
	OK    bool           // Result
}

// Append appends m's encoding to b. An ID longer than MaxIDLen is cut to MaxIDLen bytes.
func (m *Message) Append(b []byte) []byte {
	var body int
	id := m.ID
	if len(id) > MaxIDLen {
		id = id[:MaxIDLen]
	}
	switch m.Type {
	case MsgHello, MsgChallenge:
		body = NonceLen + 1 + len(id)
	case MsgProof:
		body = MACLen
	case MsgResult:
		body = resultLen
	}
	b = append(b, magic...)
	b = append(b, version, byte(m.Type))
	b = binary.LittleEndian.AppendUint16(b, uint16(body))
	switch m.Type {
	case MsgHello, MsgChallenge:
		b = append(b, m.Nonce[:]...)
		b = append(b, byte(len(id)))
		b = append(b, id...)
	case MsgProof:
		b = append(b, m.MAC[:]...)
	case MsgResult:
		ok := byte(0)
		if m.OK {
			ok = 1
		}
		b = append(b, ok)
		b = append(b, m.MAC[:]...)
	}
	return b
}

// decodeHeader checks an 8-byte header and returns the type and body length.
func decodeHeader(h []byte) (MsgType, int, error) {
	if len(h) < hdrLen {
		return 0, 0, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrMalformed, len(h), hdrLen)
	}
	if string(h[:4]) != magic {
		return 0, 0, fmt.Errorf("%w: bad magic %q", ErrMalformed, h[:4])
	}
	if h[4] != version {
		return 0, 0, fmt.Errorf("%w: unsupported version %d (this build speaks %d)", ErrMalformed, h[4], version)
	}
	t := MsgType(h[5])
	n := int(binary.LittleEndian.Uint16(h[6:]))
	var ok bool
	switch t {
	case MsgHello, MsgChallenge:
		ok = n >= NonceLen+1 && n <= maxBody
	case MsgProof:
		ok = n == MACLen
	case MsgResult:
		ok = n == resultLen
	default:
		return 0, 0, fmt.Errorf("%w: unknown message type %d", ErrMalformed, t)
	}
	if !ok {
		return 0, 0, fmt.Errorf("%w: body of %d bytes is invalid for message type %d", ErrMalformed, n, t)
	}
	return t, n, nil
}

// Decode parses exactly one message; anything else (short, trailing bytes, bad fields) is an
// error wrapping ErrMalformed.
func Decode(b []byte) (Message, error) {
	t, n, err := decodeHeader(b)
	if err != nil {
		return Message{}, err
	}
	if len(b) != hdrLen+n {
		return Message{}, fmt.Errorf("%w: %d bytes, want %d", ErrMalformed, len(b), hdrLen+n)
	}
	return decodeBody(t, b[hdrLen:])
}

func decodeBody(t MsgType, body []byte) (Message, error) {
	m := Message{Type: t}
	switch t {
	case MsgHello, MsgChallenge:
		copy(m.Nonce[:], body[:NonceLen])
		idLen := int(body[NonceLen])
		if NonceLen+1+idLen != len(body) {
			return Message{}, fmt.Errorf("%w: identity of %d bytes in a body of %d", ErrMalformed, idLen, len(body))
		}
		m.ID = string(body[NonceLen+1:])
	case MsgProof:
		copy(m.MAC[:], body)
	case MsgResult:
		switch body[0] {
		case 0:
		case 1:
			m.OK = true
		default:
			return Message{}, fmt.Errorf("%w: result status %d", ErrMalformed, body[0])
		}
		copy(m.MAC[:], body[1:])
	}
	return m, nil
}

// ReadMessage reads one message from r: the header first, then exactly the body it announces
// (never more than the largest valid body).
func ReadMessage(r io.Reader) (Message, error) {
	var buf [hdrLen + maxBody]byte
	if _, err := io.ReadFull(r, buf[:hdrLen]); err != nil {
		return Message{}, err
	}
	t, n, err := decodeHeader(buf[:hdrLen])
	if err != nil {
		return Message{}, err
	}
	if _, err := io.ReadFull(r, buf[hdrLen:hdrLen+n]); err != nil {
		return Message{}, err
	}
	return decodeBody(t, buf[hdrLen:hdrLen+n])
}
