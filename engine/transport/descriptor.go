package transport

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ShmInfo tells a peer on the same host how to map a shared buffer: open
// /proc/<pid>/fd/<fd> (a memfd), check that it is the memfd named Name, and mmap Size bytes
// MAP_SHARED. Path, when set, is a /dev/shm fallback file holding the same memory.
type ShmInfo struct {
	PID  int    `json:"pid"`
	FD   int    `json:"fd"`
	Name string `json:"name"`
	Size uint64 `json:"size"`
	Path string `json:"path,omitempty"`
}

// BufferDesc is one registered buffer of a segment. Name is its location ("cpu:0").
type BufferDesc struct {
	Name   string   `json:"name"`
	Addr   uint64   `json:"addr"`
	Length uint64   `json:"length"`
	Shm    *ShmInfo `json:"shm,omitempty"`
}

// SegmentDescriptor is the published description of a segment, in Mooncake's JSON shape
// (name, protocol, tcp_data_port, buffers) plus what this implementation needs to pick a
// transport (host_id, pid) and to reach the owner (ip, rpc_port).
type SegmentDescriptor struct {
	Name        string       `json:"name"`
	Protocol    string       `json:"protocol"`
	TCPDataPort int          `json:"tcp_data_port"`
	RPCPort     int          `json:"rpc_port,omitempty"`
	IP          string       `json:"ip,omitempty"`
	HostID      string       `json:"host_id,omitempty"`
	PID         int          `json:"pid,omitempty"`
	Buffers     []BufferDesc `json:"buffers"`
	Devices     []string     `json:"devices,omitempty"`
}

// ErrMalformedDescriptor is wrapped by DecodeDescriptor.
var ErrMalformedDescriptor = errors.New("malformed segment descriptor")

// DecodeDescriptor parses and validates a descriptor: the segment and every buffer need a
// name, buffers need a non-zero address and length that do not wrap around, ports must be
// in range.
func DecodeDescriptor(data []byte) (*SegmentDescriptor, error) {
	var d SegmentDescriptor
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformedDescriptor, err)
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	return &d, nil
}

// Validate checks the invariants DecodeDescriptor enforces.
func (d *SegmentDescriptor) Validate() error {
	if d.Name == "" {
		return fmt.Errorf("%w: empty segment name", ErrMalformedDescriptor)
	}
	if d.TCPDataPort < 0 || d.TCPDataPort > 65535 || d.RPCPort < 0 || d.RPCPort > 65535 {
		return fmt.Errorf("%w: segment %q: port out of range", ErrMalformedDescriptor, d.Name)
	}
	for i := range d.Buffers {
		b := &d.Buffers[i]
		if b.Name == "" {
			return fmt.Errorf("%w: segment %q: buffer %d has an empty name", ErrMalformedDescriptor, d.Name, i)
		}
		if b.Addr == 0 || b.Length == 0 {
			return fmt.Errorf("%w: segment %q: buffer %d has a zero address or length", ErrMalformedDescriptor, d.Name, i)
		}
		if b.Addr+b.Length < b.Addr {
			return fmt.Errorf("%w: segment %q: buffer %d wraps around the address space", ErrMalformedDescriptor, d.Name, i)
		}
		if b.Shm != nil && (b.Shm.Size < b.Length || (b.Shm.Path == "" && (b.Shm.PID <= 0 || b.Shm.FD < 0))) {
			return fmt.Errorf("%w: segment %q: buffer %d has bad shared-memory info", ErrMalformedDescriptor, d.Name, i)
		}
	}
	return nil
}

// Encode returns the descriptor's JSON.
func (d *SegmentDescriptor) Encode() []byte {
	b, _ := json.Marshal(d)
	return b
}

// Find returns the buffer that holds [addr, addr+length), or nil.
func (d *SegmentDescriptor) Find(addr, length uint64) *BufferDesc {
	end := addr + length
	if end < addr {
		return nil
	}
	for i := range d.Buffers {
		b := &d.Buffers[i]
		if addr >= b.Addr && end <= b.Addr+b.Length {
			return b
		}
	}
	return nil
}
