// Package transport is the seam between the engine core and the ways bytes move.
//
// It owns three things that every transport and the engine agree on:
//
//   - the segment descriptor (SegmentDescriptor, BufferDesc, ShmInfo): the JSON a segment
//     publishes (to a metadata store, or over the P2P handshake) so peers can validate their
//     requests and pick a transport. DecodeDescriptor rejects malformed descriptors.
//   - Request and Reporter: one run of ordered one-sided operations against one target, and
//     how progress and completion are reported back (no per-request allocation).
//   - the Transport interface that engine/transport/tcp and engine/transport/shm implement.
//
// The engine picks a transport per request from the target's descriptor and host identity
// (never from a global flag alone). A Transport's Execute applies the requests it is given
// in order; the engine relies on that for signal words ([data..., signal] batches).
//
// This package must not import the engine or any transport implementation.
package transport
