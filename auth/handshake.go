package auth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
)

// Errors of the handshake. Callers prefix them with the peer's address, e.g.
// "peer 10.0.0.5:15123 refused: authentication failed; set the same MC_AUTH_TOKEN on both sides".
var (
	// ErrRefused: the peer (a server) checked our proof and refused it: its token differs.
	ErrRefused = errors.New("authentication failed; set the same MC_AUTH_TOKEN on both sides")
	// ErrBadProof: the peer's proof does not match any token we accept.
	ErrBadProof = errors.New("authentication failed: the peer does not hold our token; set the same MC_AUTH_TOKEN on both sides")
	// ErrNoHandshake: the peer does not speak the handshake (it sent something else, or closed
	// the connection before finishing it): most likely it has no token set.
	ErrNoHandshake = errors.New("the peer did not authenticate (is MC_AUTH_TOKEN set on it?); set the same MC_AUTH_TOKEN on both sides")
)

// Peer is what a successful handshake learnt about the other side.
type Peer struct {
	ID    string // the identity it announced (not verified: for logs)
	Token *Token // the token it proved (for a server: one of those it accepts)
}

const label = "mooncake-auth/1\x00"

// transcriptMAC is HMAC-SHA256(token, label role 0 len(idc) idc len(ids) ids nc ns).
func transcriptMAC(t *Token, role string, idc, ids string, nc, ns *[NonceLen]byte) [MACLen]byte {
	m := hmac.New(sha256.New, t.secret)
	m.Write([]byte(label))
	m.Write([]byte(role))
	m.Write([]byte{0, byte(len(idc))})
	m.Write([]byte(idc))
	m.Write([]byte{byte(len(ids))})
	m.Write([]byte(ids))
	m.Write(nc[:])
	m.Write(ns[:])
	var out [MACLen]byte
	m.Sum(out[:0])
	return out
}

func cut(id string) string {
	if len(id) > MaxIDLen {
		return id[:MaxIDLen]
	}
	return id
}

// deadliner is what net.Conn offers for bounding the handshake's reads and writes.
type deadliner interface{ SetDeadline(time.Time) error }

// bound applies ctx's deadline and cancellation to rw when it has SetDeadline; the returned
// function clears the deadline again. Without SetDeadline ctx is checked between messages.
func bound(ctx context.Context, rw io.ReadWriter) func() {
	d, ok := rw.(deadliner)
	if !ok {
		return func() {}
	}
	if dl, ok := ctx.Deadline(); ok {
		d.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { d.SetDeadline(time.Unix(1, 0)) })
	return func() {
		stop()
		d.SetDeadline(time.Time{})
	}
}

// ioErr words a read/write failure: the context's error when it ended, ErrNoHandshake when the
// peer hung up (a server without a token drops the connection, and so does a process that is ending)
// or sent something that is not a handshake message.
func ioErr(ctx context.Context, step string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("authentication %s: %w", step, ctx.Err())
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("authentication %s timed out: %w (%v)", step, context.DeadlineExceeded, err)
	}
	if errors.Is(err, ErrMalformed) {
		return fmt.Errorf("%w (%s: %v)", ErrNoHandshake, step, err)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.ErrClosedPipe) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		// A peer without a token hangs up, and so does one whose process is ending (a rank
		// killed while its peers probe it): the error names both.
		return fmt.Errorf("the peer hung up during authentication (%s: %v): its process is ending, or %w", step, err, ErrNoHandshake)
	}
	return fmt.Errorf("authentication %s: %w", step, err)
}

func send(rw io.Writer, m *Message) error {
	_, err := rw.Write(m.Append(make([]byte, 0, hdrLen+maxBody)))
	return err
}

func expect(ctx context.Context, r io.Reader, t MsgType, step string) (Message, error) {
	m, err := ReadMessage(r)
	if err != nil {
		return m, ioErr(ctx, step, err)
	}
	if m.Type != t {
		return m, fmt.Errorf("%w (%s: got message type %d, want %d)", ErrNoHandshake, step, m.Type, t)
	}
	return m, nil
}

