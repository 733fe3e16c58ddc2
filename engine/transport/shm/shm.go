package shm

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/engine/transport"
	"github.com/mooncake-go/mooncake/internal/futex"
	"github.com/mooncake-go/mooncake/internal/memview"
)

// Region is a shared buffer owned by this process.
type Region struct {
	Addr uintptr
	Info transport.ShmInfo
	mem  []byte
	file *os.File
}

// Alloc creates and maps a shared buffer of size bytes (zero-filled).
func Alloc(size uint64) (*Region, error) {
	if size == 0 {
		return nil, errors.New("shm: cannot allocate a zero-length buffer")
	}
	if size > math.MaxInt {
		return nil, fmt.Errorf("shm: buffer of %d bytes is too large", size)
	}
	var tok [8]byte
	rand.Read(tok[:])
	name := "mooncake-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(tok[:])
	var f *os.File
	path := ""
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err == nil {
		f = os.NewFile(uintptr(fd), "memfd:"+name)
	} else {
		path = "/dev/shm/" + name
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("shm: cannot create a shared buffer (memfd and /dev/shm both failed): %w", err)
		}
	}
	if err := f.Truncate(int64(size)); err != nil {
		f.Close()
		if path != "" {
			os.Remove(path)
		}
		return nil, fmt.Errorf("shm: cannot size shared buffer to %d bytes: %w", size, err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		if path != "" {
			os.Remove(path)
		}
		return nil, fmt.Errorf("shm: cannot map shared buffer of %d bytes: %w", size, err)
	}
	return &Region{
		Addr: memview.Addr(mem),
		Info: transport.ShmInfo{PID: os.Getpid(), FD: int(f.Fd()), Name: name, Size: size, Path: path},
		mem:  mem,
		file: f,
	}, nil
}

// Free unmaps the region and closes its file.
func (r *Region) Free() error {
	err := unix.Munmap(r.mem)
	r.file.Close()
	if r.Info.Path != "" {
		os.Remove(r.Info.Path)
	}
	return err
}

type mapKey struct {
	pid  int
	fd   int
	name string
}

type mapping struct {
	mem     []byte
	filled  filled        // chunks whose page tables are in place (populate.go)
	bgDone  chan struct{} // closed when the background fill pass ends
	holds   int           // Hold views outstanding (under Transport.mu)
	orphan  bool          // dropped from maps while held: unmap at the last release
	dropped bool          // dropped from maps (under Transport.mu)
}

// drop unmaps m now, or at its last release when views of it are held; the caller holds t.mu.
func (m *mapping) drop() {
	m.dropped = true
	if m.holds > 0 {
		m.orphan = true
		return
	}
	unix.Munmap(m.mem)
}

type peer struct {
	pidfd int // -1: use kill(pid, 0)
	dead  bool
}

// Transport maps peers' shared buffers and copies into and out of them.
type Transport struct {
	mu     sync.RWMutex
	maps   map[mapKey]*mapping
	peers  map[int]*peer
	closed bool
}

// New returns a transport with no mappings.
func New() *Transport {
	return &Transport{maps: make(map[mapKey]*mapping), peers: make(map[int]*peer)}
}

// Name implements transport.Transport.
func (t *Transport) Name() string { return "shm" }

// Close unmaps everything.
func (t *Transport) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for k, m := range t.maps {
		m.drop()
		delete(t.maps, k)
	}
	for pid, p := range t.peers {
		if p.pidfd >= 0 {
			unix.Close(p.pidfd)
		}
		delete(t.peers, pid)
	}
	return nil
}

// lookup returns the mapping for info; the caller holds t.mu (read or write).
func (t *Transport) lookup(info *transport.ShmInfo) *mapping {
	return t.maps[mapKey{info.PID, info.FD, info.Name}]
}

