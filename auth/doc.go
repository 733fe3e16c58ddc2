// Package auth owns the shared-secret authentication of Mooncake's connections: loading the
// token (MC_AUTH_TOKEN or MC_AUTH_TOKEN_FILE, read by package config and handed to Load), a
// mutual challenge-response handshake that proves the token without sending it, and a
// rate-limited log of refused peers.
//
// # Handshake
//
// The initiator (client) and the acceptor (server) each draw a 32-byte random nonce and name
// themselves (an identity string: a segment name or an address, for logs). Four messages on a
// fresh connection, before anything else is sent on it:
//
//	client -> server  Hello     nonce_c, id_c
//	server -> client  Challenge nonce_s, id_s
//	client -> server  Proof     mac_c = HMAC-SHA256(token, transcript("client"))
//	server -> client  Result    ok/refused, mac_s = HMAC-SHA256(token, transcript("server"))
//
// where transcript(role) = "mooncake-auth/1" 0x00 role 0x00 len(id_c) id_c len(id_s) id_s
// nonce_c nonce_s (lengths one byte each). The server checks mac_c against every token it
// accepts (constant-time compares; the one that matches is the connection's token) and answers
// Result; the client checks mac_s with its own token, so both sides know the other holds it.
// The token never travels, and a captured handshake cannot be replayed: the other side's nonce
// is new each time, so an old proof does not match. The role label in the transcript stops a
// server's proof from being reflected back as a client's.
//
// # Encoding
//
// Every message is an 8-byte header, magic "MCAU" | version u8 (1) | type u8 | body length
// u16 (little-endian), then the body: Hello and Challenge are nonce[32] | id length u8 | id;
// Proof is mac[32]; Result is status u8 | mac[32]. Decode rejects anything else (short or
// trailing bytes, bad magic, version, type or lengths) with an error wrapping ErrMalformed.
// A Hello is longer than the 32-byte header of the engine's tcp frames, so a server that does
// not expect the handshake reads a whole (invalid) frame header and drops the connection
// rather than waiting.
package auth
