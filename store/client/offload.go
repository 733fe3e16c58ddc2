package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/store/api"
	"github.com/mooncake-go/mooncake/store/dfs"
)

// SSD offload: this client's local disk as a tier under its memory segment (the master decides
// the moves, see store/master/offload.go).
//
//   - The client keeps its files in <Dir>/<client id>/, holding an exclusive flock on a lock file
//     there while it lives. At start and every heartbeat it removes the directories of clients
//     whose lock is free (killed without closing): nothing references their files any more, the
//     master drops a dead client's local-disk replicas.
//   - It serves reads of its files over HTTP (GET /offload/read) on the endpoint it mounts its
//     segment with: another client reading an object that lives only on this disk asks here
//     (get_offload_rpc_read_count counts those reads); the holder itself reads its file
//     directly. The server checks the file's header and checksum, the reader checks the
//     payload's checksum again against the master's, so a damaged file or a dead holder is an
//     error for that key, never wrong bytes.
//   - The moves arrive with the G3 ones (offloadLoop, OffloadTask.Local): small objects are
//     packed into bucket files of up to BucketKeys objects / BucketBytes bytes.

// OffloadConfig configures SSD offload (the MOONCAKE_OFFLOAD_* knobs; package config fills it).
type OffloadConfig struct {
	Enable      bool
	Dir         string        // existing absolute directory on local disk (MOONCAKE_OFFLOAD_FILE_STORAGE_PATH)
	BucketKeys  int           // objects per bucket file (0: 500)
	BucketBytes uint64        // bytes per bucket file (0: 256 MiB)
	Heartbeat   time.Duration // housekeeping period (0: 10 s)
	TotalBytes  uint64        // most bytes the directory may hold (MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES; 0: 2 TiB)
}

const lockName = ".lock"

type localDisk struct {
	root     string // <Dir>
	dir      string // <Dir>/<client id>
	lock     *os.File
	srv      *http.Server
	endpoint string
	capacity uint64 // TotalBytes, at most the filesystem's size: reported to the master with the segment
	httpc    *http.Client
	keys     int
	bytes    uint64
	beat     time.Duration
	rpcReads atomic.Uint64 // reads this client made through another client's server
	served   atomic.Uint64 // reads this client served to others
}

// validOffloadDir checks upstream's rules: an absolute path without "..", an existing
// directory (not a symbolic link), writable.
func validOffloadDir(dir string) error {
	switch {
	case dir == "":
		return errors.New("no directory (set MOONCAKE_OFFLOAD_FILE_STORAGE_PATH)")
	case !filepath.IsAbs(dir):
		return fmt.Errorf("%q is not an absolute path", dir)
	case strings.Contains(dir, ".."):
		return fmt.Errorf("%q contains '..'", dir)
	}
	st, err := os.Lstat(dir)
	switch {
	case err != nil:
		return fmt.Errorf("%q: %w (create the directory first)", dir, err)
	case st.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("%q is a symbolic link; give the real path", dir)
	case !st.IsDir():
		return fmt.Errorf("%q is not a directory", dir)
	}
	return unix.Access(dir, unix.W_OK|unix.X_OK)
}

// startLocalDisk prepares the offload directory and the read server; host is what other
// clients reach this one by.
func (c *Client) startLocalDisk(cfg OffloadConfig, host string) error {
	if err := validOffloadDir(cfg.Dir); err != nil {
		return api.Errorf(api.INVALID_PARAMS, "enable_ssd_offload: offload directory %v", err)
	}
	l := &localDisk{root: cfg.Dir, dir: filepath.Join(cfg.Dir, c.id), keys: cfg.BucketKeys, bytes: cfg.BucketBytes, beat: cfg.Heartbeat}
	if l.keys <= 0 {
		l.keys = 500
	}
	if l.bytes == 0 {
		l.bytes = 256 << 20
	}
	if l.beat <= 0 {
		l.beat = 10 * time.Second
	}
	l.capacity = cfg.TotalBytes
	if l.capacity == 0 {
		l.capacity = 2 << 40
	}
	var fs unix.Statfs_t
	if unix.Statfs(cfg.Dir, &fs) == nil && fs.Blocks > 0 {
		l.capacity = min(l.capacity, fs.Blocks*uint64(fs.Bsize))
	}
	if err := os.Mkdir(l.dir, 0o755); err != nil {
		return api.Errorf(api.INVALID_PARAMS, "enable_ssd_offload: %v", err)
	}
	f, err := os.OpenFile(filepath.Join(l.dir, lockName), os.O_CREATE|os.O_RDWR, 0o644)
	if err == nil {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	}
	if err != nil {
		os.RemoveAll(l.dir)
		return api.Errorf(api.INVALID_PARAMS, "enable_ssd_offload: lock %s: %v", l.dir, err)
	}
	l.lock = f
	sweepDeadClients(l.root, c.id)
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		ln, err = net.Listen("tcp", ":0")
	}
	if err != nil {
		l.close()
		return api.Errorf(api.INVALID_PARAMS, "enable_ssd_offload: listen for offload reads: %v", err)
	}
	l.endpoint = net.JoinHostPort(host, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	mux := http.NewServeMux()
	mux.HandleFunc("/offload/read", l.serveRead)
	l.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go l.srv.Serve(ln)
	l.httpc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second}}
	c.local = l
	return nil
}

