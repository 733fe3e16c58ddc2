package snapshot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mooncake-go/mooncake/internal/testsvc"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestLocalBackend(t *testing.T) {
	l, err := NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	testBackend(t, l)
	// Put leaves no temporary files behind.
	var stray []string
	filepath.WalkDir(l.Root(), func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), tmpPrefix) {
			stray = append(stray, p)
		}
		return nil
	})
	if len(stray) > 0 {
		t.Fatalf("temporary files left behind: %v", stray)
	}
}

func TestLocalListIgnoresTempFiles(t *testing.T) {
	l, _ := NewLocal(t.TempDir())
	ctx := context.Background()
	if err := l.Put(ctx, "d/x", []byte("1")); err != nil {
		t.Fatal(err)
	}
	// A writer that crashed before the rename.
	os.WriteFile(filepath.Join(l.Root(), "d", tmpPrefix+"x-123"), []byte("partial"), 0o644)
	names, err := l.List(ctx, "d/")
	if err != nil || len(names) != 1 || names[0] != "d/x" {
		t.Fatalf("List = %v, %v; want [d/x]", names, err)
	}
}

// TestOpenBackendLocalFromEnv: the local root and the S3 bucket the master fills from
// MOONCAKE_SNAPSHOT_LOCAL_PATH / MOONCAKE_SNAPSHOT_S3_BUCKET.
func TestOpenBackendLocalFromEnv(t *testing.T) {
	dir := t.TempDir()
	be, err := OpenBackend(context.Background(), "local", BackendOptions{LocalRoot: dir})
	if err != nil {
		t.Fatal(err)
	}
	if l := be.(*Local); l.Root() != dir {
		t.Fatalf("root = %s, want %s", l.Root(), dir)
	}
	// No directory configured: upstream's default (not opened here: it lies outside the test's
	// temporary directory).
	if got := (BackendOptions{}).localRoot(); got != "/tmp/mooncake_snapshots" {
		t.Fatalf("default local root = %q, want /tmp/mooncake_snapshots", got)
	}
	if _, err := OpenBackend(context.Background(), "ftp", BackendOptions{LocalRoot: dir}); err == nil {
		t.Fatal("unknown backend kind accepted")
	}
	if _, err := OpenBackend(context.Background(), "s3", BackendOptions{}); err == nil || !strings.Contains(err.Error(), "MOONCAKE_SNAPSHOT_S3_BUCKET") {
		t.Fatalf("want an error naming MOONCAKE_SNAPSHOT_S3_BUCKET, got %v", err)
	}
}

// testBackend checks the Backend contract on an empty backend.
func testBackend(t *testing.T, be Backend) {
	t.Helper()
	ctx := context.Background()
	if _, err := be.Get(ctx, "a/missing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a missing object: %v, want ErrNotFound", err)
	}
	for _, bad := range []string{"", "/abs", "a/../b", "a//b", "a/", "./a"} {
		if err := be.Put(ctx, bad, nil); err == nil {
			t.Fatalf("Put(%q) accepted a bad name", bad)
		}
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	objs := map[string][]byte{"a/1": []byte("one"), "a/2": {}, "a/b/3": big, "ab": []byte("x")}
	for n, v := range objs {
		if err := be.Put(ctx, n, v); err != nil {
			t.Fatalf("Put(%s): %v", n, err)
		}
	}
	for n, v := range objs {
		got, err := be.Get(ctx, n)
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("Get(%s) = %d bytes, %v; want %d bytes", n, len(got), err, len(v))
		}
	}
	if err := be.Put(ctx, "a/1", []byte("uno")); err != nil {
		t.Fatal(err)
	}
	if got, _ := be.Get(ctx, "a/1"); string(got) != "uno" {
		t.Fatalf("overwrite: got %q", got)
	}
	for prefix, want := range map[string]string{"a/": "a/1 a/2 a/b/3", "a": "a/1 a/2 a/b/3 ab", "a/b": "a/b/3", "zz/": ""} {
		got, err := be.List(ctx, prefix)
		if err != nil || strings.Join(got, " ") != want {
			t.Fatalf("List(%q) = %v, %v; want [%s]", prefix, got, err, want)
		}
	}
	if err := be.Delete(ctx, "a/b/3"); err != nil {
		t.Fatal(err)
	}
	if err := be.Delete(ctx, "a/b/3"); err != nil {
		t.Fatalf("deleting a missing object: %v", err)
	}
	if _, err := be.Get(ctx, "a/b/3"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
	if s := be.String(); s == "" {
		t.Fatal("empty String()")
	}
}

