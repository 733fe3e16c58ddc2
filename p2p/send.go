package p2p

// The send side: Send stages a message's chunks in the cells of the peer's mailbox it holds
// credits for and writes them in one batch per window; the creditor returns credits to a peer
// for what the receive side consumed.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/mooncake-go/mooncake/internal/memview"
	"github.com/mooncake-go/mooncake/wire"
)

// Send sends data to peer with tag: it returns once data may be reused: the message is in the
// peer's mailbox, or (over a write stream) on its way there in order (a failure then shows on a
// later Send to the peer). It never waits for the peer to receive the message.
func (e *Endpoint) Send(ctx context.Context, peer int, tag uint64, data []byte) error {
	if peer < 0 || peer >= e.lay.P {
		return fmt.Errorf("p2p: rank %d does not exist (group of %d)", peer, e.lay.P)
	}
	p := e.peers[peer]
	if !p.connected.Load() {
		return fmt.Errorf("p2p: rank %d is not connected to rank %d", peer, e.rank)
	}
	e.life.RLock()
	defer e.life.RUnlock()
	if e.isClosed() {
		return ErrClosed
	}
	select {
	case p.sendSem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-e.closed:
		return ErrClosed
	}
	defer func() { <-p.sendSem }()
	if p.broken != nil {
		return p.broken
	}
	if d := p.dead.Load(); d != nil {
		return d.err
	}
	p.msgID++
	if peer == e.rank {
		e.sendSelf(p, tag, data)
		return nil
	}
	K, S := uint32(e.lay.K), e.lay.S
	for off, first := 0, true; first || off < len(data); first = false {
		if err := e.waitWord(ctx, p.tailWord, func() bool { return p.sent-atomic.LoadUint32(p.tailWord) < K }, peer, p.tailCh, p.networked); err != nil {
			if errors.Is(err, ErrClosed) || errors.Is(err, wire.ErrPeerDead) {
				return err
			}
			return fmt.Errorf("waiting for rank %d to take earlier messages: %w", peer, err)
		}
		// Every credit takes a chunk (into its cell), and one batch carries them all
		// (each chunk followed by its head and doorbell words, so the receiver starts on the
		// first while the rest are on the wire): one round trip per window of K chunks, not
		// per chunk.
		free := K - (p.sent - atomic.LoadUint32(p.tailWord))
		stream := p.link.Load().stream
		ws := p.ws[:0]
		for ; free > 0 && (first || off < len(data)); free-- {
			n := min(S, len(data)-off)
			k := int(p.sent % K)
			st := p.stage[k*e.lay.cellSize():]
			putHeader(st, tag, p.msgID, n, len(data), off)
			p.sent++
			// Bytes 48..55 of the staged header (ignored by the receiver) are the sources of
			// this chunk's head and doorbell values.
			binary.LittleEndian.PutUint32(st[48:], p.sent)
			binary.LittleEndian.PutUint32(st[52:], uint32(e.rank)<<24|e.bellN.Add(1)&0xFFFFFF)
			src := p.stageAddr + uintptr(k*e.lay.cellSize())
			dst := p.remote + uint64(e.lay.mailbox(e.rank, k))
			if stream != nil && n >= directBytes {
				// A stream takes any source and is done with it when Write returns: the
				// payload goes out from the caller's buffer, no staging copy.
				ws = append(ws,
					Write{Src: src, Dst: dst, Len: cellHdr},
					Write{Src: memview.Addr(data[off:]), Dst: dst + cellHdr, Len: uint64(n)})
			} else {
				copy(st[cellHdr:cellHdr+n], data[off:off+n])
				ws = append(ws, Write{Src: src, Dst: dst, Len: uint64(cellHdr + n)})
			}
			ws = append(ws,
				Write{Src: src + 48, Dst: p.remote + uint64(e.lay.ctrl(e.rank)), Len: 4},
				Write{Src: src + 52, Dst: p.remote + uint64(e.lay.bell()), Len: 4})
			off += n
			first = false
		}
		p.ws = ws
		// Once submitted, a write runs to its end (bounded by the engine's transfer timeout):
		// the staging cells must not be reused while the engine may still read them.
		if err := e.write(p, stream, ws); err != nil {
			p.broken = fmt.Errorf("transfer to rank %d failed: %w", peer, err)
			return p.broken
		}
		if off >= len(data) {
			break
		}
	}
	return nil
}

// directBytes: chunks of at least this many bytes go out from the sender's buffer when the
// peer has a stream (smaller ones are copied next to their header: one write, not two).
const directBytes = 4 << 10

// write sends one batch to p (under p.sendSem). Once submitted, a write runs to its end: the
// staging cells must not be reused while the engine may still read them, so it is not
// canceled with the caller's context (the engine's transfer timeout bounds it).
func (e *Endpoint) write(p *peer, stream WriteStream, ws []Write) error {
	if stream != nil {
		return stream.Write(context.Background(), ws)
	}
	return e.f.Write(context.Background(), p.seg, ws)
}

func (e *Endpoint) sendSelf(p *peer, tag uint64, data []byte) {
	e.handleChunk(p, chunkHdr{tag: tag, id: p.msgID, n: len(data), total: len(data)}, data, 0)
}

// creditor returns credits to p: it writes the consumed count into p's tail word for us.
func (e *Endpoint) creditor(p *peer) {
	defer e.wg.Done()
	var last uint32
	var lastLink *link
	for {
		c := p.consumed.Load()
		l := p.link.Load()
		if c != last || l != lastLink {
			if err := e.writeCredit(context.Background(), p, l, c); err != nil {
				if p.dead.Load() != nil && p.link.Load() == l {
					// A dead peer takes no credits; wait for a new incarnation.
					select {
					case <-p.creditCh:
					case <-e.closed:
						return
					}
					continue
				}
				// The peer is gone or unreachable; its sends to us will time out.
				select {
				case <-e.closed:
					return
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			last, lastLink = c, l
			continue
		}
		select {
		case <-p.creditCh:
		case <-e.closed:
			// The last credits go out before the endpoint closes: a sender's op between
			// hosts completes only when its last messages are credited (pg's fencing).
			if c := p.consumed.Load(); c != last && p.dead.Load() == nil {
				if l := p.link.Load(); l != nil {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					e.writeCredit(ctx, p, l, c)
					cancel()
				}
			}
			return
		}
	}
}

// writeCredit writes c, the count of p's cells consumed here, into p's tail word for us. Over
// the sender's stream a credit costs no round trip; a broken stream (the peer failed, or it is
// being replaced) falls back to a plain write.
func (e *Endpoint) writeCredit(ctx context.Context, p *peer, l *link, c uint32) error {
	sc := memview.Bytes(p.scratch, line)
	binary.LittleEndian.PutUint32(sc[4:], c)
	w := [1]Write{{Src: p.scratch + 4, Dst: l.remote + uint64(e.lay.ctrl(e.rank)+4), Len: 4}}
	err := errors.New("no stream")
	if l.stream != nil {
		err = l.stream.Write(ctx, w[:])
	}
	if err != nil {
		err = e.f.Write(ctx, l.seg, w[:])
	}
	return err
}
