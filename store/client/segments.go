package client

import (
	"context"
	"fmt"
	"log"
	"os"
	"sort"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/store/api"
)

// More segments than the one setup contributes (upstream's mount_segment,
// allocate_and_mount_segment, unmount_segment, unmount_and_free_segment). Each is mounted on
// the master under its own id, kept mounted by the heartbeat like the first one, and unmounted
// by Close.

// extraSeg is a segment mounted after setup: memory allocated by the engine (owned) or a file
// mapped into this process (mapped).
type extraSeg struct {
	seg    api.Segment
	owned  bool   // from AllocateAndMountSegment: FreeShared on unmount
	mapped []byte // from MountSegment: munmap on unmount
}

// pageAlign rounds n up to whole pages.
func pageAlign(n uint64) uint64 {
	const page = 4096
	return (n + page - 1) / page * page
}

func (c *Client) nextSegID() string {
	c.segMu.Lock()
	defer c.segMu.Unlock()
	c.extraN++
	return c.id + "/" + strconv.Itoa(c.extraN)
}

func (c *Client) mountExtra(ctx context.Context, x *extraSeg) error {
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	st, err := c.master.MountSegment(rctx, &api.MountSegmentRequest{ClientID: c.id, Segment: x.seg})
	if err != nil {
		return c.rpcErr("mount segment", err)
	}
	if err := st.Err(); err != nil {
		return fmt.Errorf("mount segment %s: %w", x.seg.ID, err)
	}
	c.segMu.Lock()
	c.extra[x.seg.ID] = x
	c.segMu.Unlock()
	return nil
}

// AllocateAndMountSegment allocates size bytes (rounded up to whole pages) of shared memory
// and mounts them as a new segment of this client; it returns the segment id and the size.
func (c *Client) AllocateAndMountSegment(ctx context.Context, size uint64) (string, uint64, error) {
	if size == 0 {
		return "", 0, api.Errorf(api.INVALID_PARAMS, "allocate_and_mount_segment: size is 0")
	}
	size = pageAlign(size)
	base, err := c.eng.AllocateShared(size)
	if err != nil {
		return "", 0, api.Errorf(api.INTERNAL_ERROR, "allocate_and_mount_segment: allocate %d bytes: %v", size, err)
	}
	x := &extraSeg{seg: api.Segment{ID: c.nextSegID(), Name: c.eng.SegmentName(), Base: uint64(base), Size: size}, owned: true}
	if err := c.mountExtra(ctx, x); err != nil {
		c.eng.FreeShared(base)
		return "", 0, err
	}
	return x.seg.ID, size, nil
}

// MountSegment maps size bytes of the file at path (from offset, a multiple of the page size)
// into this process, registers them with the engine and mounts them as a new segment; it
// returns the segment id. The file must be at least offset+size bytes long.
func (c *Client) MountSegment(ctx context.Context, path string, size, offset uint64) (string, error) {
	switch {
	case size == 0:
		return "", api.Errorf(api.INVALID_PARAMS, "mount_segment %s: size is 0", path)
	case offset%4096 != 0:
		return "", api.Errorf(api.INVALID_PARAMS, "mount_segment %s: offset %d is not a multiple of the page size", path, offset)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return "", api.Errorf(api.INVALID_PARAMS, "mount_segment: %v", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", api.Errorf(api.INVALID_PARAMS, "mount_segment: %v", err)
	}
	if uint64(st.Size()) < offset+size {
		return "", api.Errorf(api.INVALID_PARAMS, "mount_segment %s: the file has %d bytes, fewer than offset %d + size %d", path, st.Size(), offset, size)
	}
	m, err := unix.Mmap(int(f.Fd()), int64(offset), int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return "", api.Errorf(api.INTERNAL_ERROR, "mount_segment %s: mmap: %v", path, err)
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(m)))
	if err := c.eng.RegisterLocalMemory(base, size, "cpu:0"); err != nil {
		unix.Munmap(m)
		return "", api.Errorf(api.INTERNAL_ERROR, "mount_segment %s: register: %v", path, err)
	}
	x := &extraSeg{seg: api.Segment{ID: c.nextSegID(), Name: c.eng.SegmentName(), Base: uint64(base), Size: size}, mapped: m}
	if err := c.mountExtra(ctx, x); err != nil {
		c.eng.UnregisterLocalMemory(base)
		unix.Munmap(m)
		return "", err
	}
	return x.seg.ID, nil
}

