package dfs

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mooncake-go/mooncake/store/api"
)

const (
	// HeaderSize is the size of the header block; the payload starts there.
	HeaderSize = 4096
	// BlockSize is the unit of one pread/pwrite of the payload.
	BlockSize = 4 << 20
	// Parallel is the number of blocks of one file in flight at once.
	Parallel = 4
	magic    = "MCG3OBJ1"
	// version is the format files are written in: 2 checksums with CRC-32 (IEEE), 1 (still
	// read) with CRC-32C; the layout is the same.
	version  = 2
	version1 = 1
	align    = 4096
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC-32 (IEEE) of b: the checksum of files written now, which the master
// records. Format version 1 used CRC-32C; CRC-32 replaced it because it runs about 3x faster on
// payloads that are not in the CPU's cache (the common case: a move reads bytes a put wrote
// moments earlier from another process), through the carry-less multiply path.
func Checksum(b []byte) uint32 { return crc32.ChecksumIEEE(b) }

// checksumV is the checksum of format version ver: CRC-32C for version 1, CRC-32 after.
func checksumV(ver uint32, b []byte) uint32 {
	if ver == version1 {
		return crc32.Checksum(b, castagnoli)
	}
	return Checksum(b)
}

// ChecksumMatches reports whether sum is b's checksum in either format version (CRC-32 now,
// CRC-32C in files of version 1): for a reader that has the payload and the master's record
// but not the file's header (a read through another client's offload read server, which
// checked the header).
func ChecksumMatches(b []byte, sum uint32) bool {
	return Checksum(b) == sum || crc32.Checksum(b, castagnoli) == sum
}

// PathFor is the file (relative to the root) of generation gen of key: two levels of
// directories from the key's hash, so no directory grows too large, and the generation so that
// a re-put key never shares a file with its predecessor.
func PathFor(key string, gen uint64) string {
	h := sha256.Sum256([]byte(key))
	x := hex.EncodeToString(h[:])
	return filepath.Join(x[:2], x[2:4], fmt.Sprintf("%s-%d.mcobj", x[:32], gen))
}

// BucketPathFor is the bucket file (WriteBucket) whose first object was handed path
// (PathFor): the same name one directory up, so that bucket files share the 256 first-level
// directories instead of creating a fresh pair of directories per bucket in a young tree (a
// mkdir costs more than the write of a small object).
func BucketPathFor(path string) string {
	dir := filepath.Dir(filepath.Dir(path))
	return filepath.Join(dir, strings.TrimSuffix(filepath.Base(path), ".mcobj")+".mcbkt")
}

// IO is the block interface the tier writes and reads files through (the seam for a 3FS
// USRBIO backend).
type IO interface {
	WriteAt(f *os.File, b []byte, off int64) error
	ReadAt(f *os.File, b []byte, off int64) error
}

// VectorIO is an IO that also writes several buffers back to back at one offset (pwritev).
// WriteBucket uses it to write objects from where they lie instead of copying them into one
// buffer first.
type VectorIO interface {
	WritevAt(f *os.File, bufs [][]byte, off int64) error
}

// VectorReadIO is an IO that also reads into several buffers back to back from one offset
// (preadv); ReadMany uses it.
type VectorReadIO interface {
	ReadvAt(f *os.File, bufs [][]byte, off int64) error
}

// PosixIO is pwrite/pread/pwritev/preadv.
type PosixIO struct{}

// ReadvAt fills bufs back to back from off, continuing after short reads; the end of the file
// before they are full is io.ErrUnexpectedEOF.
func (PosixIO) ReadvAt(f *os.File, bufs [][]byte, off int64) error {
	return vectored(f, bufs, off, unix.Preadv, io.ErrUnexpectedEOF)
}

// WritevAt writes bufs back to back at off, continuing after short writes.
func (PosixIO) WritevAt(f *os.File, bufs [][]byte, off int64) error {
	return vectored(f, bufs, off, unix.Pwritev, io.ErrShortWrite)
}

// vectored runs op (pwritev or preadv) until bufs are done, continuing after short transfers;
// a transfer of nothing is short.
func vectored(f *os.File, bufs [][]byte, off int64, op func(int, [][]byte, int64) (int, error), short error) error {
	bufs = slices.Clone(bufs) // advanced below; the caller's stay whole
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var oerr error
	cerr := rc.Control(func(fd uintptr) {
		for len(bufs) > 0 {
			n, err := op(int(fd), bufs, off)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				oerr = err
				return
			}
			if n == 0 {
				oerr = short
				return
			}
			off += int64(n)
			for n > 0 {
				if n >= len(bufs[0]) {
					n -= len(bufs[0])
					bufs = bufs[1:]
				} else {
					bufs[0] = bufs[0][n:]
					n = 0
				}
			}
		}
	})
	if oerr != nil {
		return oerr
	}
	return cerr
}

