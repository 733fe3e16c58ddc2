package p2p

// The memory layout of an endpoint's region, the chunk header of a mailbox cell, and the Info a
// rank publishes so that its peers can compute addresses in its region.

import (
	"encoding/binary"
	"fmt"
)

// Info is what a rank publishes so that peers can reach it.
type Info struct {
	Rank      int    `json:"rank"`
	Segment   string `json:"segment"`
	Addr      uint64 `json:"addr"`
	MaxPeers  int    `json:"max_peers"`
	Credits   int    `json:"credits"`
	CellBytes int    `json:"cell_bytes"`
	// Engine identifies the process's engine instance (liveness probes check it, so a new
	// process that took over a dead one's address is not mistaken for it).
	Engine string `json:"engine,omitempty"`
	// Instance tells this endpoint from an earlier one of the same process at the same
	// address (a group re-initialised in the process): random per endpoint.
	Instance uint64 `json:"instance,omitempty"`
}

const (
	line    = 64
	cellHdr = 64
)

// layout computes offsets within a region; identical on every rank.
type layout struct {
	P, K, S int
}

func (l layout) ctrl(p int) int    { return p * line }
func (l layout) bell() int         { return l.P * line }
func (l layout) scratch(p int) int { return (l.P+1)*line + p*line }
func (l layout) cellSize() int     { return cellHdr + l.S }
func (l layout) stage(p, k int) int {
	return (2*l.P+1)*line + (p*l.K+k)*l.cellSize()
}
func (l layout) mailbox(p, k int) int {
	return (2*l.P+1)*line + l.P*l.K*l.cellSize() + (p*l.K+k)*l.cellSize()
}
func (l layout) size() int { return l.mailbox(l.P, 0) }

// checkInfo checks a peer's published endpoint against this one's layout.
func (e *Endpoint) checkInfo(info Info) error {
	if info.Rank < 0 || info.Rank >= e.lay.P {
		return fmt.Errorf("p2p: peer rank %d outside a group of %d", info.Rank, e.lay.P)
	}
	if info.MaxPeers != e.lay.P || info.Credits != e.lay.K || info.CellBytes != e.lay.S {
		return fmt.Errorf("p2p: rank %d uses a layout of %d peers x %d credits x %d bytes, rank %d uses %d x %d x %d (set the same options on every rank)",
			info.Rank, info.MaxPeers, info.Credits, info.CellBytes, e.rank, e.lay.P, e.lay.K, e.lay.S)
	}
	return nil
}

func putHeader(b []byte, tag uint64, id uint32, n, total, off int) {
	binary.LittleEndian.PutUint64(b[0:], tag)
	binary.LittleEndian.PutUint32(b[8:], id)
	binary.LittleEndian.PutUint32(b[12:], uint32(n))
	binary.LittleEndian.PutUint64(b[16:], uint64(total))
	binary.LittleEndian.PutUint64(b[24:], uint64(off))
}

type chunkHdr struct {
	tag   uint64
	id    uint32
	n     int
	total int
	off   int
}

func getHeader(b []byte) chunkHdr {
	return chunkHdr{
		tag: binary.LittleEndian.Uint64(b[0:]), id: binary.LittleEndian.Uint32(b[8:]),
		n:     int(binary.LittleEndian.Uint32(b[12:])),
		total: int(binary.LittleEndian.Uint64(b[16:])), off: int(binary.LittleEndian.Uint64(b[24:])),
	}
}
