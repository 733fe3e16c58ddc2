package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/engine/transport"
	"github.com/mooncake-go/mooncake/engine/transport/tcp"
)

// Stream is an ordered channel of WRITEs from this engine to one open segment (OpenStream):
// every Write is applied at the target after the stream's earlier Writes. To a segment
// reached over tcp a Write returns once its bytes are in the socket (its sources may be
// reused then), without waiting for the target's answer: the connection is the stream's own
// and the server answers only failures, which surface on a later Write; the stream then stays
// broken. To a segment on this host (shared memory) or the local segment a Write is applied
// before it returns, as TransferSync does. A Stream is safe for concurrent use; Writes from
// different goroutines are ordered as they take the stream's lock. The order holds among
// writes that reach the segment the same way: a write to a same-host shared buffer may land
// before an earlier one still in flight over tcp to plain memory of the same segment (p2p
// writes one shared buffer, so all its writes go one way).
//
// This is what a protocol that orders its own writes (p2p's mailbox cell, head, doorbell; credits)
// needs: one round trip less per message than TransferSync over tcp.
type Stream struct {
	e  *Engine
	id SegmentID

	mu   sync.Mutex
	ts   *tcp.Stream
	err  error
	prep []prepared
	reqs []transport.Request
}

// OpenStream opens a write stream to segment id (opened with OpenSegment).
func (e *Engine) OpenStream(id SegmentID) (*Stream, error) {
	if _, err := e.remote(id); err != nil {
		return nil, err
	}
	return &Stream{e: e, id: id}, nil
}

// Write applies reqs (OpWrite, target: the stream's segment) after the stream's earlier
// Writes. Sources need not be registered: the engine is done with them when Write returns
// (in the socket, or copied). An error names the failure; over tcp it may be one the target
// reported for an earlier Write. A failed stream stays failed.
func (s *Stream) Write(ctx context.Context, reqs []TransferRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if s.ts != nil {
		if err := s.ts.Err(); err != nil {
			s.err = fmt.Errorf("write stream to segment %d: %w", s.id, err)
			return s.err
		}
	}
	e := s.e
	if e.closed.Load() {
		return ErrClosed
	}
	prep := s.prep[:0]
	for range reqs {
		prep = append(prep, prepared{})
	}
	s.prep = prep
	release := func() {
		for i := range prep {
			if prep[i].pin != nil {
				prep[i].pin.Release()
			}
			prep[i] = prepared{}
		}
	}
	defer release()
	var refreshed map[SegmentID]bool
	tcpOnly := true
	var bytes uint64
	for i := range reqs {
		q := &reqs[i]
		if q.Opcode != OpWrite || q.TargetID != s.id {
			return errf(ErrInvalidArgument, "request %d: a write stream to segment %d carries WRITEs to it only", i, s.id)
		}
		if err := e.prepare(q, &prep[i], &refreshed, true); err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		if q.Length > 0 && prep[i].kind != kindTCP {
			tcpOnly = false
		}
		bytes += q.Length
	}
	r, err := e.remote(s.id)
	if err != nil {
		return err
	}
	if !tcpOnly {
		if err := s.applyNow(ctx, r, reqs, prep); err != nil {
			s.err = err
			return err
		}
		return nil
	}
	if s.ts == nil {
		octx, cancel := context.WithTimeout(ctx, min(e.timeout, 5*time.Second))
		s.ts, err = e.tcp.OpenStream(octx, r.addr)
		cancel()
		if err != nil {
			return fmt.Errorf("opening a write stream to segment %q: %w", r.name, err)
		}
	}
	tr := s.reqs[:0]
	for i := range reqs {
		q := &reqs[i]
		tr = append(tr, transport.Request{Write: true, Local: q.Source, Remote: q.TargetOffset, Length: q.Length})
	}
	s.reqs = tr
	e.kindBytes[kindTCP].Add(bytes)
	deadline := time.Now().Add(e.timeout + time.Duration(bytes)) // ~1 ns per byte on top, as batches
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	if err := s.ts.Write(tr, deadline); err != nil {
		s.err = fmt.Errorf("write stream to segment %q: %w", r.name, err)
		r.stale.Store(true)
		return s.err
	}
	return nil
}

// applyNow runs reqs in order, each maximal run of one transport kind to its end before the
// next (a same-host or local target, or a Write that mixes kinds).
func (s *Stream) applyNow(ctx context.Context, r *remoteSeg, reqs []TransferRequest, prep []prepared) error {
	e := s.e
	for i := 0; i < len(reqs); {
		k := prep[i].kind
		end := i + 1
		var bytes uint64 = reqs[i].Length
		for end < len(reqs) && prep[end].kind == k {
			bytes += reqs[end].Length
			end++
		}
		tr := s.reqs[:0]
		for j := i; j < end; j++ {
			q := &reqs[j]
			tr = append(tr, transport.Request{Write: true, Local: q.Source, Remote: q.TargetOffset, Length: q.Length})
		}
		s.reqs = tr
		rep := &firstErr{base: i}
		e.execute(ctx, k, &transport.Target{Desc: prep[i].desc, Addr: r.addr}, tr, bytes, rep)
		if rep.err != nil {
			r.stale.Store(true)
			return fmt.Errorf("write stream to segment %q: %w", r.name, rep.err)
		}
		i = end
	}
	return nil
}

// firstErr is a transport.Reporter that keeps the first failure.
type firstErr struct {
	base int
	err  error
}

func (f *firstErr) Progress(int, uint64) {}

func (f *firstErr) Done(i int, err error) {
	if err != nil && f.err == nil {
		f.err = fmt.Errorf("request %d: %w", f.base+i, err)
	}
}

// Network reports whether the stream's segment is reached over the network (another host or
// network namespace, or MC_FORCE_TCP): only then does a Write skip a round trip. Its shared
// buffers on this host are written by memcpy either way.
func (s *Stream) Network() bool {
	r, err := s.e.remote(s.id)
	if err != nil {
		return false
	}
	d := r.desc.Load()
	return s.e.forceTCP || d == nil || d.HostID == "" || d.HostID != s.e.hostID
}

// Close ends the stream (writes already sent may still be applied).
func (s *Stream) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = fmt.Errorf("write stream to segment %d: %w", s.id, ErrClosed)
	}
	if s.ts != nil {
		s.ts.Close()
		s.ts = nil
	}
	return nil
}