// Client runs the initiator's side of the handshake on rw (a fresh connection) with token t,
// announcing itself as self. It returns once the server accepted the proof and proved the token
// back; on any error the caller must close the connection. ctx bounds the handshake (on a
// net.Conn through its deadline, which is cleared afterwards).
func Client(ctx context.Context, rw io.ReadWriter, t *Token, self string) (Peer, error) {
	if t == nil {
		return Peer{}, errors.New("auth.Client: no token")
	}
	defer bound(ctx, rw)()
	hello := Message{Type: MsgHello, ID: cut(self)}
	if _, err := io.ReadFull(rand.Reader, hello.Nonce[:]); err != nil {
		return Peer{}, fmt.Errorf("authentication: cannot draw a nonce: %w", err)
	}
	if err := send(rw, &hello); err != nil {
		return Peer{}, ioErr(ctx, "hello", err)
	}
	ch, err := expect(ctx, rw, MsgChallenge, "challenge")
	if err != nil {
		return Peer{}, err
	}
	proof := Message{Type: MsgProof, MAC: transcriptMAC(t, "client", hello.ID, ch.ID, &hello.Nonce, &ch.Nonce)}
	if err := send(rw, &proof); err != nil {
		return Peer{}, ioErr(ctx, "proof", err)
	}
	res, err := expect(ctx, rw, MsgResult, "result")
	if err != nil {
		return Peer{}, err
	}
	if !res.OK {
		return Peer{}, ErrRefused
	}
	want := transcriptMAC(t, "server", hello.ID, ch.ID, &hello.Nonce, &ch.Nonce)
	if !hmac.Equal(res.MAC[:], want[:]) {
		return Peer{}, ErrBadProof
	}
	return Peer{ID: ch.ID, Token: t}, nil
}

// Server runs the acceptor's side on rw (a fresh connection) with the tokens it accepts,
// announcing itself as self. A client whose proof matches none of them is told so (a refused
// Result) and the call returns ErrBadProof; the caller must then close the connection without
// reading or writing anything else. Every token is compared, in constant time.
func Server(ctx context.Context, rw io.ReadWriter, tokens []*Token, self string) (Peer, error) {
	if len(tokens) == 0 {
		return Peer{}, errors.New("auth.Server: no tokens")
	}
	defer bound(ctx, rw)()
	hello, err := expect(ctx, rw, MsgHello, "hello")
	if err != nil {
		return Peer{}, err
	}
	ch := Message{Type: MsgChallenge, ID: cut(self)}
	if _, err := io.ReadFull(rand.Reader, ch.Nonce[:]); err != nil {
		return Peer{}, fmt.Errorf("authentication: cannot draw a nonce: %w", err)
	}
	if err := send(rw, &ch); err != nil {
		return Peer{}, ioErr(ctx, "challenge", err)
	}
	proof, err := expect(ctx, rw, MsgProof, "proof")
	if err != nil {
		return Peer{Token: nil, ID: hello.ID}, err
	}
	var match *Token
	for _, t := range tokens {
		if t == nil {
			continue
		}
		want := transcriptMAC(t, "client", hello.ID, ch.ID, &hello.Nonce, &ch.Nonce)
		if hmac.Equal(proof.MAC[:], want[:]) && match == nil {
			match = t
		}
	}
	res := Message{Type: MsgResult}
	if match != nil {
		res.OK = true
		res.MAC = transcriptMAC(match, "server", hello.ID, ch.ID, &hello.Nonce, &ch.Nonce)
	}
	if err := send(rw, &res); err != nil && match != nil {
		return Peer{ID: hello.ID}, ioErr(ctx, "result", err)
	}
	if match == nil {
		return Peer{ID: hello.ID}, ErrBadProof
	}
	return Peer{ID: hello.ID, Token: match}, nil
}
