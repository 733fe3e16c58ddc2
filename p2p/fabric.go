package p2p

import (
	"context"
	"sync"

	"github.com/mooncake-go/mooncake/engine"
)

// Fabric is what p2p needs from the transfer engine.
type Fabric interface {
	SegmentName() string
	AllocateShared(length uint64) (uintptr, error)
	FreeShared(addr uintptr) error
	OpenSegment(name string) (uint64, error)
	// Write applies ws to segment seg in order and returns once all are complete. Sources are
	// local registered memory; 4-byte aligned 4-byte writes wake futex waiters on the target.
	Write(ctx context.Context, seg uint64, ws []Write) error
}

// Write is one WRITE of Len bytes from local Src to the target address Dst.
type Write struct {
	Src uintptr
	Dst uint64
	Len uint64
}

// EngineFabric runs p2p over a transfer engine.
func EngineFabric(e *engine.Engine) Fabric { return &engineFabric{e: e} }

type engineFabric struct {
	e    *engine.Engine
	pool sync.Pool
}

func (f *engineFabric) SegmentName() string                      { return f.e.SegmentName() }
func (f *engineFabric) AllocateShared(n uint64) (uintptr, error) { return f.e.AllocateShared(n) }
func (f *engineFabric) FreeShared(addr uintptr) error            { return f.e.FreeShared(addr) }

func (f *engineFabric) OpenSegment(name string) (uint64, error) {
	id, err := f.e.OpenSegment(name)
	return uint64(id), err
}

func (f *engineFabric) Write(ctx context.Context, seg uint64, ws []Write) error {
	var reqs []engine.TransferRequest
	if v := f.pool.Get(); v != nil {
		reqs = (*(v.(*[]engine.TransferRequest)))[:0]
	}
	for _, w := range ws {
		reqs = append(reqs, engine.TransferRequest{Opcode: engine.OpWrite, Source: w.Src,
			TargetID: engine.SegmentID(seg), TargetOffset: w.Dst, Length: w.Len})
	}
	err := f.e.TransferSync(ctx, reqs)
	f.pool.Put(&reqs)
	return err
}
