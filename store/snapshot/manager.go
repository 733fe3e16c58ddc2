package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// RootDir is the top folder of every snapshot, as upstream Mooncake names it.
const RootDir = "mooncake_master_snapshot"

// Object names inside one snapshot folder and in the cluster folder.
const (
	dataName     = "data"
	manifestName = "manifest.json"
	latestName   = "latest.txt"
)

// DefaultRetention is how many snapshots a Manager keeps when Config.Retention is 0.
const DefaultRetention = 2

// manifestFormat is the manifest's format number; Restore rejects others.
const manifestFormat = 1

// ErrNoSnapshot is wrapped by Restore when the cluster has no valid snapshot.
var ErrNoSnapshot = errors.New("no valid snapshot")

// Manifest describes one snapshot; it is stored as JSON next to the payload.
type Manifest struct {
	Format         int       `json:"format"`
	ClusterID      string    `json:"cluster_id"`
	ID             string    `json:"id"`
	LastAppliedSeq uint64    `json:"last_applied_seq"`
	CreatedAt      time.Time `json:"created_at"`
	PayloadObject  string    `json:"payload_object"`
	PayloadSize    int64     `json:"payload_size"`
	// Checksum is "sha256:<hex>" of the payload.
	Checksum string `json:"checksum"`
}

// Snapshot is a restored snapshot.
type Snapshot struct {
	Manifest
	// Payload is exactly the bytes given to Save.
	Payload []byte
}

// Config configures a Manager.
type Config struct {
	// Backend is where snapshots live. Required.
	Backend Backend
	// ClusterID names the cluster's folder. Required; must not contain '/'.
	ClusterID string
	// Retention is how many snapshots to keep (0 means DefaultRetention).
	Retention int
	// Metrics, when non-nil, records saves and restores.
	Metrics *Metrics
	// Now returns the time; nil means time.Now. For tests.
	Now func() time.Time
}

// Manager saves, prunes and restores the snapshots of one cluster. Its methods are safe
// for concurrent use; saves are serialised.
type Manager struct {
	be        Backend
	clusterID string
	dir       string // RootDir/<cluster_id>/
	retention int
	metrics   *Metrics
	now       func() time.Time

	mu       sync.Mutex
	lastSeq  uint64 // of the last snapshot this Manager saved
	lastTime time.Time
}

// NewManager checks cfg and returns a Manager.
func NewManager(cfg Config) (*Manager, error) {
	if cfg.Backend == nil {
		return nil, fmt.Errorf("snapshot: no backend given")
	}
	if cfg.ClusterID == "" || strings.ContainsAny(cfg.ClusterID, "/\\") || cfg.ClusterID == "." || cfg.ClusterID == ".." {
		return nil, fmt.Errorf("snapshot: cluster id %q must be non-empty and contain no '/' or '\\'", cfg.ClusterID)
	}
	if cfg.Retention < 0 {
		return nil, fmt.Errorf("snapshot: retention %d is negative (want >= 1, or 0 for the default %d)", cfg.Retention, DefaultRetention)
	}
	if cfg.Retention == 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Manager{be: cfg.Backend, clusterID: cfg.ClusterID, dir: RootDir + "/" + cfg.ClusterID + "/",
		retention: cfg.Retention, metrics: cfg.Metrics, now: cfg.Now}, nil
}

// Backend returns the manager's backend.
func (m *Manager) Backend() Backend { return m.be }

// makeID builds an id that sorts by (seq, time): 20-digit seq, then UTC time to the
// nanosecond.
func makeID(seq uint64, t time.Time) string {
	return fmt.Sprintf("%020d_%s", seq, t.UTC().Format("20060102T150405.000000000Z"))
}

// parseID returns the seq in an id, or false when name is not an id.
func parseID(id string) (uint64, bool) {
	seqPart, timePart, ok := strings.Cut(id, "_")
	if !ok || len(seqPart) != 20 {
		return 0, false
	}
	seq, err := strconv.ParseUint(seqPart, 10, 64)
	if err != nil {
		return 0, false
	}
	if _, err := time.Parse("20060102T150405.000000000Z", timePart); err != nil {
		return 0, false
	}
	return seq, true
}

// Save writes payload as a new snapshot covering the oplog up to lastAppliedSeq, points
// latest.txt at it, and deletes snapshots beyond the retention count. The payload is
// durable when Save returns nil. A failure to prune old snapshots is reported in the
// error but the new snapshot is still saved (the returned Manifest is then valid).
func (m *Manager) Save(ctx context.Context, lastAppliedSeq uint64, payload []byte) (Manifest, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	start := time.Now()
	man, err := m.save(ctx, lastAppliedSeq, payload)
	m.metrics.saved(start, len(payload), lastAppliedSeq, err)
	if err != nil {
		return Manifest{}, err
	}
	if err := m.prune(ctx, man.ID); err != nil {
		return man, err
	}
	return man, nil
}

