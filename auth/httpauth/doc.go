// Package httpauth owns the signature that proves MC_AUTH_TOKEN on an HTTP request, for the
// HTTP servers of the store (the master's admin routes, the HTTP metadata server) and their
// clients (the transfer engine's HTTP metadata client).
//
// A signed request carries
//
//	Authorization: MC-HMAC-SHA256 t=<unix seconds>, n=<nonce, 32 hex digits>, s=<64 hex digits>
//
// where s = hex(HMAC-SHA256(token, "mooncake-http-v1\n" + method + "\n" + request URI +
// "\n" + t + "\n" + n + "\n" + hex(SHA-256(body)))). The token never crosses the wire; the
// signature covers the method, the path with its query (the key) and the body, so it cannot
// be moved to another request; a Verifier accepts t within Skew of its clock and each nonce
// once, so a captured request cannot be replayed. The scheme works over plain HTTP: TLS adds
// secrecy of the contents, not of the token.
package httpauth
