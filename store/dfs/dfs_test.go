package dfs

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/store/api"
)

func TestWriteReadRoundTrip(t *testing.T) {
	root := t.TempDir()
	for _, n := range []int{1, 4095, 4096, 64 << 10, BlockSize*2 + 17} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(rand.Uint32())
		}
		for _, direct := range []bool{false, true} {
			rel := PathFor("k", uint64(n))
			if direct {
				rel += "d"
			}
			src := data
			if direct {
				src = alignedBuf(n)
				copy(src, data)
			}
			sum, err := Write(root, rel, "k", src, Options{Direct: direct})
			if err != nil {
				t.Fatalf("write %d: %v", n, err)
			}
			if sum != Checksum(data) {
				t.Fatalf("checksum %x, want %x", sum, Checksum(data))
			}
			got := make([]byte, n)
			if err := Read(root, rel, "k", sum, got, Options{}); err != nil {
				t.Fatalf("read %d: %v", n, err)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("read %d bytes back differently", n)
			}
			st, _ := os.Stat(filepath.Join(root, rel))
			if want := int64(HeaderSize + (n+4095)/4096*4096); st.Size() != want {
				t.Fatalf("file size %d, want %d", st.Size(), want)
			}
		}
	}
	if m, _ := filepath.Glob(filepath.Join(root, "*", "*", "*.tmp")); len(m) != 0 {
		t.Fatalf("temporary files left: %v", m)
	}
}