func (PosixIO) WriteAt(f *os.File, b []byte, off int64) error {
	_, err := f.WriteAt(b, off)
	return err
}

func (PosixIO) ReadAt(f *os.File, b []byte, off int64) error {
	_, err := f.ReadAt(b, off)
	return err
}

// Options tune Write and Read.
type Options struct {
	IO     IO   // nil: PosixIO
	NoSync bool // skip fdatasync before the rename (tests, benchmarks of the raw path)
	Direct bool // try O_DIRECT
}

func (o Options) io() IO {
	if o.IO == nil {
		return PosixIO{}
	}
	return o.IO
}

func header(key string, size uint64, sum uint32) []byte {
	h := alignedBuf(HeaderSize)
	putHeader(h, key, size, sum)
	return h
}

// putHeader fills the header block h (HeaderSize zero bytes) of an object.
func putHeader(h []byte, key string, size uint64, sum uint32) {
	putHeaderV(h, version, key, size, sum)
}

// putHeaderV is putHeader in format version ver.
func putHeaderV(h []byte, ver uint32, key string, size uint64, sum uint32) {
	copy(h, magic)
	binary.LittleEndian.PutUint32(h[8:], ver)
	binary.LittleEndian.PutUint64(h[12:], size)
	binary.LittleEndian.PutUint32(h[20:], sum)
	binary.LittleEndian.PutUint32(h[24:], uint32(len(key)))
	copy(h[32:HeaderSize-4], key)
	binary.LittleEndian.PutUint32(h[HeaderSize-4:], checksumV(ver, h[:HeaderSize-4]))
}

// alignedBuf returns n zero bytes starting at a 4 KiB boundary.
func alignedBuf(n int) []byte {
	b := make([]byte, n+align)
	off := 0
	if r := int(uintptr(unsafe.Pointer(&b[0])) % align); r != 0 {
		off = align - r
	}
	return b[off : off+n : off+n]
}

func isAligned(b []byte) bool {
	return len(b) > 0 && uintptr(unsafe.Pointer(&b[0]))%align == 0
}

// blocks runs f over [0, n) in BlockSize pieces, Parallel at a time; the first error wins.
func blocks(n int, f func(off, end int) error) error { return pieces(n, BlockSize, f) }

