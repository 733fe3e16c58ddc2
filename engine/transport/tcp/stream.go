package tcp

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/mooncake-go/mooncake/engine/transport"
)

// Stream is a connection of its own for quiet WRITEs (the engine's ordered write streams):
// frames leave in the order written and the server answers only failures, so Write returns
// once the bytes are in the socket, without a round trip. A reader goroutine records the
// first failure the server reports (or the connection's loss); every later Write returns it.
type Stream struct {
	c    *Client
	cn   *conn
	done chan struct{}

	mu  sync.Mutex
	err error
}

// OpenStream dials addr for a new stream.
func (c *Client) OpenStream(ctx context.Context, addr string) (*Stream, error) {
	cn, err := c.get(ctx, addr, true, true)
	if err != nil {
		return nil, wrapIOErr(ctx, err)
	}
	s := &Stream{c: c, cn: cn, done: make(chan struct{})}
	go s.read()
	return s, nil
}

func (s *Stream) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
}

// Err is the stream's failure, nil while it works.
func (s *Stream) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *Stream) read() {
	defer close(s.done)
	var rh respHeader
	answered := false
	for {
		if _, err := io.ReadFull(s.cn.br, s.cn.rb[:]); err != nil {
			s.fail(hint(true, answered, s.cn.authed, fmt.Errorf("tcp stream to %s was lost: %w", s.cn.addr, err)))
			return
		}
		answered = true
		if err := decodeResp(s.cn.rb[:], &rh); err != nil || rh.Length > MaxControlFrame {
			s.fail(fmt.Errorf("tcp stream to %s: %w", s.cn.addr, ErrMalformedFrame))
			s.cn.c.Close()
			return
		}
		msg := make([]byte, rh.Length)
		if _, err := io.ReadFull(s.cn.br, msg); err != nil {
			s.fail(fmt.Errorf("tcp stream to %s was lost: %w", s.cn.addr, err))
			return
		}
		if rh.Status != StatusOK { // a server that ignores FlagQuiet answers OK: nothing to do
			s.fail(&RemoteError{Code: int(rh.Status), Msg: string(msg)})
		}
	}
}

// Write sends reqs (WRITEs only) as quiet frames, after every earlier Write. It returns the
// stream's failure, if any (also one the server reported for an earlier Write); a write that
// does not finish by deadline fails the stream.
func (s *Stream) Write(reqs []transport.Request, deadline time.Time) error {
	if err := s.Err(); err != nil {
		return err
	}
	for i := range reqs {
		if !reqs[i].Write {
			return fmt.Errorf("tcp stream: request %d is a READ; streams carry WRITEs only", i)
		}
	}
	s.cn.c.SetWriteDeadline(deadline)
	if err := s.c.send(s.cn, reqs, s.c.chunk(), -1); err != nil {
		s.fail(fmt.Errorf("tcp stream to %s: %w", s.cn.addr, err))
		s.cn.c.Close()
		return s.Err()
	}
	return nil
}

// Close closes the connection; writes already sent may still be applied by the server.
func (s *Stream) Close() error {
	s.fail(ErrClosed)
	s.cn.c.Close()
	<-s.done
	s.c.put(s.cn, false)
	return nil
}
