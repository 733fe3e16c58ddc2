package main

/*
#include <stdint.h>
*/
import "C"

import (
	"context"
	"log"
	"os"

	"github.com/mooncake-go/mooncake/config"
	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/client"
	"github.com/mooncake-go/mooncake/store/realclient"
)

// mc_store_setup_dummy sets up store h as a dummy client of the real client (mooncake_client
// --port) at server_address, upstream's setup_dummy: it attaches to that process (proving
// MC_AUTH_TOKEN when it asks), learns the master, cluster, metadata server, protocol and host
// from it, and joins the store as a client that owns no segment, with a staging buffer of
// local_buffer_size bytes (0: the default). mem_pool_size is the caller's bound on
// alloc_from_mem_pool (the Python layer keeps it). See package realclient for what differs
// from upstream.
//
//export mc_store_setup_dummy
func mc_store_setup_dummy(h C.uint64_t, memPoolSize, localBufferSize C.uint64_t, serverAddress *C.char) C.int {
	addr := goString(serverAddress)
	if addr == "" {
		return serr(api.Errorf(api.INVALID_PARAMS, "setup_dummy: server_address is empty (want host:port of a mooncake_client's --port)"))
	}
	tok, err := config.Token()
	if err != nil {
		return serr(api.Errorf(api.INVALID_PARAMS, "setup_dummy: %v", err))
	}
	req := realclient.Request{MemPoolSize: uint64(memPoolSize), LocalBufferSize: uint64(localBufferSize), PID: os.Getpid()}
	gone := func(err error) {
		log.Printf("mooncake store: the real client at %s went away (%v); this dummy client goes on with its own connections to the master, without the objects that lived in that client's memory", addr, err)
	}
	info, conn, err := realclient.Attach(context.Background(), addr, tok, req, gone)
	if err != nil {
		return serr(api.Errorf(api.INVALID_PARAMS, "setup_dummy: %v", err))
	}
	rc := storeSetup(h, client.Config{
		LocalHostname: info.Host, MetadataServer: info.MetadataServer, LocalBufferSize: uint64(localBufferSize),
		Protocol: info.Protocol, MasterServerAddress: info.MasterServerAddress, ClusterID: info.ClusterID,
		TenantID: info.TenantID,
	}, false, "", 0)
	if rc != 0 {
		conn.Close()
		return rc
	}
	if s, ok := stores.get(uint64(h)); ok {
		s.mu.Lock()
		s.dummy = conn
		s.mu.Unlock()
	} else {
		conn.Close()
	}
	return 0
}