// UnmountSegments unmounts segments mounted by MountSegment (free=false) or by
// AllocateAndMountSegment (free=true) and releases their memory. Every id is checked first:
// an unknown id, or one of the other kind, changes nothing.
//
// With grace > 0 (upstream's grace_period_seconds) the master first closes the segments to new
// objects (a drain, in its oplog) while what they hold stays readable; the client unmounts and
// releases them when grace has passed, or at Close, whichever comes first. The call returns once
// the drain is recorded.
func (c *Client) UnmountSegments(ctx context.Context, ids []string, free bool, grace time.Duration) error {
	c.segMu.Lock()
	var xs []*extraSeg
	for _, id := range ids {
		x, ok := c.extra[id]
		switch {
		case !ok:
			c.segMu.Unlock()
			return api.Errorf(api.SEGMENT_NOT_FOUND, "segment %q was not mounted by mount_segment or allocate_and_mount_segment of this store", id)
		case x.owned != free && free:
			c.segMu.Unlock()
			return api.Errorf(api.INVALID_PARAMS, "segment %q maps a file: unmount it with unmount_segment", id)
		case x.owned != free:
			c.segMu.Unlock()
			return api.Errorf(api.INVALID_PARAMS, "segment %q was allocated by allocate_and_mount_segment: unmount it with unmount_and_free_segment", id)
		}
		xs = append(xs, x)
	}
	for _, x := range xs {
		delete(c.extra, x.seg.ID)
	}
	c.segMu.Unlock()
	var first error
	for _, x := range xs {
		if grace > 0 {
			if err := c.drainExtra(ctx, x, grace); err == nil {
				continue
			} else if first == nil {
				first = err
			}
		}
		if err := c.dropExtra(ctx, x); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// drainExtra closes x to new objects on the master and unmounts it after grace (or at Close)
// in the background. On an error nothing was scheduled.
func (c *Client) drainExtra(ctx context.Context, x *extraSeg, grace time.Duration) error {
	rctx, cancel := c.rpcCtx(ctx)
	st, err := c.master.UnmountSegment(rctx, &api.UnmountSegmentRequest{ClientID: c.id, SegmentID: x.seg.ID, Drain: true})
	cancel()
	if err == nil {
		err = st.Err()
	}
	if err != nil {
		return fmt.Errorf("close segment %s to new objects: %w", x.seg.ID, err)
	}
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-t.C:
		case <-c.life.Done():
		}
		if err := c.dropExtra(context.Background(), x); err != nil {
			log.Printf("mooncake store client: unmount of segment %s after its grace period: %v", x.seg.ID, err)
		}
	}()
	return nil
}

func (c *Client) dropExtra(ctx context.Context, x *extraSeg) error {
	rctx, cancel := c.rpcCtx(ctx)
	st, err := c.master.UnmountSegment(rctx, &api.UnmountSegmentRequest{ClientID: c.id, SegmentID: x.seg.ID})
	cancel()
	if err == nil {
		err = st.Err()
	}
	if x.owned {
		c.eng.FreeShared(uintptr(x.seg.Base))
	} else {
		c.eng.UnregisterLocalMemory(uintptr(x.seg.Base))
		unix.Munmap(x.mapped)
	}
	if err != nil && !api.Is(err, api.SEGMENT_NOT_FOUND) {
		return fmt.Errorf("unmount segment %s: %w", x.seg.ID, err)
	}
	return nil
}

// extraSegments lists the segments mounted after setup, by id.
func (c *Client) extraSegments() []*extraSeg {
	c.segMu.Lock()
	defer c.segMu.Unlock()
	out := make([]*extraSeg, 0, len(c.extra))
	for _, x := range c.extra {
		out = append(out, x)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].seg.ID < out[j].seg.ID })
	return out
}

// remountExtra mounts again the extra segments the master no longer lists (after this
// client's expiry or a master restart).
func (c *Client) remountExtra(ctx context.Context, mounted []string) {
	for _, x := range c.extraSegments() {
		if containsStr(mounted, x.seg.ID) {
			continue
		}
		rctx, cancel := c.rpcCtx(ctx)
		st, err := c.master.MountSegment(rctx, &api.MountSegmentRequest{ClientID: c.id, Segment: x.seg})
		cancel()
		if err == nil {
			err = st.Err()
		}
		if err != nil {
			log.Printf("mooncake store client: re-mount of segment %s failed: %v", x.seg.ID, err)
		}
	}
}

// closeExtra unmounts and releases every extra segment (Close).
func (c *Client) closeExtra() error {
	var first error
	for _, x := range c.extraSegments() {
		c.segMu.Lock()
		delete(c.extra, x.seg.ID)
		c.segMu.Unlock()
		if err := c.dropExtra(context.Background(), x); err != nil && first == nil {
			first = err
		}
	}
	return first
}
