package tcp

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/mooncake-go/mooncake/internal/rawsys"
)

// Op is a frame operation.
type Op uint8

const (
	OpRead       Op = 1 // remote memory -> initiator
	OpWrite      Op = 2 // initiator -> remote memory
	OpDescriptor Op = 3 // ask for the segment descriptor (P2P handshake)
	OpNotify     Op = 4 // deliver a notification (payload: JSON {"name","msg"})
	OpPing       Op = 5 // liveness probe
)

const (
	reqMagic   = 0x5154434D // "MCTQ"
	respMagic  = 0x5254434D // "MCTR"
	version    = 1
	reqHdrLen  = 32
	respHdrLen = 24

	// MaxDataFrame bounds the length of one READ/WRITE frame; clients chunk below it.
	MaxDataFrame = 1 << 30
	// MaxControlFrame bounds control payloads and error messages.
	MaxControlFrame = 1 << 20
)

// FlagQuiet on a WRITE asks the server not to answer it unless it fails: the answer to a later
// frame on the connection confirms it, since frames are applied in order. A client sets it on
// every WRITE frame of a run but the last, so a run costs one answer, not one per frame.
const FlagQuiet uint16 = 1

// Status codes carried in responses (Mooncake's transfer-engine error codes).
const (
	StatusOK                   = 0
	StatusInvalidArgument      = -1
	StatusAddressNotRegistered = -3
	StatusNotImplemented       = -400
)

// ErrMalformedFrame is returned by the decoders for anything that is not a valid frame.
var ErrMalformedFrame = errors.New("malformed frame")

// Header is a decoded request header.
type Header struct {
	Op     Op
	Flags  uint16
	Seq    uint32
	Addr   uint64
	Length uint64
}

// EncodeHeader writes h into b (at least 32 bytes).
func EncodeHeader(b []byte, h *Header) {
	_ = b[reqHdrLen-1]
	binary.LittleEndian.PutUint32(b[0:], reqMagic)
	b[4] = version
	b[5] = byte(h.Op)
	binary.LittleEndian.PutUint16(b[6:], h.Flags)
	binary.LittleEndian.PutUint32(b[8:], h.Seq)
	binary.LittleEndian.PutUint32(b[12:], 0)
	binary.LittleEndian.PutUint64(b[16:], h.Addr)
	binary.LittleEndian.PutUint64(b[24:], h.Length)
}

// DecodeHeader parses and validates a request header.
func DecodeHeader(b []byte, h *Header) error {
	if len(b) < reqHdrLen {
		return fmt.Errorf("%w: header is %d bytes, want %d", ErrMalformedFrame, len(b), reqHdrLen)
	}
	if m := binary.LittleEndian.Uint32(b[0:]); m != reqMagic {
		return fmt.Errorf("%w: bad magic %#x", ErrMalformedFrame, m)
	}
	if b[4] != version {
		return fmt.Errorf("%w: unsupported version %d", ErrMalformedFrame, b[4])
	}
	h.Op = Op(b[5])
	h.Flags = binary.LittleEndian.Uint16(b[6:])
	h.Seq = binary.LittleEndian.Uint32(b[8:])
	h.Addr = binary.LittleEndian.Uint64(b[16:])
	h.Length = binary.LittleEndian.Uint64(b[24:])
	switch h.Op {
	case OpRead, OpWrite:
		if h.Length > MaxDataFrame {
			return fmt.Errorf("%w: data frame of %d bytes exceeds %d", ErrMalformedFrame, h.Length, MaxDataFrame)
		}
		if h.Addr+h.Length < h.Addr {
			return fmt.Errorf("%w: range wraps around", ErrMalformedFrame)
		}
	case OpDescriptor, OpNotify, OpPing:
		if h.Length > MaxControlFrame {
			return fmt.Errorf("%w: control frame of %d bytes exceeds %d", ErrMalformedFrame, h.Length, MaxControlFrame)
		}
	default:
		return fmt.Errorf("%w: unknown op %d", ErrMalformedFrame, h.Op)
	}
	return nil
}

