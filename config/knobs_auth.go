package config

import "github.com/mooncake-go/mooncake/auth"

// Authentication (docs/security.md). Registered after knobs.go's (this file sorts later), so
// their rows come last in docs/configuration.md's table.
var (
	AuthToken     = knob("MC_AUTH_TOKEN", String, "", EngineCreation, "shared secret a peer must prove (HMAC challenge-response) before an engine serves its connection; also read at store setup() and master start (docs/security.md)")
	AuthTokenFile = knob("MC_AUTH_TOKEN_FILE", String, "", EngineCreation, "file holding the token instead (mode 0600 or 0400; surrounding blanks ignored); setting both is an error")
	PGAuth        = knob("MOONCAKE_PG_AUTH", Bool, "1", ProcessGroupInit, "0: a process group does not authenticate its connections (by default rank 0 draws a token and shares it through the c10d store)")
)

// Token loads the token of MC_AUTH_TOKEN / MC_AUTH_TOKEN_FILE now: nil when neither is set,
// an error (worded for the user) for a bad one. See auth.Load.
func Token() (*auth.Token, error) {
	return auth.Load(AuthToken.String(), AuthTokenFile.Trimmed())
}
