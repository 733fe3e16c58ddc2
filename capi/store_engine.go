package main

/*
#include <stdint.h>
*/
import "C"

import (
	"context"
	"fmt"
	"strings"

	"github.com/mooncake-go/mooncake/engine"
	"github.com/mooncake-go/mooncake/store/client"
)

// Which transfer engine a store runs on. A store's segment name is its engine's segment name,
// and the master tells segments apart by that name (batch_replica_clear(segment_name=...),
// preferred_segments, the replica descriptors). So every store that is set up at the same time
// in one process needs an engine of its own, as upstream's stores each have one
// (get_hostname() of two stores in one process: "localhost:12577", "localhost:14210"):
// with one shared name, clearing the replica on one store's segment would drop the other
// store's copy too.
//
// The first store of the process runs on the process-wide engine (shared with process groups
// and TransferEngine objects, as before) when that engine publishes its segments where the
// store's setup says (the same metadata server and cluster): a store set up with P2PHANDSHAKE on
// an engine that registers in an HTTP metadata server would name segments its peers cannot find.
// Any other store starts an engine of its own, closed with that store.

// storeEngine returns the engine a store set up with cfg runs on: the TransferEngine whose
// handle (get_engine_ptr) setup was given, or, with none (0), the one storeEngineFor chooses.
func storeEngine(handle uint64, cfg client.Config) (*engine.Engine, func(), error) {
	if handle == 0 {
		return storeEngineFor(cfg)
	}
	e, err := engineOf(C.uint64_t(handle))
	if err != nil {
		return nil, nil, fmt.Errorf("setup(engine=...): %w", err)
	}
	if c := client.EngineConfig(cfg); !sameDirectory(e, c) {
		meta, cluster := e.Directory()
		return nil, nil, fmt.Errorf("setup(engine=...): the engine %s publishes its segments at %q (cluster %q), the store's metadata_server is %q (cluster %q): a store's segment must be where its peers look",
			e.SegmentName(), meta, cluster, c.MetadataServer, c.ClusterID)
	}
	// The engine belongs to its TransferEngine, which closes it.
	return e, func() {}, nil
}

// procStores counts the set-up stores running on procEngine (guarded by procMu).
var procStores int

// storeEngineFor returns the engine a store set up with cfg runs on, and release, to call when
// that store closes (it closes the engine when the store owned it).
func storeEngineFor(cfg client.Config) (*engine.Engine, func(), error) {
	ecfg := func() engine.Config {
		c := client.EngineConfig(cfg)
		if c.LocalServerName == "" {
			c.LocalServerName = "127.0.0.1"
		}
		return c
	}
	procMu.Lock()
	if procEngine == nil || procStores == 0 {
		procMu.Unlock()
		e, err := sharedEngine(ecfg)
		if err != nil {
			return nil, nil, err
		}
		procMu.Lock()
		if procEngine == e && procStores == 0 && sameDirectory(e, ecfg()) {
			procStores++
			procMu.Unlock()
			return e, releaseProcStore, nil
		}
		// another store took the process engine meanwhile, or it publishes elsewhere: start
		// one of our own
	}
	c := ecfg()
	if engineAddr != "" {
		c.BindAddress = engineAddr
	}
	procMu.Unlock()
	e, err := engine.New(context.Background(), c)
	if err != nil {
		return nil, nil, fmt.Errorf("starting this store's transfer engine: %w", err)
	}
	return e, func() { e.Close() }, nil
}

func releaseProcStore() {
	procMu.Lock()
	procStores--
	procMu.Unlock()
}

// sameDirectory says whether e publishes its segments where an engine made from c would: the
// same metadata server and cluster, or P2PHANDSHAKE for both (segments named by address, in no
// cluster's namespace).
func sameDirectory(e *engine.Engine, c engine.Config) bool {
	meta, cluster := e.Directory()
	want := strings.TrimSpace(c.MetadataServer)
	if want == "" {
		want = engine.P2PHandshake
	}
	p2p := strings.EqualFold(meta, engine.P2PHandshake)
	if p2p || strings.EqualFold(want, engine.P2PHandshake) {
		return p2p && strings.EqualFold(want, engine.P2PHandshake)
	}
	return meta == want && cluster == c.ClusterID
}