// response header
type respHeader struct {
	Status int32
	Seq    uint32
	Length uint64
}

func encodeResp(b []byte, r *respHeader) {
	_ = b[respHdrLen-1]
	binary.LittleEndian.PutUint32(b[0:], respMagic)
	binary.LittleEndian.PutUint32(b[4:], uint32(r.Status))
	binary.LittleEndian.PutUint32(b[8:], r.Seq)
	binary.LittleEndian.PutUint32(b[12:], 0)
	binary.LittleEndian.PutUint64(b[16:], r.Length)
}

func decodeResp(b []byte, r *respHeader) error {
	if len(b) < respHdrLen {
		return fmt.Errorf("%w: response header is %d bytes", ErrMalformedFrame, len(b))
	}
	if m := binary.LittleEndian.Uint32(b[0:]); m != respMagic {
		return fmt.Errorf("%w: bad response magic %#x", ErrMalformedFrame, m)
	}
	r.Status = int32(binary.LittleEndian.Uint32(b[4:]))
	r.Seq = binary.LittleEndian.Uint32(b[8:])
	r.Length = binary.LittleEndian.Uint64(b[16:])
	return nil
}

// RemoteError is an error answered by the peer's server.
type RemoteError struct {
	Code int
	Msg  string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("peer refused the request (code %d): %s", e.Code, e.Msg)
}

// frameWriter gathers frames into one writev: headers and small payloads are copied into a
// scratch buffer, large payloads are written from where they lie (no copy through a bufio
// buffer, which cost a third of a 256 KiB write's time on loopback).
type frameWriter struct {
	small []byte // copied bytes; small[mark:] is not yet in bufs
	mark  int
	bufs  net.Buffers
}

// copyBelow: payloads shorter than this are copied (one iovec per tiny piece costs more).
const copyBelow = 16 << 10

func (w *frameWriter) add(b []byte) { w.small = append(w.small, b...) }

// addRef queues b by reference: it must stay unchanged until flush returns.
func (w *frameWriter) addRef(b []byte) {
	if len(b) < copyBelow {
		w.add(b)
		return
	}
	w.cut()
	w.bufs = append(w.bufs, b)
}

func (w *frameWriter) cut() {
	if w.mark < len(w.small) {
		w.bufs = append(w.bufs, w.small[w.mark:len(w.small):len(w.small)])
		w.mark = len(w.small)
	}
}

// full reports whether the queue is worth writing out before adding more.
func (w *frameWriter) full() bool { return len(w.small) >= 1<<20 || len(w.bufs) >= 256 }

// flush writes everything queued (writev) and empties the queue.
func (w *frameWriter) flush(c net.Conn) error {
	w.cut()
	v := w.bufs
	_, err := rawsys.WriteBuffers(c, &v)
	clear(w.bufs)
	w.bufs, w.small, w.mark = w.bufs[:0], w.small[:0], 0
	return err
}

// readBypass: reads of at least this many bytes skip the bufio buffer once it is drained.
const readBypass = 16 << 10

// readInto fills dst from br, reading straight from c (the connection under br) once br's
// buffered bytes are used up, so large payloads are not copied through br's buffer.
func readInto(br *bufio.Reader, c net.Conn, dst []byte) error {
	if len(dst) < readBypass {
		_, err := io.ReadFull(br, dst)
		return err
	}
	n := 0
	if b := br.Buffered(); b > 0 {
		n, _ = br.Read(dst[:min(b, len(dst))])
	}
	if r, ok := c.(interface{ ReadFull([]byte) (int, error) }); ok {
		// rawsys's connections (Detached, Conn): woken once per low-water mark of bytes.
		_, err := r.ReadFull(dst[n:])
		return err
	}
	_, err := io.ReadFull(c, dst[n:])
	return err
}