// ensure maps info (under the write lock) if it is not mapped yet.
func (t *Transport) ensure(info *transport.ShmInfo) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return errors.New("shm transport is closed")
	}
	k := mapKey{info.PID, info.FD, info.Name}
	if t.maps[k] != nil {
		return nil
	}
	if p := t.peers[info.PID]; p != nil && p.dead {
		return fmt.Errorf("shm: process %d: %w", info.PID, transport.ErrPeerGone)
	}
	f, err := openShared(info)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("shm: cannot stat the peer's shared buffer: %w", err)
	}
	if uint64(st.Size()) < info.Size || info.Size > math.MaxInt {
		return fmt.Errorf("shm: peer's shared buffer is %d bytes, descriptor says %d", st.Size(), info.Size)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(info.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("shm: cannot map the peer's shared buffer: %w", err)
	}
	m := &mapping{mem: mem, filled: newFilled(len(mem)), bgDone: make(chan struct{})}
	t.maps[k] = m
	go t.backgroundFill(m)
	if t.peers[info.PID] == nil {
		pfd, err := unix.PidfdOpen(info.PID, 0)
		if err != nil {
			pfd = -1
		}
		t.peers[info.PID] = &peer{pidfd: pfd}
	}
	return nil
}

func openShared(info *transport.ShmInfo) (*os.File, error) {
	var firstErr error
	if info.PID > 0 && info.FD >= 0 {
		p := "/proc/" + strconv.Itoa(info.PID) + "/fd/" + strconv.Itoa(info.FD)
		link, err := os.Readlink(p)
		switch {
		case err != nil:
			firstErr = fmt.Errorf("shm: cannot reach the peer's shared buffer %s: %w", p, err)
		case !strings.Contains(link, info.Name):
			firstErr = fmt.Errorf("shm: %s is %q, not the peer's buffer %q (another pid namespace?)", p, link, info.Name)
		default:
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err == nil {
				return f, nil
			}
			firstErr = fmt.Errorf("shm: cannot open the peer's shared buffer %s: %w", p, err)
		}
	}
	if info.Path != "" {
		f, err := os.OpenFile(info.Path, os.O_RDWR, 0)
		if err == nil {
			return f, nil
		}
		if firstErr == nil {
			firstErr = fmt.Errorf("shm: cannot open the peer's shared buffer %s: %w", info.Path, err)
		}
	}
	if firstErr == nil {
		firstErr = errors.New("shm: descriptor names no shared buffer")
	}
	return nil, firstErr
}