func TestWriteNeverReplaces(t *testing.T) {
	root := t.TempDir()
	rel := PathFor("k", 1)
	sum, err := Write(root, rel, "k", []byte("first"), Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Write(root, rel, "k", []byte("other"), Options{NoSync: true}); err != ErrExists {
		t.Fatalf("second write: %v, want ErrExists", err)
	}
	got := make([]byte, 5)
	if err := Read(root, rel, "k", sum, got, Options{}); err != nil || string(got) != "first" {
		t.Fatalf("read %q %v", got, err)
	}
	if m, _ := filepath.Glob(filepath.Join(root, "*", "*", "*.tmp")); len(m) != 0 {
		t.Fatalf("temporary files left: %v", m)
	}
}

func TestReadDetectsDamage(t *testing.T) {
	root := t.TempDir()
	data := bytes.Repeat([]byte("abcdefgh"), 3000)
	rel := PathFor("key", 1)
	sum, err := Write(root, rel, "key", data, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, rel)
	dst := make([]byte, len(data))
	if err := Read(root, rel, "other", sum, dst, Options{}); api.CodeOf(err) != api.CHECKSUM_MISMATCH {
		t.Fatalf("wrong key: %v", err)
	}
	if err := Read(root, rel, "key", sum+1, dst, Options{}); api.CodeOf(err) != api.CHECKSUM_MISMATCH {
		t.Fatalf("wrong sum: %v", err)
	}
	f, _ := os.OpenFile(path, os.O_RDWR, 0)
	f.WriteAt([]byte{'X'}, HeaderSize+100)
	f.Close()
	if err := Read(root, rel, "key", sum, dst, Options{}); api.CodeOf(err) != api.CHECKSUM_MISMATCH {
		t.Fatalf("corrupt payload: %v", err)
	}
	os.Truncate(path, HeaderSize+10)
	if err := Read(root, rel, "key", sum, dst, Options{}); api.CodeOf(err) != api.FILE_READ_FAIL {
		t.Fatalf("torn file: %v", err)
	}
	if err := Remove(root, rel); err != nil {
		t.Fatal(err)
	}
	if err := Read(root, rel, "key", sum, dst, Options{}); api.CodeOf(err) != api.FILE_NOT_FOUND {
		t.Fatalf("missing file: %v", err)
	}
	if err := Remove(root, rel); err != nil {
		t.Fatalf("second remove: %v", err)
	}
}

func TestBucketRoundTrip(t *testing.T) {
	root := t.TempDir()
	var entries []Entry
	for i := range 5 {
		entries = append(entries, Entry{Key: string(rune('a' + i)), Data: bytes.Repeat([]byte{byte(i)}, 1000*i+1)})
	}
	placed, err := WriteBucket(root, "b/x.mcbkt", entries, Options{NoSync: true, Direct: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range entries {
		got := make([]byte, len(e.Data))
		if err := ReadAt(root, "b/x.mcbkt", placed[i].Offset, e.Key, placed[i].Sum, got, Options{}); err != nil || !bytes.Equal(got, e.Data) {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
	got := make([]byte, len(entries[1].Data))
	if err := ReadAt(root, "b/x.mcbkt", placed[2].Offset, "b", placed[1].Sum, got, Options{}); api.CodeOf(err) != api.CHECKSUM_MISMATCH {
		t.Fatalf("wrong offset: %v", err)
	}
	if _, err := WriteBucket(root, "b/x.mcbkt", entries, Options{NoSync: true}); err != ErrExists {
		t.Fatalf("rewrite: %v", err)
	}
}

func TestSweepTempsRemovesOnlyStaleTemporaries(t *testing.T) {
	root := t.TempDir()
	rel := PathFor("k", 1)
	if _, err := Write(root, rel, "k", []byte("value"), Options{NoSync: true}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, filepath.Dir(rel))
	stale := filepath.Join(dir, "x-2.mcobj.123.tmp")
	fresh := filepath.Join(dir, "x-3.mcobj.124.tmp")
	for _, p := range []string{stale, fresh} {
		if err := os.WriteFile(p, []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	n, err := SweepTemps(root, 10*time.Minute)
	if err != nil || n != 1 {
		t.Fatalf("SweepTemps = %d, %v; want 1 removed", n, err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale temporary still there: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Fatalf("fresh temporary removed: %v", err)
	}
	got := make([]byte, 5)
	if err := Read(root, rel, "k", Checksum([]byte("value")), got, Options{}); err != nil || string(got) != "value" {
		t.Fatalf("the object file after the sweep: %q, %v", got, err)
	}
}

// plainIO is an IO without WritevAt: WriteBucket then builds the file in one buffer.
type plainIO struct{ PosixIO }

func (plainIO) WriteAt(f *os.File, b []byte, off int64) error { return PosixIO{}.WriteAt(f, b, off) }

// TestBucketVectoredMatchesCopied writes the same entries through the vectored path (payloads
// from where they lie: aligned, unaligned, with partial last blocks, more buffers than one
// pwritev takes and more bytes than one block) and through the copying path, with and without
// O_DIRECT, and checks the files are identical byte for byte and every entry reads back.
func TestBucketVectoredMatchesCopied(t *testing.T) {
	root := t.TempDir()
	arena := alignedBuf(64 << 20)
	for i := range arena {
		arena[i] = byte(i*31 + i>>12)
	}
	var entries []Entry
	off := 0
	for i := range 700 {
		var n int
		switch i % 4 {
		case 0:
			n = 64 << 10 // aligned start, whole blocks
		case 1:
			n = 5000 // aligned start, partial last block
		case 2:
			off += 64 // unaligned start
			n = 9000
		default:
			n = 1
		}
		entries = append(entries, Entry{Key: fmt.Sprintf("k%d", i), Data: arena[off : off+n]})
		off = padded(off + n)
	}
	for _, direct := range []bool{false, true} {
		a, err := WriteBucket(root, fmt.Sprintf("v%v.mcbkt", direct), entries, Options{NoSync: true, Direct: direct})
		if err != nil {
			t.Fatal(err)
		}
		b, err := WriteBucket(root, fmt.Sprintf("c%v.mcbkt", direct), entries, Options{NoSync: true, Direct: direct, IO: plainIO{}})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(a, b) {
			t.Fatal("the two paths placed the entries differently")
		}
		va, _ := os.ReadFile(filepath.Join(root, fmt.Sprintf("v%v.mcbkt", direct)))
		cb, _ := os.ReadFile(filepath.Join(root, fmt.Sprintf("c%v.mcbkt", direct)))
		if len(va) == 0 || !bytes.Equal(va, cb) {
			t.Fatalf("direct=%v: vectored file (%d bytes) differs from the copied one (%d bytes)", direct, len(va), len(cb))
		}
		for i, e := range entries {
			got := make([]byte, len(e.Data))
			if err := ReadAt(root, fmt.Sprintf("v%v.mcbkt", direct), a[i].Offset, e.Key, a[i].Sum, got, Options{}); err != nil || !bytes.Equal(got, e.Data) {
				t.Fatalf("direct=%v entry %d: %v", direct, i, err)
			}
		}
	}
}

// TestReadMany reads objects of a bucket in one call (all of them, a scattered subset, through
// an IO without preadv) and checks each byte for byte; a corrupt payload, a truncated file and a
// missing file are errors for exactly the objects concerned.
func TestReadMany(t *testing.T) {
	root := t.TempDir()
	var entries []Entry
	for i := range 40 {
		n := []int{64 << 10, 5000, 1, 300 << 10}[i%4]
		if i%4 == 3 {
			n = 200 << 10
		}
		entries = append(entries, Entry{Key: fmt.Sprintf("k%d", i), Data: bytes.Repeat([]byte{byte(i + 1)}, n)})
	}
	placed, err := WriteBucket(root, "b.mcbkt", entries, Options{NoSync: true, Direct: true})
	if err != nil {
		t.Fatal(err)
	}
	wants := func(idx []int) []Want {
		var ws []Want
		for _, i := range idx {
			ws = append(ws, Want{Offset: placed[i].Offset, Key: entries[i].Key, Sum: placed[i].Sum, Dst: make([]byte, len(entries[i].Data))})
		}
		return ws
	}
	all := make([]int, len(entries))
	for i := range all {
		all[i] = len(all) - 1 - i // out of file order
	}
	scattered := []int{3, 7, 8, 9, 21, 0, 39}
	for _, c := range []struct {
		name string
		idx  []int
		opt  Options
	}{{"all", all, Options{}}, {"scattered", scattered, Options{}}, {"without preadv", scattered, Options{IO: plainIO{}}}} {
		ws := wants(c.idx)
		for j, err := range ReadMany(root, "b.mcbkt", ws, c.opt) {
			if err != nil || !bytes.Equal(ws[j].Dst, entries[c.idx[j]].Data) {
				t.Fatalf("%s: object %d: %v", c.name, c.idx[j], err)
			}
		}
	}
	// Corrupt one payload byte of object 8: only it fails.
	path := filepath.Join(root, "b.mcbkt")
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff}, placed[8].Offset+HeaderSize+10); err != nil {
		t.Fatal(err)
	}
	// Truncate the file inside object 30's header: 30 and later fail, earlier ones read.
	if err := f.Truncate(placed[30].Offset + 100); err != nil {
		t.Fatal(err)
	}
	f.Close()
	ws := wants(all)
	for j, err := range ReadMany(root, "b.mcbkt", ws, Options{}) {
		i := all[j]
		switch {
		case i == 8:
			if api.CodeOf(err) != api.CHECKSUM_MISMATCH {
				t.Fatalf("corrupt object 8: %v", err)
			}
		case i >= 30:
			if api.CodeOf(err) != api.FILE_READ_FAIL {
				t.Fatalf("object %d past the truncation: %v", i, err)
			}
		case err != nil || !bytes.Equal(ws[j].Dst, entries[i].Data):
			t.Fatalf("object %d before the truncation: %v", i, err)
		}
	}
	for _, err := range ReadMany(root, "missing.mcbkt", wants(scattered), Options{}) {
		if api.CodeOf(err) != api.FILE_NOT_FOUND {
			t.Fatalf("missing file: %v", err)
		}
	}
}

func TestBucketPathFor(t *testing.T) {
	p := PathFor("key", 42)
	b := BucketPathFor(p)
	if filepath.Dir(b) != filepath.Dir(filepath.Dir(p)) || filepath.Base(b) != strings.TrimSuffix(filepath.Base(p), ".mcobj")+".mcbkt" {
		t.Fatalf("bucket path of %s: %s, want the same name with .mcbkt one directory up", p, b)
	}
}

// TestReadsFormatVersion1: files written before the checksum became CRC-32 (format version 1,
// CRC-32C in the header and for the payload) are still read, alone and in a batch, and a
// version-1 file whose payload does not match its CRC-32C is still a checksum error.
func TestReadsFormatVersion1(t *testing.T) {
	root := t.TempDir()
	data := make([]byte, 3*4096+100)
	for i := range data {
		data[i] = byte(i * 31)
	}
	v1 := crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli))
	if v1 == Checksum(data) || !ChecksumMatches(data, v1) || !ChecksumMatches(data, Checksum(data)) || ChecksumMatches(data, v1+1) {
		t.Fatal("ChecksumMatches must accept CRC-32 and CRC-32C and nothing else")
	}
	file := alignedBuf(HeaderSize + padded(len(data)))
	putHeaderV(file[:HeaderSize], version1, "old", uint64(len(data)), v1)
	copy(file[HeaderSize:], data)
	if err := os.WriteFile(filepath.Join(root, "old.mcobj"), file, 0o644); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if err := Read(root, "old.mcobj", "old", v1, got, Options{}); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read of a version-1 file: %v (bytes equal: %v)", err, bytes.Equal(got, data))
	}
	clear(got)
	if errs := ReadMany(root, "old.mcobj", []Want{{Offset: 0, Key: "old", Sum: v1, Dst: got}}, Options{}); errs[0] != nil || !bytes.Equal(got, data) {
		t.Fatalf("batch read of a version-1 file: %v", errs[0])
	}
	file[HeaderSize+5] ^= 1
	os.WriteFile(filepath.Join(root, "old.mcobj"), file, 0o644)
	if err := Read(root, "old.mcobj", "old", v1, got, Options{}); api.CodeOf(err) != api.CHECKSUM_MISMATCH {
		t.Fatalf("read of a damaged version-1 file: %v, want CHECKSUM_MISMATCH", err)
	}
	// An unknown version is not an object file.
	putHeaderV(file[:HeaderSize], 7, "old", uint64(len(data)), v1)
	os.WriteFile(filepath.Join(root, "old.mcobj"), file, 0o644)
	if err := Read(root, "old.mcobj", "old", v1, got, Options{}); api.CodeOf(err) != api.CHECKSUM_MISMATCH || !strings.Contains(err.Error(), "not an object file") {
		t.Fatalf("read of a file of version 7: %v", err)
	}
}
