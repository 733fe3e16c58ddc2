package pg

// Authentication of the group's connections (docs/security.md): on by default, with a token
// shared through the rendezvous store (torch's c10d store), the one secret channel every rank
// of a job already has.

import (
	"fmt"

	"github.com/mooncake-go/mooncake/auth"
	"github.com/mooncake-go/mooncake/p2p"
)

// tokenKey is where rank 0 leaves the group's token.
func tokenKey(group string) string { return groupKey(group, "auth_token") }

// authenticate returns the fabric the group uses and a function that undoes it. With
// Options.NoAuth, or a fabric that cannot authenticate, it is f itself. Otherwise the group
// uses the engine's own token (MC_AUTH_TOKEN) when it has one, and else the group's token:
// rank 0 draws it and sets it in the store (or takes the one already there: a rank 0 that
// replaces a failed one), every other rank, joiners included, waits for it there.
func authenticate(cfg Config, st Store, f p2p.Fabric) (p2p.Fabric, func(), error) {
	a, ok := f.(p2p.Authenticator)
	if cfg.Options.NoAuth || !ok {
		return f, func() {}, nil
	}
	tok := a.Token()
	if tok == nil {
		var err error
		if tok, err = groupToken(cfg, st); err != nil {
			return nil, nil, err
		}
	}
	g, release := a.WithToken(tok)
	return g, release, nil
}

func groupToken(cfg Config, st Store) (*auth.Token, error) {
	key := tokenKey(cfg.Name)
	fail := func(what string, err error) (*auth.Token, error) {
		return nil, fmt.Errorf("process group %q, rank %d: %s (MOONCAKE_PG_AUTH=0 turns authentication off): %w", cfg.Name, cfg.Rank, what, err)
	}
	if cfg.Rank == 0 {
		have, err := st.Check(key)
		if err != nil {
			return fail("looking for the group's token in the store", err)
		}
		if !have {
			tok, err := auth.Generate()
			if err != nil {
				return fail("drawing the group's token", err)
			}
			if err := st.Set(key, []byte(tok.Secret())); err != nil {
				return fail("sharing the group's token through the store", err)
			}
			return tok, nil
		}
	}
	v, err := st.Get(key, cfg.Timeout)
	if err != nil {
		return fail("waiting for rank 0's token in the store", err)
	}
	tok, err := auth.NewToken(string(v))
	if err != nil {
		return fail("the group's token in the store is invalid", err)
	}
	return tok, nil
}