// pieces runs f over [0, n) in pieces of step, Parallel at a time; the first error wins.
func pieces(n, step int, f func(off, end int) error) error {
	if n <= step {
		return f(0, n)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ferr error
	)
	sem := make(chan struct{}, Parallel)
	for off := 0; off < n; off += step {
		end := min(off+step, n)
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(off, end); err != nil {
				mu.Lock()
				if ferr == nil {
					ferr = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return ferr
}

// Write stores data as the object key under root/rel: a temporary file in the same directory,
// written, synced, then renamed. It returns the payload checksum.
func Write(root, rel, key string, data []byte, opt Options) (uint32, error) {
	if len(key) > HeaderSize-36 {
		return 0, api.Errorf(api.INVALID_KEY, "key of %d bytes is too long for the G3 tier", len(key))
	}
	path := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return 0, api.Errorf(api.FILE_WRITE_FAIL, "create G3 directory: %v", err)
	}
	sum := Checksum(data)
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	f, direct, err := openWrite(tmp, opt.Direct && isAligned(data))
	if err != nil {
		return 0, api.Errorf(api.FILE_OPEN_FAIL, "create %s: %v", tmp, err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	io := opt.io()
	if err := io.WriteAt(f, header(key, uint64(len(data)), sum), 0); err != nil {
		return 0, api.Errorf(api.FILE_WRITE_FAIL, "write %s: %v", tmp, err)
	}
	body := data
	var tail []byte
	if direct {
		// O_DIRECT needs whole blocks: the aligned prefix goes straight from data, the rest
		// through a padded aligned copy.
		cut := len(data) &^ (align - 1)
		body = data[:cut]
		if cut < len(data) {
			tail = alignedBuf(align)
			copy(tail, data[cut:])
		}
	} else if pad := (align - len(data)%align) % align; pad > 0 {
		tail = make([]byte, pad)
	}
	err = blocks(len(body), func(off, end int) error { return io.WriteAt(f, body[off:end], int64(HeaderSize+off)) })
	if err == nil && tail != nil {
		err = io.WriteAt(f, tail, int64(HeaderSize+len(body)))
	}
	if err != nil {
		return 0, api.Errorf(api.FILE_WRITE_FAIL, "write %s: %v", tmp, err)
	}
	if !opt.NoSync {
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return 0, api.Errorf(api.FILE_WRITE_FAIL, "sync %s: %v", tmp, err)
		}
	}
	if err := f.Close(); err != nil {
		return 0, api.Errorf(api.FILE_WRITE_FAIL, "close %s: %v", tmp, err)
	}
	ok = true
	if err := renameNoReplace(tmp, path); err != nil {
		os.Remove(tmp)
		if errors.Is(err, fs.ErrExist) {
			return 0, ErrExists
		}
		return 0, api.Errorf(api.FILE_WRITE_FAIL, "rename %s: %v", tmp, err)
	}
	return sum, nil
}

// ErrExists is Write's answer when the file is already in place: a file, once renamed into
// place, is never replaced (a second writer of the same move must not tear the first's file).
var ErrExists = api.Errorf(api.FILE_WRITE_FAIL, "the G3 file is already in place")

// renameNoReplace renames tmp to path unless path exists (fs.ErrExist then).
func renameNoReplace(tmp, path string) error {
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, path, unix.RENAME_NOREPLACE)
	if err == nil || errors.Is(err, unix.EEXIST) {
		if err != nil {
			return fs.ErrExist
		}
		return nil
	}
	// No RENAME_NOREPLACE on this filesystem: a hard link fails the same way if path exists.
	if lerr := os.Link(tmp, path); lerr == nil {
		return os.Remove(tmp)
	} else if errors.Is(lerr, fs.ErrExist) {
		return fs.ErrExist
	}
	if _, serr := os.Stat(path); serr == nil {
		return fs.ErrExist
	}
	return os.Rename(tmp, path)
}

func openWrite(path string, direct bool) (*os.File, bool, error) {
	flags := os.O_CREATE | os.O_TRUNC | os.O_WRONLY
	if direct {
		if f, err := os.OpenFile(path, flags|syscall.O_DIRECT, 0o644); err == nil {
			return f, true, nil
		}
	}
	f, err := os.OpenFile(path, flags, 0o644)
	return f, false, err
}

// Read reads the object key (size bytes, checksum sum as the master recorded it) from
// root/rel into dst (len(dst) == size). Any mismatch — a missing file (FILE_NOT_FOUND), a short
// file, a header naming another key or size, a payload whose checksum differs
// (CHECKSUM_MISMATCH) — is an error; dst's contents are then undefined.
func Read(root, rel, key string, sum uint32, dst []byte, opt Options) error {
	return ReadAt(root, rel, 0, key, sum, dst, opt)
}

// ReadAt is Read of the object whose header starts at off (an object packed in a bucket file).
func ReadAt(root, rel string, off int64, key string, sum uint32, dst []byte, opt Options) error {
	path := filepath.Join(root, rel)
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return api.Errorf(api.FILE_NOT_FOUND, "G3 file %s of key %q is missing", rel, key)
		}
		return api.Errorf(api.FILE_OPEN_FAIL, "open G3 file %s: %v", rel, err)
	}
	defer f.Close()
	io := opt.io()
	h := alignedBuf(HeaderSize)
	if err := io.ReadAt(f, h, off); err != nil {
		return api.Errorf(api.FILE_READ_FAIL, "G3 file %s of key %q: header unreadable (torn file?): %v", rel, key, err)
	}
	ver, err := checkHeader(h, rel, key, len(dst), sum)
	if err != nil {
		return err
	}
	err = blocks(len(dst), func(o, end int) error { return io.ReadAt(f, dst[o:end], off+int64(HeaderSize+o)) })
	if err != nil {
		return api.Errorf(api.FILE_READ_FAIL, "G3 file %s of key %q: payload unreadable (torn file?): %v", rel, key, err)
	}
	if checksumV(ver, dst) != sum {
		return api.Errorf(api.CHECKSUM_MISMATCH, "G3 file %s of key %q: payload checksum mismatch", rel, key)
	}
	return nil
}

