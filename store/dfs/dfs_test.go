package dfs

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
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
