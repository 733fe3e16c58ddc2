// Package realclient owns the attach service between a real client and its dummy clients:
// upstream Mooncake's deployment where one long-lived process (mooncake_client, the "real
// client") owns the store memory and the processes that use the store (inference workers)
// attach to it with MooncakeDistributedStore.setup_dummy(mem_pool_size, local_buffer_size,
// "host:port") instead of configuring a client of their own.
//
// The real client serves Serve on its --port (50052 by default, upstream's "real client service
// port"). A dummy client calls Attach: it learns from the real client where the master is and
// how to reach it (master address or HA discovery address, cluster id, metadata server,
// protocol, host), then joins the store as a client that owns no segment, so what it puts lands
// in the segments of real clients. The connection stays open while the dummy lives: the real
// client logs who is attached, and each side sees the other go away.
//
// Where this differs from upstream, and why: upstream's dummy maps a shared-memory buffer that
// the real client registers with its transfer engine, and every call is an RPC to the real
// client, which moves the bytes. Here each process already has an in-process Go transfer engine
// that is cheap to start, so the dummy moves its bytes itself (one copy fewer, no RPC hop per
// call) and the real client is its source of configuration and its anchor. A dummy keeps working
// if its real client exits; the objects it put on that client's segment go with it, as
// upstream's do.
//
// Wire format: the real client sends one hello line, a JSON object {"service", "auth"}; when
// "auth" is true both sides run package auth's challenge-response (MC_AUTH_TOKEN) before
// anything else; then the dummy sends one request line and the real client answers one reply
// line. Lines are at most MaxLine bytes; anything else is refused with an error naming the peer.
package realclient