// testManager runs the Manager scenarios on an empty backend.
func testManager(t *testing.T, be Backend) {
	t.Helper()
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	met := NewMetrics()
	if err := met.Register(reg); err != nil {
		t.Fatal(err)
	}
	clock := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	m, err := NewManager(Config{Backend: be, ClusterID: "c1", Metrics: met,
		Now: func() time.Time { clock = clock.Add(time.Second); return clock }})
	if err != nil {
		t.Fatal(err)
	}

	// Empty: ErrNoSnapshot, nothing skipped.
	res, err := m.Restore(ctx)
	if !errors.Is(err, ErrNoSnapshot) || len(res.Skipped) != 0 {
		t.Fatalf("Restore on empty = %v (skipped %v), want ErrNoSnapshot", err, res.Skipped)
	}

	var ids []string
	for i, seq := range []uint64{10, 20, 20, 35} {
		man, err := m.Save(ctx, seq, []byte(fmt.Sprintf("state-%d", i)))
		if err != nil {
			t.Fatalf("Save %d: %v", i, err)
		}
		if man.LastAppliedSeq != seq || !strings.HasPrefix(man.Checksum, "sha256:") {
			t.Fatalf("manifest %+v", man)
		}
		ids = append(ids, man.ID)
	}
	// Retention 2: the two newest remain, in layout order.
	names, _ := be.List(ctx, RootDir+"/c1/")
	want := []string{
		RootDir + "/c1/" + ids[2] + "/data", RootDir + "/c1/" + ids[2] + "/manifest.json",
		RootDir + "/c1/" + ids[3] + "/data", RootDir + "/c1/" + ids[3] + "/manifest.json",
		RootDir + "/c1/latest.txt",
	}
	if strings.Join(names, "\n") != strings.Join(want, "\n") {
		t.Fatalf("objects after 4 saves:\n%s\nwant:\n%s", strings.Join(names, "\n"), strings.Join(want, "\n"))
	}
	if l, _ := m.Latest(ctx); l != ids[3] {
		t.Fatalf("latest.txt = %q, want %q", l, ids[3])
	}
	list, err := m.List(ctx)
	if err != nil || len(list) != 2 || list[0].ID != ids[3] {
		t.Fatalf("List = %+v, %v", list, err)
	}

	res, err = m.Restore(ctx)
	if err != nil || !res.FromLatest || string(res.Snapshot.Payload) != "state-3" || res.Snapshot.LastAppliedSeq != 35 {
		t.Fatalf("Restore = %+v, %v", res, err)
	}

	// Corrupt the newest payload: restore falls back to the previous one.
	if err := be.Put(ctx, RootDir+"/c1/"+ids[3]+"/data", []byte("state-3 but flipped")); err != nil {
		t.Fatal(err)
	}
	res, err = m.Restore(ctx)
	if err != nil || res.FromLatest || string(res.Snapshot.Payload) != "state-2" || len(res.Skipped) != 1 ||
		!strings.Contains(res.Skipped[0].Error(), ids[3]) {
		t.Fatalf("Restore with corrupt newest = %+v, %v", res, err)
	}
	// Same for a missing payload and a garbage manifest.
	be.Delete(ctx, RootDir+"/c1/"+ids[3]+"/data")
	if res, err = m.Restore(ctx); err != nil || string(res.Snapshot.Payload) != "state-2" {
		t.Fatalf("Restore with missing newest payload = %+v, %v", res, err)
	}
	be.Put(ctx, RootDir+"/c1/"+ids[3]+"/manifest.json", []byte("{not json"))
	if res, err = m.Restore(ctx); err != nil || string(res.Snapshot.Payload) != "state-2" {
		t.Fatalf("Restore with garbage newest manifest = %+v, %v", res, err)
	}
	// Everything corrupt: ErrNoSnapshot, with both reasons.
	be.Put(ctx, RootDir+"/c1/"+ids[2]+"/data", []byte("x"))
	res, err = m.Restore(ctx)
	if !errors.Is(err, ErrNoSnapshot) || len(res.Skipped) != 2 {
		t.Fatalf("Restore with all corrupt = %v, skipped %v", err, res.Skipped)
	}

	// An incomplete newer snapshot (payload, no manifest: a crash mid-save) is skipped and,
	// once older than a new save, deleted.
	man, err := m.Save(ctx, 50, []byte("state-50"))
	if err != nil {
		t.Fatal(err)
	}
	incomplete := makeID(60, clock.Add(time.Hour))
	be.Put(ctx, RootDir+"/c1/"+incomplete+"/data", []byte("half"))
	res, err = m.Restore(ctx)
	if err != nil || res.Snapshot.ID != man.ID || len(res.Skipped) != 1 {
		t.Fatalf("Restore with an incomplete newest = %+v, %v", res, err)
	}
	if _, err := m.Save(ctx, 70, []byte("state-70")); err != nil {
		t.Fatal(err)
	}
	if names, _ := be.List(ctx, RootDir+"/c1/"+incomplete); len(names) != 0 {
		t.Fatalf("incomplete snapshot not pruned: %v", names)
	}
	list, _ = m.List(ctx)
	if len(list) != 2 || list[0].LastAppliedSeq != 70 || list[1].LastAppliedSeq != 50 {
		t.Fatalf("List after pruning = %+v", list)
	}

	// Another cluster's folder is untouched and separate.
	m2, _ := NewManager(Config{Backend: be, ClusterID: "c2"})
	if _, err := m2.Restore(ctx); !errors.Is(err, ErrNoSnapshot) {
		t.Fatalf("cluster c2 sees c1's snapshots: %v", err)
	}

	if got := value(met.SaveSuccess); got != 6 {
		t.Fatalf("success counter = %v, want 6", got)
	}
	if got := value(met.RestoreFailure); got != 2 {
		t.Fatalf("restore failure counter = %v, want 2", got)
	}
	if got := value(met.LastAppliedSeq); got != 70 {
		t.Fatalf("last applied seq gauge = %v, want 70", got)
	}
	if fams, err := reg.Gather(); err != nil || len(fams) != 10 {
		t.Fatalf("gathered %d metric families, %v", len(fams), err)
	} else {
		for _, f := range fams {
			if !strings.HasPrefix(f.GetName(), "mooncake_master_snapshot_") {
				t.Fatalf("metric %s lacks the mooncake_master_snapshot_ prefix", f.GetName())
			}
		}
	}
}