// Want is one object ReadMany reads from a file: the offset of its header, its key and the
// checksum the master recorded, into Dst (len(Dst) is its size).
type Want struct {
	Offset int64
	Key    string
	Sum    uint32
	Dst    []byte
}

// ReadMany reads several objects of one file (a bucket's) with one open and, for objects that
// lie back to back, one preadv per run straight into their destinations (the header blocks and
// padding into a scratch arena): a batch get of objects that moved to G3 together costs a few
// system calls instead of three per object. Each object is verified as ReadAt verifies it;
// errs[i] is wants[i]'s error (nil: its bytes are in Dst). Without a [VectorReadIO] it reads
// each object with ReadAt.
func ReadMany(root, rel string, wants []Want, opt Options) []error {
	errs := make([]error, len(wants))
	vio, ok := opt.io().(VectorReadIO)
	if !ok {
		for i, w := range wants {
			errs[i] = ReadAt(root, rel, w.Offset, w.Key, w.Sum, w.Dst, opt)
		}
		return errs
	}
	f, err := os.Open(filepath.Join(root, rel))
	if err != nil {
		for i, w := range wants {
			if errors.Is(err, fs.ErrNotExist) {
				errs[i] = api.Errorf(api.FILE_NOT_FOUND, "G3 file %s of key %q is missing", rel, w.Key)
			} else {
				errs[i] = api.Errorf(api.FILE_OPEN_FAIL, "open G3 file %s: %v", rel, err)
			}
		}
		return errs
	}
	defer f.Close()
	order := make([]int, len(wants))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(wants[a].Offset, wants[b].Offset) })
	scratch := alignedBuf(len(wants) * HeaderSize)
	// Regions: objects back to back in the file. Regions are read Parallel at a time (objects
	// scattered over a bucket: a disk serves several requests faster than one after the other);
	// each region is read front to back in preadv calls of about readRun bytes, so the kernel
	// sees a sequential reader and reads ahead in large requests, past the end of this read too.
	// One large preadv per region would be read as it stands, in requests of a few hundred KiB
	// (measured on a virtio disk: 2.2 MiB regions read 1.6x faster in 128 KiB calls).
	var regions [][]int
	for len(order) > 0 {
		n := 1
		for n < len(order) {
			prev, next := wants[order[n-1]], wants[order[n]]
			if next.Offset != prev.Offset+int64(HeaderSize+padded(len(prev.Dst))) {
				break
			}
			n++
		}
		regions, order = append(regions, order[:n]), order[n:]
	}
	m := &manyRead{f: f, vio: vio, root: root, rel: rel, wants: wants, errs: errs, scratch: scratch, opt: opt}
	pieces(len(regions), 1, func(r, _ int) error {
		region := regions[r]
		var pad []byte // one discard buffer for the padding of every object of the region
		for len(region) > 0 {
			n, bytes := 1, HeaderSize+padded(len(wants[region[0]].Dst))
			for n < len(region) && 3*(n+1) <= maxIov && bytes+HeaderSize+padded(len(wants[region[n]].Dst)) <= readRun {
				bytes += HeaderSize + padded(len(wants[region[n]].Dst))
				n++
			}
			pad = m.run(region[:n], pad)
			region = region[n:]
		}
		return nil
	})
	return errs
}

