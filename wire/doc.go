// Package wire is what the collective algorithms (package collective) and the transport that
// carries their messages (package p2p) agree on, kept below both so that neither knows the
// other: the layout of the 64-bit message tags (collective ops' tag spaces, user
// point-to-point tags, the abort step), the abort message (AbortError and its encoding), the
// error that marks a dead peer (ErrPeerDead), the any-source peer (AnySource) and a posted
// receive (PostedRecv).
//
// Package collective defines the transport interface itself (collective.Conn, Poster,
// ReducePoster) in these terms; p2p.Endpoint satisfies it structurally.
//
// This package does not own the algorithms, the transport, or how aborts are delivered; it
// imports nothing of this module.
package wire
