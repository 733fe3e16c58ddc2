// Package p2p is tagged, ordered point-to-point messaging between the ranks of a group over
// transfer-engine WRITEs, with credit-based flow control. An *Endpoint is the transport of the
// collective algorithms (it has the methods of collective.Conn, Poster, ReducePoster and
// LivenessChecker without importing that package: tags, aborts and ErrPeerDead are package
// wire's), and adds posted receives (PostRecv) for torch's irecv/recv_anysource.
//
// # Memory layout
//
// Each rank allocates one engine shared buffer (Fabric.AllocateShared: memfd on one host,
// reachable over tcp from others) and publishes Info {segment name, address, layout} through
// the rendezvous store. With P rank slots (max group size), a mailbox per peer of K cells of S
// payload bytes (K credits per peer: Options.Credits, Options.CellBytes):
//
//	ctrl[p]      64 B per peer  head (u32, written by p: cells p filled in mailbox[p])
//	                            tail (u32, written by p: cells of MY mailbox at p that p consumed)
//	doorbell     64 B           u32 that every sender writes after a message (wakes the receiver)
//	scratch[p]   64 B per peer  local source of the tail value written to p
//	stage[p]     K x (64+S)     local staging of the cells being sent to p (one per mailbox cell)
//	mailbox[p]   K x (64+S)     cells that p writes its messages to me into, in turn
//
// A cell is a 64-byte header {tag, msg id, chunk length, message length, offset} and up to S
// payload bytes (one chunk of a message). A credit is the right to fill one cell of a peer's
// mailbox: a sender holds K, spends one per chunk and gets it back when the peer consumed the
// cell. Every rank uses the same layout, so a peer's addresses follow from its base.
//
// # Protocol
//
// Sender (one message at a time per peer): wait for a credit (sent - tail[p] < K), stage as
// many chunks as there are credits (each in the staging cell of its mailbox cell, whose
// header bytes 48..55 hold the chunk's head and doorbell values), then one engine batch to the
// peer: [cell, head word, doorbell word] per chunk. With a write stream (EngineFabric opens one
// to every peer, same-host ones included, unless Options.NoStreams is set) chunks of 4 KiB and
// more go out from the caller's buffer instead of being staged. The engine applies a batch's requests to
// one target in order and wakes futex waiters on 4-byte writes, so each head and doorbell
// become visible after their cell, and the receiver starts on the first chunk while the rest
// are on the wire; a message of up to K chunks costs one round trip. Messages longer than S
// stream through consecutive cells, a window (K cells) at a time.
//
// Receiver: one progress goroutine per endpoint watches the doorbell (spins briefly, then
// futex-waits: ranks may outnumber cores; when every peer is reached over the network it parks
// on the fabric's WordWatcher channel instead, which this process's tcp server signals after
// storing the doorbell, so a wake-up is a goroutine switch rather than a thread hand-off; the
// same holds for a sender's credit wait), drains every peer's filled cells in order, and
// returns credits through a per-peer goroutine with a 4-byte write of the consumed count into
// the sender's tail word after each pass that consumed something. Over the network the tcp
// server runs drainHook before it signals the doorbell's channel: when no pass is under way it
// makes one on its own goroutine (drainMu serialises passes), so a chunk from the network
// usually lands without waking any goroutine. Draining never waits for the application: a
// message that matches a posted receive (first posted, by
// peer or any source, and tag) is copied straight into its buffer (over the network the copy is
// skipped: the tcp server asks land.go, before it reads a chunk's payload, whether a posted
// receive has taken its message, and reads it from the socket into that receive's buffer);
// otherwise it is stashed in
// the unexpected queue (chunk by chunk, in pooled cell-size buffers), where a later receive
// finds it. A receive that finds a message still arriving takes it over: the stashed chunks
// are copied once and the rest lands in its buffer straight from the mailbox (adopt). So a Send
// never depends on a matching receive, and collectives can send before they receive.
//
// Endpoint has Post (the collective algorithms' Poster): collectives post the receives they
// know are coming (the ring all_reduce keeps three ahead; all_gather, broadcast and gather post
// all of theirs up front), so early chunks land in their
// buffers directly; PostReduce combines a chunk into its buffer straight from the mailbox.
//
// Collective aborts (wire.AbortTag) are handled here: the op's pending and later receives
// fail, and its queued messages are dropped.
//
// Failures: a failed or timed-out engine transfer to a peer fails the send with an error
// naming the peer and marks the link broken (later sends to it fail at once). A peer that
// stays silent while a receive or a credit wait waits on it is probed (liveness.go: the
// engine's ping, every Options.ProbeInterval, default 200 ms); one that does not answer is marked dead,
// and every wait on it and every send to it fails at once with an error wrapping
// wire.ErrPeerDead; what it wrote before is delivered first, what it writes after is neither
// taken nor credited (so the peer's Delivered says false: the membership layer's fencing
// between hosts rests on it). PeerAlive answers the collective fast path's liveness question.
// Reconnect points a link at a replacement process (a new incarnation of the rank): both
// directions' mailbox counters restart and what the old process left is dropped.
//
// Fabrics that can map same-host peers' buffers implement SharedMapper (EngineFabric does);
// NewSharedMemory turns one into the arenas of the collective fast path (SharedMemory).
//
// This package does not own the engine, the rendezvous store, the op queue, or the tag layout
// and abort message (package wire), and reads no environment variables: its knobs are Options
// fields, which the configuration layer fills.
//
// # Files
//
//	endpoint.go  Options, the Endpoint's state, New and Close
//	layout.go    the region's layout, the chunk header, Info and its check against ours
//	link.go      peers and links: Connect, Reconnect, the write stream to a peer, Incarnation
//	send.go      Send (staging, one batch per window, payload straight from the caller over a
//	             stream), the message to self, and the creditor that returns credits
//	wait.go      how the endpoint's goroutines sleep: spin, futex wait, or park on a
//	             WordWatcher channel (waitWord, park, wake)
//	progress.go  the progress loop, drainHook and one drain pass over every peer's mailbox
//	recv.go      the receive side: a chunk's delivery, the unexpected queue (stash, adopt,
//	             cut-off messages), PostRecv, PostReduce, Recv, a peer's receive-side reset
//	request.go   Request: a posted receive, its completion, Wait and Cancel
//	land.go      payloads read from the network straight into their receive (PayloadLander)
//	abort.go     collective ops' aborts: Abort and what it fails and drops
//	liveness.go  probes and dead peers: MarkDead, Dead, PeerAlive, AliveRecently
//	fabric.go    what p2p needs from the engine (Fabric and its optional interfaces),
//	             EngineFabric, NewSharedMemory and SharedMemory
//
// Tests reach unexported parts through export_test.go (a tap on the receive path).
//
// # Why the progress loop is not a package of its own
//
// The design's poller (the loop that waits on doorbells, drains the mailboxes and completes
// requests) stays here, in progress.go and wait.go. A drain pass is the endpoint's receive side
// itself: it reads mailbox cells at the endpoint's layout offsets, advances each peer's consumed
// count and message in progress under drainMu (which Reconnect's resets and the tcp server's
// drainHook take too), and matches every chunk against the posted, in-flight and unexpected
// queues under the endpoint's mu, the state that PostRecv, Abort, MarkDead and Close change.
// Completing a request is Request.finish, and aborts, dead peers and Close complete requests
// from outside the loop, so no completion step could move without those queues. The generic
// part, the wait (spin, then a futex wait on the doorbell word, or a park on the fabric's
// WordWatcher channel when every peer is reached over the network), is also the sender's
// credit wait, and as a package it would take the endpoint's bell word, kick and closed
// channels and netPeers flag as arguments: a seam made of the endpoint's own fields, not an
// interface. The primitives under it already live apart: internal/futex, and engine.WatchWord
// behind Fabric's WordWatcher.
package p2p