// manyRead is one ReadMany call: the open file, what is wanted from it and where each object's
// header block and error go.
type manyRead struct {
	f         *os.File
	vio       VectorReadIO
	root, rel string
	wants     []Want
	errs      []error
	scratch   []byte // the header blocks, HeaderSize per want
	opt       Options
}

// run reads the objects run (back to back in the file) with one preadv: their header blocks
// into scratch, their payloads straight into their destinations, the padding after a payload
// into pad (allocated here when nil and returned, so a region reuses one), then verifies each.
func (m *manyRead) run(run []int, pad []byte) []byte {
	bufs := make([][]byte, 0, 3*len(run))
	for _, i := range run {
		dst := m.wants[i].Dst
		bufs = append(bufs, m.scratch[i*HeaderSize:(i+1)*HeaderSize])
		if len(dst) > 0 {
			bufs = append(bufs, dst)
		}
		if p := padded(len(dst)) - len(dst); p > 0 {
			if pad == nil {
				pad = alignedBuf(align)
			}
			bufs = append(bufs, pad[:p])
		}
	}
	rerr := m.vio.ReadvAt(m.f, bufs, m.wants[run[0]].Offset)
	for _, i := range run {
		w := m.wants[i]
		if rerr != nil { // a short (torn) file: each object of the run on its own, for its own error
			m.errs[i] = ReadAt(m.root, m.rel, w.Offset, w.Key, w.Sum, w.Dst, m.opt)
			continue
		}
		ver, err := checkHeader(m.scratch[i*HeaderSize:(i+1)*HeaderSize], m.rel, w.Key, len(w.Dst), w.Sum)
		if m.errs[i] = err; err == nil && checksumV(ver, w.Dst) != w.Sum {
			m.errs[i] = api.Errorf(api.CHECKSUM_MISMATCH, "G3 file %s of key %q: payload checksum mismatch", m.rel, w.Key)
		}
	}
	return pad
}

// Remove deletes root/rel; a file already gone is not an error. Empty hash directories are
// left in place (other objects come and go there).
func Remove(root, rel string) error {
	if rel == "" || strings.Contains(rel, "..") {
		return fmt.Errorf("refusing to remove G3 path %q", rel)
	}
	if err := os.Remove(filepath.Join(root, rel)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// FSCapacity is the size of the filesystem holding root (0 when unknown).
func FSCapacity(root string) uint64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(root, &st); err != nil {
		return 0
	}
	return st.Blocks * uint64(st.Bsize)
}

// CheckRoot creates root if needed and checks that files can be created in it.
func CheckRoot(root string) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(root, ".probe-*")
	if err != nil {
		return fmt.Errorf("%s is not writable: %w", root, err)
	}
	f.Close()
	return os.Remove(f.Name())
}

// BucketMax is the largest object packed into a bucket file; BucketBytes bounds a bucket.
const (
	BucketMax   = 256 << 10
	BucketBytes = 8 << 20
)

// Entry is one object of a bucket file.
type Entry struct {
	Key  string
	Data []byte
}

// Placed is where WriteBucket put an entry: the offset of its header and its checksum.
type Placed struct {
	Offset int64
	Sum    uint32
}

