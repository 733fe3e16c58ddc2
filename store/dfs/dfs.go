package dfs

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
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
	version  = 1
	align    = 4096
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC-32C of b (the checksum files and the master record).
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// PathFor is the file (relative to the root) of generation gen of key: two levels of
// directories from the key's hash, so no directory grows too large, and the generation so that
// a re-put key never shares a file with its predecessor.
func PathFor(key string, gen uint64) string {
	h := sha256.Sum256([]byte(key))
	x := hex.EncodeToString(h[:])
	return filepath.Join(x[:2], x[2:4], fmt.Sprintf("%s-%d.mcobj", x[:32], gen))
}

// IO is the block interface the tier writes and reads files through (the seam for a 3FS
// USRBIO backend).
type IO interface {
	WriteAt(f *os.File, b []byte, off int64) error
	ReadAt(f *os.File, b []byte, off int64) error
}

// PosixIO is pwrite/pread.
type PosixIO struct{}

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
	copy(h, magic)
	binary.LittleEndian.PutUint32(h[8:], version)
	binary.LittleEndian.PutUint64(h[12:], size)
	binary.LittleEndian.PutUint32(h[20:], sum)
	binary.LittleEndian.PutUint32(h[24:], uint32(len(key)))
	n := copy(h[32:HeaderSize-4], key)
	_ = n
	binary.LittleEndian.PutUint32(h[HeaderSize-4:], crc32.Checksum(h[:HeaderSize-4], castagnoli))
	return h
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
func blocks(n int, f func(off, end int) error) error {
	if n <= BlockSize {
		return f(0, n)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ferr error
	)
	sem := make(chan struct{}, Parallel)
	for off := 0; off < n; off += BlockSize {
		end := min(off+BlockSize, n)
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
	if err := checkHeader(h, rel, key, len(dst), sum); err != nil {
		return err
	}
	err = blocks(len(dst), func(o, end int) error { return io.ReadAt(f, dst[o:end], off+int64(HeaderSize+o)) })
	if err != nil {
		return api.Errorf(api.FILE_READ_FAIL, "G3 file %s of key %q: payload unreadable (torn file?): %v", rel, key, err)
	}
	if Checksum(dst) != sum {
		return api.Errorf(api.CHECKSUM_MISMATCH, "G3 file %s of key %q: payload checksum mismatch", rel, key)
	}
	return nil
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
		size += HeaderSize + (len(e.Data)+align-1)&^(align-1)
	}
	buf := alignedBuf(size)
	for i, e := range entries {
		out[i].Sum = Checksum(e.Data)
		off := int(out[i].Offset)
		copy(buf[off:], header(e.Key, uint64(len(e.Data)), out[i].Sum))
		copy(buf[off+HeaderSize:], e.Data)
	}
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	f, _, err := openWrite(tmp, opt.Direct)
	if err != nil {
		return nil, api.Errorf(api.FILE_OPEN_FAIL, "create %s: %v", tmp, err)
	}
	io := opt.io()
	err = blocks(len(buf), func(o, end int) error { return io.WriteAt(f, buf[o:end], int64(o)) })
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

// checkHeader verifies an object's header block: magic, version, its own checksum, and that it
// names key with size bytes of payload checksum sum.
func checkHeader(h []byte, rel, key string, size int, sum uint32) error {
	switch {
	case string(h[:8]) != magic || binary.LittleEndian.Uint32(h[8:]) != version:
		return api.Errorf(api.CHECKSUM_MISMATCH, "G3 file %s of key %q: not an object file", rel, key)
	case crc32.Checksum(h[:HeaderSize-4], castagnoli) != binary.LittleEndian.Uint32(h[HeaderSize-4:]):
		return api.Errorf(api.CHECKSUM_MISMATCH, "G3 file %s of key %q: header checksum mismatch", rel, key)
	}
	fsize := binary.LittleEndian.Uint64(h[12:])
	fsum := binary.LittleEndian.Uint32(h[20:])
	klen := binary.LittleEndian.Uint32(h[24:])
	if int(klen) > HeaderSize-36 || string(h[32:32+klen]) != key || fsize != uint64(size) || fsum != sum {
		return api.Errorf(api.CHECKSUM_MISMATCH, "G3 file %s of key %q: header names another object", rel, key)
	}
	return nil
}