func (m *Manager) save(ctx context.Context, seq uint64, payload []byte) (Manifest, error) {
	now := m.now()
	if seq == m.lastSeq && !now.After(m.lastTime) {
		// Same seq and a clock that did not move: keep ids unique and ordered.
		now = m.lastTime.Add(time.Nanosecond)
	}
	id := makeID(seq, now)
	sum := sha256.Sum256(payload)
	man := Manifest{
		Format: manifestFormat, ClusterID: m.clusterID, ID: id, LastAppliedSeq: seq,
		CreatedAt: now.UTC(), PayloadObject: dataName, PayloadSize: int64(len(payload)),
		Checksum: "sha256:" + hex.EncodeToString(sum[:]),
	}
	manJSON, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		return Manifest{}, fmt.Errorf("snapshot: encoding manifest: %w", err)
	}
	folder := m.dir + id + "/"
	if err := m.be.Put(ctx, folder+dataName, payload); err != nil {
		return Manifest{}, fmt.Errorf("snapshot: saving snapshot %s of cluster %q: %w", id, m.clusterID, err)
	}
	// The manifest makes the snapshot complete, so it goes second.
	if err := m.be.Put(ctx, folder+manifestName, manJSON); err != nil {
		return Manifest{}, fmt.Errorf("snapshot: saving the manifest of snapshot %s of cluster %q: %w", id, m.clusterID, err)
	}
	if err := m.be.Put(ctx, m.dir+latestName, []byte(id+"\n")); err != nil {
		return Manifest{}, fmt.Errorf("snapshot: pointing %s at snapshot %s: %w", m.dir+latestName, id, err)
	}
	m.lastSeq, m.lastTime = seq, now
	return man, nil
}

// listIDs returns every snapshot id in the cluster folder (complete or not), newest first,
// and the object names under each.
func (m *Manager) listIDs(ctx context.Context) ([]string, map[string][]string, error) {
	names, err := m.be.List(ctx, m.dir)
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot: listing snapshots of cluster %q: %w", m.clusterID, err)
	}
	objs := map[string][]string{}
	for _, n := range names {
		rest := strings.TrimPrefix(n, m.dir)
		id, _, ok := strings.Cut(rest, "/")
		if !ok {
			continue // latest.txt and the like
		}
		if _, ok := parseID(id); !ok {
			continue
		}
		objs[id] = append(objs[id], n)
	}
	ids := make([]string, 0, len(objs))
	for id := range objs {
		ids = append(ids, id)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(ids)))
	return ids, objs, nil
}

// prune keeps the newest Retention complete snapshots (always counting keep, the one just
// saved) and deletes every other snapshot older than keep, complete or not. Incomplete
// snapshots newer than keep are left alone: they may be a save still in progress.
func (m *Manager) prune(ctx context.Context, keep string) error {
	ids, objs, err := m.listIDs(ctx)
	if err != nil {
		return err
	}
	var errs []error
	kept := 1 // keep itself
	for _, id := range ids {
		if id == keep {
			continue
		}
		complete := contains(objs[id], m.dir+id+"/"+manifestName)
		if id > keep {
			if complete {
				kept++
			}
			continue
		}
		if complete && kept < m.retention {
			kept++
			continue
		}
		if err := m.deleteSnapshot(ctx, id, objs[id]); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("snapshot: saved, but could not delete old snapshots: %w", errors.Join(errs...))
	}
	return nil
}

func (m *Manager) deleteSnapshot(ctx context.Context, id string, names []string) error {
	// Manifest first: the snapshot stops counting as complete before its payload goes.
	sort.Slice(names, func(i, j int) bool {
		return strings.HasSuffix(names[i], "/"+manifestName) && !strings.HasSuffix(names[j], "/"+manifestName)
	})
	for _, n := range names {
		if err := m.be.Delete(ctx, n); err != nil {
			return fmt.Errorf("deleting snapshot %s: %w", id, err)
		}
	}
	return nil
}

// List returns the manifests of the complete snapshots, newest first. Snapshots whose
// manifest is missing or unreadable are left out (their payload is not checked).
func (m *Manager) List(ctx context.Context) ([]Manifest, error) {
	ids, _, err := m.listIDs(ctx)
	if err != nil {
		return nil, err
	}
	var out []Manifest
	for _, id := range ids {
		man, err := m.readManifest(ctx, id)
		if err == nil {
			out = append(out, man)
		}
	}
	return out, nil
}