// WriteBucket packs small objects into one file (each entry a header block and its padded
// payload, back to back), written under a temporary name and renamed into place like Write.
// One file per small object would cost a file creation each (about 1 ms on a loaded VM disk,
// more on a DFS); a bucket costs one.
//
// With an [IO] that is also a [VectorIO] (PosixIO is), the payloads go to the file straight
// from the entries' memory (pwritev of header, payload and padding), so a bucket costs one
// pass over its bytes (the checksums) instead of three (a fresh buffer's page faults, the copy,
// the checksums): measured on a 2-core VM, 11–17 ms of the 16–24 ms an 8 MiB bucket took went to
// building that buffer. Under O_DIRECT a payload that does not start at a 4 KiB boundary, and
// the last partial block of one that does, are copied into aligned blocks first.
func WriteBucket(root, rel string, entries []Entry, opt Options) ([]Placed, error) {
	path := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, api.Errorf(api.FILE_WRITE_FAIL, "create G3 directory: %v", err)
	}
	var size int
	out := make([]Placed, len(entries))
	for i, e := range entries {
		if len(e.Key) > HeaderSize-36 {
			return nil, api.Errorf(api.INVALID_KEY, "key of %d bytes is too long for the G3 tier", len(e.Key))
		}
		out[i] = Placed{Offset: int64(size)}
		size += HeaderSize + padded(len(e.Data))
	}
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	io := opt.io()
	vio, vector := io.(VectorIO)
	f, direct, err := openWrite(tmp, opt.Direct)
	if err != nil {
		return nil, api.Errorf(api.FILE_OPEN_FAIL, "create %s: %v", tmp, err)
	}
	if vector {
		err = writeChunks(bucketChunks(entries, direct), func(c chunk) error {
			// The checksums of the objects whose headers this chunk holds, just before it is
			// written: one chunk's checksums overlap the others' writes.
			for _, h := range c.headers {
				e := entries[h.entry]
				out[h.entry].Sum = Checksum(e.Data)
				putHeader(h.block, e.Key, uint64(len(e.Data)), out[h.entry].Sum)
			}
			return vio.WritevAt(f, c.bufs, c.off)
		})
	} else {
		buf := alignedBuf(size)
		for i, e := range entries {
			out[i].Sum = Checksum(e.Data)
			off := int(out[i].Offset)
			putHeader(buf[off:off+HeaderSize], e.Key, uint64(len(e.Data)), out[i].Sum)
			copy(buf[off+HeaderSize:], e.Data)
		}
		err = blocks(len(buf), func(o, end int) error { return io.WriteAt(f, buf[o:end], int64(o)) })
	}
	if err == nil && !opt.NoSync {
		err = syscall.Fdatasync(int(f.Fd()))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return nil, api.Errorf(api.FILE_WRITE_FAIL, "write %s: %v", tmp, err)
	}
	if err := renameNoReplace(tmp, path); err != nil {
		os.Remove(tmp)
		if errors.Is(err, fs.ErrExist) {
			return nil, ErrExists
		}
		return nil, api.Errorf(api.FILE_WRITE_FAIL, "rename %s: %v", tmp, err)
	}
	return out, nil
}

// padded is n rounded up to the 4 KiB blocks a payload occupies in a file.
func padded(n int) int { return (n + align - 1) &^ (align - 1) }

// chunk is one vectored write: bufs back to back at file offset off. headers are the header
// blocks it holds (among bufs), filled just before the write.
type chunk struct {
	off     int64
	bufs    [][]byte
	headers []chunkHeader
}

// chunkHeader is the header block of entry entry.
type chunkHeader struct {
	entry int
	block []byte
}

// maxIov bounds the buffers of one pwritev (IOV_MAX is 1024 on Linux).
const maxIov = 1024

// readRun bounds the bytes of one preadv of ReadMany (small enough that the kernel treats a
// region read in such calls as a sequential stream and reads ahead), bucketChunk those of one pwritev of
// WriteBucket (small enough that the checksums of the first chunk, computed just before its
// write, delay the bucket's first write little).
const (
	readRun     = 128 << 10
	bucketChunk = 1 << 20
)