// close stops the server and removes the directory: nothing outside this client can read the
// files (the master drops its local-disk replicas with its segment).
func (l *localDisk) close() {
	if l.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		l.srv.Shutdown(ctx)
		cancel()
	}
	if l.httpc != nil {
		l.httpc.CloseIdleConnections()
	}
	os.RemoveAll(l.dir)
	if l.lock != nil {
		l.lock.Close()
	}
}

// sweepDeadClients removes the offload directories under root of clients that no longer hold
// their lock (killed without closing). A directory being created (no lock file yet) is left.
func sweepDeadClients(root, self string) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || e.Name() == self || len(e.Name()) != 32 {
			continue
		}
		dir := filepath.Join(root, e.Name())
		f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			if err := os.RemoveAll(dir); err == nil {
				log.Printf("mooncake store client: removed the SSD offload files of dead client %s", e.Name())
			}
		}
		f.Close()
	}
}

// localHousekeeping sweeps dead clients' directories every heartbeat.
func (c *Client) localHousekeeping(ctx context.Context) {
	for sleepCtx(ctx, c.local.beat) {
		sweepDeadClients(c.local.root, c.id)
	}
}

const codeHeader = "X-Mooncake-Code"

func (l *localDisk) serveRead(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	fail := func(code api.ErrorCode, msg string) {
		w.Header().Set(codeHeader, strconv.Itoa(int(code)))
		http.Error(w, msg, http.StatusInternalServerError)
	}
	rel, key := q.Get("path"), q.Get("key")
	off, err1 := strconv.ParseInt(q.Get("offset"), 10, 64)
	size, err2 := strconv.ParseUint(q.Get("size"), 10, 63)
	sum, err3 := strconv.ParseUint(q.Get("sum"), 10, 32)
	if err1 != nil || err2 != nil || err3 != nil || rel == "" || filepath.IsAbs(rel) || strings.Contains(rel, "..") || off < 0 || size == 0 || size > 1<<36 {
		fail(api.INVALID_PARAMS, "bad offload read request")
		return
	}
	buf := make([]byte, size)
	if err := dfs.ReadAt(l.dir, rel, off, key, uint32(sum), buf, dfs.Options{}); err != nil {
		fail(api.CodeOf(err), err.Error())
		return
	}
	l.served.Add(1)
	w.Header().Set("Content-Length", strconv.FormatUint(size, 10))
	w.Write(buf)
}

