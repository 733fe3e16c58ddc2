package pg

import (
	"fmt"
	"time"

	"github.com/mooncake-go/mooncake/collective"
	"github.com/mooncake-go/mooncake/p2p"
)

// DefaultTimeout is the op timeout when Config.Timeout is zero.
const DefaultTimeout = 10 * time.Minute

// MaxGroupSize is the largest max_group_size a group accepts.
const MaxGroupSize = 1024

// Device types of Config.DeviceType.
const (
	DeviceCPU  = 0
	DeviceCUDA = 1
)

// Config describes one rank's view of a group at creation.
type Config struct {
	Rank int
	Size int // ranks at start (the group's world size at creation)
	// MaxSize is the group's slot count (max_group_size): ranks in [Size, MaxSize) can join
	// later. Zero means Size.
	MaxSize        int
	IsExtension    bool // this process joins a running group (join_group admits it)
	AutoDeactivate bool // auto_deactivate_on_failure
	AutoSync       bool // auto_sync_on_failure (needs AutoDeactivate)
	DeviceType     int  // DeviceCPU or DeviceCUDA
	Timeout        time.Duration
	Name           string // the group's name in the rendezvous store ("default" when empty)
	// OnWorldSize, when set, is told the group's world size (Group.WorldSize: what torch
	// reports as the group's size) at creation and after every membership change, on the
	// goroutine that made the change.
	OnWorldSize func(worldSize int)
	Options     Options
}

// Options are the group's tuning knobs; the zero value means the defaults.
type Options struct {
	P2P        p2p.Options              // credits and mailbox cell size (MC_PG_CREDITS, MC_PG_CELL_BYTES, ...)
	Collective collective.Options       // algorithm thresholds (MC_PG_SMALL_BYTES, ...)
	Shared     collective.SharedOptions // the same-host fast path (MC_PG_SHM_*)
	// NoSharedMemory turns the same-host fast path off (MC_PG_SHM=0).
	NoSharedMemory bool
	// NoInputCopy: in-place collectives do not save their input for a rerun over the
	// survivors (MOONCAKE_PG_FT_INPUT_COPY=0); a peer failure then fails the op.
	NoInputCopy bool
	// CollectiveTimeout bounds each collective (MOONCAKE_PG_COLLECTIVE_TIMEOUT_US); zero: the
	// group's Timeout. set_collective_timeout_us overrides it at run time.
	CollectiveTimeout time.Duration
	// NoAuth: the group's connections are not authenticated (MOONCAKE_PG_AUTH=0). By default
	// rank 0 draws a token and shares it through the store (auth.go).
	NoAuth bool
	// Observer, when set, is told every op's size, time and result and every membership change
	// (MOONCAKE_PG_METRICS_PORT: pg/pgmetrics). nil: no observer.
	Observer Observer
	// TransferCheck is the transfer-status seam (capi sets it from the shim's
	// mc_pg_config.transfer_check, only when a fault injector interposes the seam): after an op
	// moved its data it is given the peers this rank sent to and the bytes, and returns those
	// whose transfers failed (linkfault.go). nil: ops consult nothing.
	TransferCheck func(ranks []int, n int) (failed []int, err error)
}

// check fills the defaults and validates c.
func (c *Config) check() error {
	if c.MaxSize <= 0 {
		c.MaxSize = c.Size
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Name == "" {
		c.Name = "default"
	}
	switch {
	case c.Size < 1:
		return invalid(fmt.Sprintf("group size %d, want at least 1", c.Size))
	case c.MaxSize < c.Size:
		return invalid(fmt.Sprintf("max_group_size %d is below the group size %d", c.MaxSize, c.Size))
	case c.MaxSize > MaxGroupSize:
		return invalid(fmt.Sprintf("max_group_size %d is above %d", c.MaxSize, MaxGroupSize))
	case c.Rank < 0 || c.Rank >= c.MaxSize:
		return invalid(fmt.Sprintf("rank %d outside the group's %d slots", c.Rank, c.MaxSize))
	case !c.IsExtension && c.Rank >= c.Size:
		return invalid(fmt.Sprintf("rank %d outside a group of %d (is_extension not set)", c.Rank, c.Size))
	case c.AutoSync && !c.AutoDeactivate:
		return invalid("auto_sync_on_failure needs auto_deactivate_on_failure")
	case c.DeviceType != DeviceCPU && c.DeviceType != DeviceCUDA:
		return invalid(fmt.Sprintf("device_type %d (want 0 cpu or 1 cuda)", c.DeviceType))
	}
	return nil
}
