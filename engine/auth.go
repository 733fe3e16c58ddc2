package engine

import (
	"context"
	"slices"
	"time"

	"github.com/mooncake-go/mooncake/auth"
	"github.com/mooncake-go/mooncake/engine/transport/tcp"
)

// Authentication of the engine's connections (docs/security.md).
//
// The engine's own token (Config.AuthToken, MC_AUTH_TOKEN) makes it closed: its listener
// serves only connections that prove a token it accepts, and it proves its token on every
// connection it opens. Groups that share the process's engine add tokens of their own
// (AddToken: a process group's token, drawn by its rank 0): the listener accepts them too, and
// the connections the engine opens to a segment opened with OpenSegmentAuth prove the group's
// token first.
//
// Which buffers a connection reaches: every buffer when it proved the engine's own token; a
// buffer allocated with AllocateSharedGuarded(.., tok) only when it proved tok (or the own
// token); other buffers when the listener admitted it at all. So an engine without a token of
// its own still serves unauthenticated peers (the store's, say) its ordinary buffers, but not a
// group's; and it answers them a descriptor without the group's buffers (addresses and memfd).

// tokenRef is an accepted group token and how many AddToken calls hold it.
type tokenRef struct {
	tok  *auth.Token
	refs int
}

// Token is the engine's own token (nil: none).
func (e *Engine) Token() *auth.Token { return e.own }

// AddToken makes the engine accept tok on incoming connections until release is called (once
// per AddToken). The same secret added twice is one token with two holders.
func (e *Engine) AddToken(tok *auth.Token) (release func()) {
	if tok == nil {
		return func() {}
	}
	e.authMu.Lock()
	found := false
	for i := range e.groupToks {
		if e.groupToks[i].tok.Equal(tok) {
			e.groupToks[i].refs++
			tok = e.groupToks[i].tok
			found = true
			break
		}
	}
	if !found {
		e.groupToks = append(e.groupToks, tokenRef{tok: tok, refs: 1})
	}
	e.authMu.Unlock()
	done := false
	return func() {
		e.authMu.Lock()
		defer e.authMu.Unlock()
		if done {
			return
		}
		done = true
		for i := range e.groupToks {
			if e.groupToks[i].tok == tok {
				if e.groupToks[i].refs--; e.groupToks[i].refs == 0 {
					e.groupToks = slices.Delete(e.groupToks, i, i+1)
					for addr, l := range e.peerToks {
						l = slices.DeleteFunc(l, func(t *auth.Token) bool { return t == tok })
						if len(l) == 0 {
							delete(e.peerToks, addr)
						} else {
							e.peerToks[addr] = l
						}
					}
				}
				return
			}
		}
	}
}

// acceptedTokens is what the listener accepts now: the own token first, then the groups'.
func (e *Engine) acceptedTokens() []*auth.Token {
	e.authMu.RLock()
	defer e.authMu.RUnlock()
	out := make([]*auth.Token, 0, len(e.groupToks)+1)
	if e.own != nil {
		out = append(out, e.own)
	}
	for _, r := range e.groupToks {
		out = append(out, r.tok)
	}
	return out
}

// dialTokens is what a new connection to addr proves, one handshake each: the own token, then
// those of the groups that opened a segment there.
func (e *Engine) dialTokens(addr string) []*auth.Token {
	e.authMu.RLock()
	l := e.peerToks[addr]
	e.authMu.RUnlock()
	if len(l) == 0 {
		if e.own == nil {
			return nil
		}
		return []*auth.Token{e.own}
	}
	out := make([]*auth.Token, 0, len(l)+1)
	if e.own != nil {
		out = append(out, e.own)
	}
	for _, t := range l {
		if !slices.ContainsFunc(out, t.Equal) {
			out = append(out, t)
		}
	}
	return out
}

// OpenSegmentAuth is OpenSegment for a group that uses tok: new connections to the segment's
// owner prove tok too (after the engine's own token, if any), so they reach the group's
// buffers there. The peer must accept tok (its group added it before it published itself).
func (e *Engine) OpenSegmentAuth(name string, tok *auth.Token) (SegmentID, error) {
	if tok != nil && name != e.name && !tok.Equal(e.own) {
		ctx, cancel := context.WithTimeout(context.Background(), min(e.timeout, 10*time.Second))
		addr, err := e.resolve(ctx, name)
		cancel()
		if err != nil {
			return 0, err
		}
		e.authMu.Lock()
		l := e.peerToks[addr]
		if !slices.ContainsFunc(l, tok.Equal) {
			e.peerToks[addr] = append(l, tok)
		}
		e.authMu.Unlock()
	}
	return e.OpenSegment(name)
}

// mayReach reports whether a connection that proved the tokens who may access b.
func (e *Engine) mayReach(b *localBuf, who []*auth.Token) bool {
	if b.guard == nil {
		return true
	}
	for _, t := range who {
		if t == b.guard || t.Equal(b.guard) || (e.own != nil && t.Equal(e.own)) {
			return true
		}
	}
	return false
}

// serverAuth configures the listener's authentication.
func (e *Engine) serverAuth() *tcp.ServerAuth {
	return &tcp.ServerAuth{
		Tokens:   e.acceptedTokens,
		Required: func() bool { return e.own != nil },
		Self:     e.name,
		Log:      &auth.RefusalLog{Prefix: "mooncake engine " + e.name},
	}
}