// readLocal reads an object that lives on a client's local disk: this one's directly, another
// one's through its read server.
func (c *Client) readLocal(ctx context.Context, key string, r api.Replica, dst []byte) error {
	if l := c.local; l != nil && r.Endpoint == l.endpoint {
		return dfs.ReadAt(l.dir, r.Path, r.Offset, key, r.Checksum, dst, dfs.Options{})
	}
	if r.Endpoint == "" {
		return api.Errorf(api.FILE_NOT_FOUND, "the local-disk copy of %s names no client to read it from", quote(key))
	}
	q := url.Values{"path": {r.Path}, "offset": {strconv.FormatInt(r.Offset, 10)}, "key": {key},
		"size": {strconv.Itoa(len(dst))}, "sum": {strconv.FormatUint(uint64(r.Checksum), 10)}}
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+r.Endpoint+"/offload/read?"+q.Encode(), nil)
	if err != nil {
		return api.Errorf(api.INVALID_PARAMS, "offload read of %s: %v", quote(key), err)
	}
	resp, err := c.offloadHTTP().Do(req)
	if err != nil {
		return api.Errorf(api.RPC_FAIL, "the client holding %s on its local disk (%s) did not answer: %v", quote(key), r.Endpoint, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		code := api.FILE_READ_FAIL
		if n, err := strconv.Atoi(resp.Header.Get(codeHeader)); err == nil && n < 0 {
			code = api.ErrorCode(n)
		}
		return api.Errorf(code, "%s", strings.TrimSpace(string(msg)))
	}
	if _, err := io.ReadFull(resp.Body, dst); err != nil {
		return api.Errorf(api.FILE_READ_FAIL, "offload read of %s from %s: short answer: %v", quote(key), r.Endpoint, err)
	}
	if !dfs.ChecksumMatches(dst, r.Checksum) {
		return api.Errorf(api.CHECKSUM_MISMATCH, "offload read of %s from %s: payload checksum mismatch", quote(key), r.Endpoint)
	}
	c.tiers.offloadRPCReads.Add(1)
	return nil
}

// UnmountLocalDisk takes this client's local disk (SSD offload) out of the store, keeping its
// memory segment (upstream's unmount_local_disk_segment): the master moves nothing more there,
// cancels the moves to it in progress and drops the copies on it (an object whose only copy was
// there is gone); eviction then drops objects from this client's memory as without SSD offload.
// The files on the disk are deleted as the master hands them back; the read server stays up
// until Close. A client without SSD offload: nothing to do (logged).
func (c *Client) UnmountLocalDisk(ctx context.Context) error {
	if c.local == nil || c.segment == nil {
		log.Printf("mooncake store client: unmount_local_disk_segment: SSD offload is not enabled on this client; nothing to unmount")
		return nil
	}
	// Re-mounts (after the master lost this client) no longer offer the disk.
	c.segMu.Lock()
	c.segment.OffloadEndpoint, c.segment.OffloadCapacity = "", 0
	id := c.segment.ID
	c.segMu.Unlock()
	rctx, cancel := c.rpcCtx(ctx)
	defer cancel()
	st, err := c.master.UnmountSegment(rctx, &api.UnmountSegmentRequest{ClientID: c.id, SegmentID: id, LocalDisk: true})
	if err != nil {
		return c.rpcErr("unmount local disk segment", err)
	}
	if err := st.Err(); err != nil {
		return fmt.Errorf("unmount local disk segment of %s: %w", c.segment.Name, err)
	}
	log.Printf("mooncake store client: unmounted the local disk segment (SSD offload in %s) of %s", c.local.dir, c.segment.Name)
	return nil
}

// offloadHTTP is the HTTP client of a client without SSD offload of its own (it may still read
// objects other clients offloaded).
func (c *Client) offloadHTTP() *http.Client {
	if c.local != nil {
		return c.local.httpc
	}
	c.httpOnce.Do(func() {
		c.httpc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second}}
	})
	return c.httpc
}

// OffloadRPCReadCount is how many gets this client served by asking another client to read
// its local disk (upstream's get_offload_rpc_read_count).
func (c *Client) OffloadRPCReadCount() uint64 { return c.tiers.offloadRPCReads.Load() }

// OffloadDir is this client's SSD offload directory ("" without SSD offload).
func (c *Client) OffloadDir() string {
	if c.local == nil {
		return ""
	}
	return c.local.dir
}

// removeLocal deletes files of this client's offload directory the master no longer references.
func (c *Client) removeLocal(paths []string) {
	if c.local == nil {
		return
	}
	for _, p := range paths {
		if err := dfs.Remove(c.local.dir, p); err != nil {
			log.Printf("mooncake store client: remove offload file %s: %v", p, err)
		}
	}
}

// offloadHost is the host other clients reach the read server at: the engine segment's host,
// else local_hostname's.
func offloadHost(segName, localHostname string) string {
	for _, n := range []string{segName, localHostname} {
		if h, _, err := net.SplitHostPort(n); err == nil && h != "" {
			return h
		}
		if n != "" && !strings.Contains(n, ":") {
			return n
		}
	}
	return ""
}