// bucketChunks lays a bucket out as vectored writes of about bucketChunk bytes each: per entry
// its header block (left empty), its payload and the zeros up to the next 4 KiB boundary.
// Headers, and under direct the payload bytes that cannot be written from where they lie, are
// staged in one aligned arena.
func bucketChunks(entries []Entry, direct bool) []chunk {
	staged := 0
	for _, e := range entries {
		staged += HeaderSize
		switch {
		case direct && !isAligned(e.Data):
			staged += padded(len(e.Data))
		case len(e.Data)%align != 0:
			staged += align // the last partial block, padded
		}
	}
	arena := alignedBuf(staged)
	take := func(n int) []byte {
		b := arena[:n:n]
		arena = arena[n:]
		return b
	}
	var (
		out []chunk
		cur chunk
		n   int
	)
	add := func(b []byte) {
		if len(cur.bufs) == maxIov || n >= bucketChunk {
			out = append(out, cur)
			cur = chunk{off: cur.off + int64(n)}
			n = 0
		}
		cur.bufs = append(cur.bufs, b)
		n += len(b)
	}
	for i, e := range entries {
		h := take(HeaderSize)
		add(h)
		cur.headers = append(cur.headers, chunkHeader{entry: i, block: h})
		data := e.Data
		if direct && !isAligned(data) {
			b := take(padded(len(data)))
			copy(b, data)
			add(b)
			continue
		}
		if cut := len(data) &^ (align - 1); cut > 0 {
			add(data[:cut])
			data = data[cut:]
		}
		if len(data) > 0 {
			b := take(align)
			copy(b, data)
			add(b)
		}
	}
	if len(cur.bufs) > 0 {
		out = append(out, cur)
	}
	return out
}

// writeChunks runs write for every chunk, up to Parallel at once, and returns the first error.
func writeChunks(chunks []chunk, write func(chunk) error) error {
	return pieces(len(chunks), 1, func(i, _ int) error { return write(chunks[i]) })
}

// SweepTemps removes the temporary files under root (a writer's "<file>.<pid>.tmp", see
// Write) last modified more than olderThan ago: the leftovers of writers killed mid-write.
// Removing one a slow writer still holds is safe: its rename then fails and the move is
// reported as failed, so no reference to a partial file can arise. It returns how many it
// removed.
func SweepTemps(root string, olderThan time.Duration) (int, error) {
	cutoff := time.Now().Add(-olderThan)
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walked
			}
			return err
		}
		if d.IsDir() || !d.Type().IsRegular() || !strings.HasSuffix(d.Name(), ".tmp") {
			return nil
		}
		info, err := d.Info()
		if err != nil || info.ModTime().After(cutoff) {
			return nil
		}
		if os.Remove(p) == nil {
			n++
		}
		return nil
	})
	return n, err
}

// checkHeader verifies an object's header block: magic, a known version, its own checksum, and
// that it names key with size bytes of payload checksum sum. It returns the format version.
func checkHeader(h []byte, rel, key string, size int, sum uint32) (uint32, error) {
	ver := binary.LittleEndian.Uint32(h[8:])
	switch {
	case string(h[:8]) != magic || (ver != version && ver != version1):
		return 0, api.Errorf(api.CHECKSUM_MISMATCH, "G3 file %s of key %q: not an object file", rel, key)
	case checksumV(ver, h[:HeaderSize-4]) != binary.LittleEndian.Uint32(h[HeaderSize-4:]):
		return 0, api.Errorf(api.CHECKSUM_MISMATCH, "G3 file %s of key %q: header checksum mismatch", rel, key)
	}
	fsize := binary.LittleEndian.Uint64(h[12:])
	fsum := binary.LittleEndian.Uint32(h[20:])
	klen := binary.LittleEndian.Uint32(h[24:])
	if int(klen) > HeaderSize-36 || string(h[32:32+klen]) != key || fsize != uint64(size) || fsum != sum {
		return 0, api.Errorf(api.CHECKSUM_MISMATCH, "G3 file %s of key %q: header names another object", rel, key)
	}
	return ver, nil
}