// Latest returns the id latest.txt points at ("" when there is none).
func (m *Manager) Latest(ctx context.Context) (string, error) {
	b, err := m.be.Get(ctx, m.dir+latestName)
	if errors.Is(err, ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func (m *Manager) readManifest(ctx context.Context, id string) (Manifest, error) {
	b, err := m.be.Get(ctx, m.dir+id+"/"+manifestName)
	if err != nil {
		return Manifest{}, fmt.Errorf("snapshot %s has no readable manifest (incomplete?): %w", id, err)
	}
	var man Manifest
	if err := json.Unmarshal(b, &man); err != nil {
		return Manifest{}, fmt.Errorf("snapshot %s: manifest is corrupt: %w", id, err)
	}
	if man.Format != manifestFormat {
		return Manifest{}, fmt.Errorf("snapshot %s: manifest format %d is not supported (want %d)", id, man.Format, manifestFormat)
	}
	if man.ID != id || man.ClusterID != m.clusterID {
		return Manifest{}, fmt.Errorf("snapshot %s: manifest names snapshot %q of cluster %q; it was copied from elsewhere",
			id, man.ID, man.ClusterID)
	}
	if seq, _ := parseID(id); seq != man.LastAppliedSeq {
		return Manifest{}, fmt.Errorf("snapshot %s: manifest says last applied seq %d, the id says %d", id, man.LastAppliedSeq, seq)
	}
	if man.PayloadObject == "" || strings.Contains(man.PayloadObject, "/") {
		return Manifest{}, fmt.Errorf("snapshot %s: manifest has a bad payload object name %q", id, man.PayloadObject)
	}
	return man, nil
}

// load reads and verifies one snapshot.
func (m *Manager) load(ctx context.Context, id string) (*Snapshot, error) {
	man, err := m.readManifest(ctx, id)
	if err != nil {
		return nil, err
	}
	payload, err := m.be.Get(ctx, m.dir+id+"/"+man.PayloadObject)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: reading payload: %w", id, err)
	}
	if int64(len(payload)) != man.PayloadSize {
		return nil, fmt.Errorf("snapshot %s: payload is %d bytes, manifest says %d", id, len(payload), man.PayloadSize)
	}
	sum := sha256.Sum256(payload)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != man.Checksum {
		return nil, fmt.Errorf("snapshot %s: payload checksum %s does not match the manifest's %s", id, got, man.Checksum)
	}
	return &Snapshot{Manifest: man, Payload: payload}, nil
}

// RestoreResult is what Restore found.
type RestoreResult struct {
	// Snapshot is the newest valid snapshot.
	Snapshot *Snapshot
	// FromLatest is true when it is the one latest.txt points at.
	FromLatest bool
	// Skipped holds, newest first, why each newer snapshot was not used.
	Skipped []error
}

// Restore returns the newest valid snapshot, trying older ones when newer ones are corrupt
// or incomplete. With no valid snapshot the error wraps ErrNoSnapshot (a fresh cluster
// simply starts empty); the result's Skipped still says what was wrong.
func (m *Manager) Restore(ctx context.Context) (RestoreResult, error) {
	start := time.Now()
	res, err := m.restore(ctx)
	m.metrics.restored(start, len(res.Skipped), err)
	return res, err
}

func (m *Manager) restore(ctx context.Context) (RestoreResult, error) {
	var res RestoreResult
	latest, err := m.Latest(ctx)
	if err != nil {
		res.Skipped = append(res.Skipped, fmt.Errorf("reading %s: %w", m.dir+latestName, err))
	}
	ids, _, err := m.listIDs(ctx)
	if err != nil {
		return res, err
	}
	// latest.txt may name an id the listing does not show (a backend listing lagging
	// behind): try it in its place by order.
	if latest != "" {
		if _, ok := parseID(latest); ok && !contains(ids, latest) {
			ids = append(ids, latest)
			sort.Sort(sort.Reverse(sort.StringSlice(ids)))
		}
	}
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("snapshot: restoring cluster %q: %w", m.clusterID, err)
		}
		s, err := m.load(ctx, id)
		if err != nil {
			res.Skipped = append(res.Skipped, err)
			continue
		}
		res.Snapshot = s
		res.FromLatest = id == latest
		return res, nil
	}
	if len(res.Skipped) > 0 {
		return res, fmt.Errorf("snapshot: cluster %q in %s: %w (%d passed over: %w)", m.clusterID, m.be, ErrNoSnapshot,
			len(res.Skipped), errors.Join(res.Skipped...))
	}
	return res, fmt.Errorf("snapshot: cluster %q in %s: %w", m.clusterID, m.be, ErrNoSnapshot)
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