func TestManagerLocal(t *testing.T) {
	l, err := NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	testManager(t, l)
}

func TestManagerConfig(t *testing.T) {
	l, _ := NewLocal(t.TempDir())
	for _, cfg := range []Config{{ClusterID: "c"}, {Backend: l}, {Backend: l, ClusterID: "a/b"}, {Backend: l, ClusterID: "c", Retention: -1}} {
		if _, err := NewManager(cfg); err == nil {
			t.Fatalf("NewManager(%+v) accepted a bad config", cfg)
		}
	}
}

func TestManagerSaveFailureCounted(t *testing.T) {
	dir := t.TempDir()
	l, _ := NewLocal(dir)
	met := NewMetrics()
	m, _ := NewManager(Config{Backend: l, ClusterID: "c", Metrics: met})
	// A file where the cluster folder should be makes every write fail.
	os.MkdirAll(filepath.Join(dir, RootDir), 0o755)
	os.WriteFile(filepath.Join(dir, RootDir, "c"), []byte("in the way"), 0o644)
	if _, err := m.Save(context.Background(), 1, []byte("x")); err == nil {
		t.Fatal("Save succeeded with its folder blocked")
	}
	if value(met.SaveFailure) != 1 || value(met.SaveSuccess) != 0 {
		t.Fatal("failure not counted")
	}
}

// minioBin points testsvc at the MinIO binary the project builds into ~/go/bin when no
// other is configured.
func minioBin(t *testing.T) {
	if os.Getenv("MOONCAKE_MINIO_BIN") != "" {
		return
	}
	home, _ := os.UserHomeDir()
	for _, p := range []string{filepath.Join(home, "go", "bin", "minio"), "/root/go/bin/minio"} {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			t.Setenv("MOONCAKE_MINIO_BIN", p)
			return
		}
	}
	// Otherwise testsvc finds minio in PATH or skips, saying how to build it
	// (go install github.com/minio/minio@latest).
}

func startS3(t *testing.T, prefix string) (*S3, S3Config) {
	minioBin(t)
	srv := testsvc.StartMinIO(t)
	cfg := S3Config{AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Region: srv.Region,
		Endpoint: "http://" + srv.Endpoint, Bucket: "snaps", Prefix: prefix}
	ctx := context.Background()
	if _, err := NewS3(ctx, cfg); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("NewS3 on a missing bucket: %v, want a 'does not exist' error", err)
	}
	cfg.CreateBucket = true
	s, err := NewS3(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, cfg
}

func TestS3(t *testing.T) {
	s, cfg := startS3(t, "team-a")
	testBackend(t, s)
	t.Run("manager", func(t *testing.T) {
		// Objects of the backend test live outside the snapshot folder; List is by prefix.
		testManager(t, s)
	})
	// OpenBackend("s3") with the same settings.
	be, err := OpenBackend(context.Background(), "s3", BackendOptions{S3: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := be.Get(context.Background(), "a/1"); err != nil || string(got) != "uno" {
		t.Fatalf("OpenBackend(s3) Get = %q, %v", got, err)
	}
}

// value reads a counter or gauge.
func value(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}
