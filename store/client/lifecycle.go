package client

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/mooncake-go/mooncake/store/api"
)

// The client's life after New: the heartbeat that keeps its segments mounted, health, Close.

func (c *Client) mount(ctx context.Context) error {
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	c.segMu.Lock()
	seg := *c.segment // UnmountLocalDisk changes its offload fields
	c.segMu.Unlock()
	st, err := c.master.MountSegment(rctx, &api.MountSegmentRequest{ClientID: c.id, Segment: seg})
	if err != nil {
		return c.rpcErr("mount segment", err)
	}
	if err := st.Err(); err != nil {
		return fmt.Errorf("mount segment %s: %w", c.segment.Name, err)
	}
	return nil
}

func (c *Client) heartbeat(ctx context.Context) {
	defer close(c.done)
	t := time.NewTicker(c.cfg.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, max(c.cfg.PingInterval, time.Second))
		resp, err := c.master.Ping(rctx, &api.PingRequest{ClientID: c.id})
		cancel()
		if err == nil && resp.Code != api.OK {
			err = resp.Err() // no master serving (UNAVAILABLE_IN_CURRENT_STATUS): nothing to re-mount on
		}
		if err != nil {
			c.setHealth(false, err)
			continue
		}
		c.cc.retryFollow(ctx)
		c.setHealth(true, nil)
		c.resv.ttl.Store(resp.ClientTTLMs) // bounds a reservation's age (reserve.go)
		c.remountExtra(ctx, resp.MountedSegments)
		if c.segment != nil && !containsStr(resp.MountedSegments, c.segment.ID) {
			c.cc.gen.Add(1) // the master lost this client's state: its reservations too
			if err := c.mount(ctx); err != nil {
				log.Printf("mooncake store client: re-mount of %s failed: %v", c.segment.Name, err)
			} else {
				log.Printf("mooncake store client: re-mounted segment %s on the master", c.segment.Name)
			}
		}
	}
}

func containsStr(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func (c *Client) setHealth(ok bool, err error) {
	c.healthMu.Lock()
	c.healthy, c.lastErr = ok, err
	c.healthMu.Unlock()
}

// HealthCheck asks the master for its status: nil when it answers in time.
func (c *Client) HealthCheck(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, min(c.cfg.RPCTimeout, 3*time.Second))
	defer cancel()
	if _, err := c.master.ServiceStatus(rctx, &api.ServiceStatusRequest{}); err != nil {
		return c.rpcErr("health check", err)
	}
	c.setHealth(true, nil)
	return nil
}

// Close unmounts the segment (its replicas disappear from the master; copies elsewhere stay),
// stops the heartbeat and frees the memory. It is idempotent.
func (c *Client) Close() error {
	var err error
	c.closeOnce.Do(func() {
		if c.stop != nil {
			c.stop()
			<-c.done
			c.bg.Wait()
		}
		c.closeConfirms()     // unconfirmed.go
		c.closeReservations() // reserve.go
		if e := c.closeExtra(); e != nil {
			err = e
		}
		if c.segment != nil {
			ctx, cancel := c.rpcCtx(context.Background())
			st, e := c.master.UnmountSegment(ctx, &api.UnmountSegmentRequest{ClientID: c.id, SegmentID: c.segment.ID})
			cancel()
			if e == nil {
				e = st.Err()
			}
			if e != nil && !api.Is(e, api.SEGMENT_NOT_FOUND) {
				err = fmt.Errorf("unmount segment %s: %w", c.segment.Name, e)
			}
		}
		c.release()
	})
	return err
}

func (c *Client) release() {
	if c.local != nil {
		c.local.close()
	}
	if c.segment != nil {
		c.eng.FreeShared(uintptr(c.segment.Base))
	}
	if c.stageAddr != 0 {
		c.eng.FreeShared(c.stageAddr)
	}
	c.regMu.Lock()
	for addr := range c.regions {
		c.eng.UnregisterLocalMemory(addr)
	}
	c.regions = map[uintptr]uint64{}
	c.regMu.Unlock()
	if c.cc != nil {
		c.cc.Close()
	}
	if c.ownEngine != nil {
		c.ownEngine()
	}
}