// alive reports whether pid is still running; the caller holds t.mu (read).
func (t *Transport) alive(pid int) bool {
	p := t.peers[pid]
	if p == nil {
		return true
	}
	if p.dead {
		return false
	}
	if p.pidfd >= 0 {
		fds := [1]unix.PollFd{{Fd: int32(p.pidfd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds[:], 0)
		return !(err == nil && n > 0)
	}
	return unix.Kill(pid, 0) != unix.ESRCH
}

// markDead forgets the mappings of a dead peer.
func (t *Transport) markDead(pid int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.peers[pid]
	if p == nil || p.dead {
		return
	}
	p.dead = true
	for k, m := range t.maps {
		if k.pid == pid {
			m.drop()
			delete(t.maps, k)
		}
	}
}

// Forget drops mappings and the dead mark of pid (a restarted peer may reuse nothing of it).
func (t *Transport) Forget(pid int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, m := range t.maps {
		if k.pid == pid {
			m.drop()
			delete(t.maps, k)
		}
	}
	if p := t.peers[pid]; p != nil {
		if p.pidfd >= 0 {
			unix.Close(p.pidfd)
		}
		delete(t.peers, pid)
	}
}

// View returns the local mapping of the peer's [addr, addr+length) when it lies in a shared
// buffer of d. The view stays valid until Close or until the peer is found dead.
func (t *Transport) View(d *transport.SegmentDescriptor, addr, length uint64) ([]byte, error) {
	b := d.Find(addr, length)
	if b == nil || b.Shm == nil {
		return nil, fmt.Errorf("shm: [%#x, +%d) is not in a shared buffer of %q", addr, length, d.Name)
	}
	if err := t.ensure(b.Shm); err != nil {
		return nil, err
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	m := t.lookup(b.Shm)
	if m == nil {
		return nil, fmt.Errorf("shm: mapping of %q vanished: %w", d.Name, transport.ErrPeerGone)
	}
	off := addr - b.Addr
	m.fill(off, length)
	return m.mem[off : off+length : off+length], nil
}

// Hold is View with a hold on the mapping: the view stays mapped until release is called,
// even after the peer is found dead, forgotten or the transport closes (a dead peer's memfd
// pages stay valid while mapped, so reading or writing them is safe, merely pointless).
// release may be called more than once.
func (t *Transport) Hold(d *transport.SegmentDescriptor, addr, length uint64) (view []byte, release func(), err error) {
	b := d.Find(addr, length)
	if b == nil || b.Shm == nil {
		return nil, nil, fmt.Errorf("shm: [%#x, +%d) is not in a shared buffer of %q", addr, length, d.Name)
	}
	if err := t.ensure(b.Shm); err != nil {
		return nil, nil, err
	}
	t.mu.Lock()
	m := t.lookup(b.Shm)
	if m == nil {
		t.mu.Unlock()
		return nil, nil, fmt.Errorf("shm: mapping of %q vanished: %w", d.Name, transport.ErrPeerGone)
	}
	m.holds++
	t.mu.Unlock()
	var once sync.Once
	release = func() { once.Do(func() { t.release(m) }) }
	off := addr - b.Addr
	m.fill(off, length) // held: it stays mapped
	return m.mem[off : off+length : off+length], release, nil
}

// release ends one hold on m, unmapping it when it was dropped meanwhile and this was the last.
func (t *Transport) release(m *mapping) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m.holds--
	if m.holds == 0 && m.orphan {
		unix.Munmap(m.mem)
	}
}

// Execute implements transport.Transport.
func (t *Transport) Execute(ctx context.Context, tg *transport.Target, reqs []transport.Request, r transport.Reporter) {
	d := tg.Desc
	for i := 0; i < len(reqs); i++ {
		q := &reqs[i]
		if q.Length == 0 {
			r.Done(i, nil)
			continue
		}
		if err := ctx.Err(); err != nil {
			r.Done(i, fmt.Errorf("shm transfer timed out: %w", context.DeadlineExceeded))
			continue
		}
		b := d.Find(q.Remote, q.Length)
		if b == nil || b.Shm == nil {
			r.Done(i, fmt.Errorf("shm: [%#x, +%d) is not in a shared buffer of %q", q.Remote, q.Length, d.Name))
			continue
		}
		t.mu.RLock()
		m := t.lookup(b.Shm)
		if m == nil {
			t.mu.RUnlock()
			if err := t.ensure(b.Shm); err != nil {
				r.Done(i, err)
				continue
			}
			i-- // retry with the mapping in place
			continue
		}
		if !t.alive(b.Shm.PID) {
			t.mu.RUnlock()
			t.markDead(b.Shm.PID)
			r.Done(i, fmt.Errorf("shm: segment %q (process %d): %w", d.Name, b.Shm.PID, transport.ErrPeerGone))
			continue
		}
		off := q.Remote - b.Addr
		m.fill(off, q.Length)
		remote := m.mem[off : off+q.Length]
		local := memview.Bytes(q.Local, int(q.Length))
		if q.Write {
			if q.Length == 4 && q.Remote%4 == 0 {
				// A signal word: an atomic store orders it after the data before it.
				atomic.StoreUint32(memview.Uint32(memview.Addr(remote)), binary.NativeEndian.Uint32(local))
				futex.Wake(memview.Uint32(memview.Addr(remote)), math.MaxInt32)
			} else {
				copy(remote, local)
			}
		} else {
			copy(local, remote)
		}
		t.mu.RUnlock()
		r.Progress(i, q.Length)
		r.Done(i, nil)
	}
}
