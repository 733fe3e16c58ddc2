package main

import (
	"os"
	"strconv"
	"time"

	"github.com/mooncake-go/mooncake/pg"
)

// pgOptions reads the process-group knobs at init_process_group.
func pgOptions() pg.Options {
	envInt := func(name string) int {
		n, _ := strconv.Atoi(os.Getenv(name))
		return n
	}
	var o pg.Options
	o.P2P.Slots = max(envInt("MC_PG_SLOTS"), 0)
	o.P2P.SlotBytes = max(envInt("MC_PG_SLOT_BYTES"), 0)
	o.P2P.NoStreams = os.Getenv("MC_P2P_STREAMS") == "0"
	o.P2P.ProbeInterval = time.Duration(max(envInt("MC_PG_PROBE_MS"), 0)) * time.Millisecond
	o.Collective.SmallBytes = max(envInt("MC_PG_SMALL_BYTES"), 0)
	o.Collective.ChunkBytes = max(envInt("MC_PG_CHUNK_BYTES"), 0)
	o.Collective.FusedBytes = envInt("MC_PG_FUSED_BYTES")
	o.Collective.PairBytes = max(envInt("MC_PG_PAIR_BYTES"), 0)
	o.NoSharedMemory = os.Getenv("MC_PG_SHM") == "0"
	o.NoInputCopy = os.Getenv("MOONCAKE_PG_FT_INPUT_COPY") == "0"
	if us := envInt("MOONCAKE_PG_COLLECTIVE_TIMEOUT_US"); us > 0 {
		o.CollectiveTimeout = time.Duration(us) * time.Microsecond
	}
	return o
}
