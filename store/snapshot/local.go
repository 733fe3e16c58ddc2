package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// tmpPrefix marks files that Local.Put is still writing; List never shows them.
const tmpPrefix = ".tmp-"

// Local keeps objects as files under a root directory.
type Local struct {
	root string
}

// NewLocal opens (creating if needed) the directory root.
func NewLocal(root string) (*Local, error) {
	if root == "" {
		return nil, fmt.Errorf("snapshot: local snapshot directory is empty")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("snapshot: local snapshot directory %q: %w", root, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("snapshot: creating local snapshot directory %s: %w", abs, err)
	}
	return &Local{root: abs}, nil
}

// Root returns the absolute root directory.
func (l *Local) Root() string { return l.root }

func (l *Local) String() string { return "local directory " + l.root }

func (l *Local) path(name string) string {
	return filepath.Join(l.root, filepath.FromSlash(name))
}

// Put writes data to a temporary file in the target directory, fsyncs it, renames it over
// the target and fsyncs the directory, so the object is all-or-nothing and durable.
func (l *Local) Put(ctx context.Context, name string, data []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("snapshot: writing %s to %s: %w", name, l, err)
	}
	dst := l.path(name)
	dir := filepath.Dir(dst)
	var f *os.File
	var err error
	// A concurrent Delete may remove the directory once it is empty; try again then.
	for try := 0; try < 3; try++ {
		if err = os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("snapshot: creating directory %s: %w", dir, err)
		}
		f, err = os.CreateTemp(dir, tmpPrefix+filepath.Base(dst)+"-*")
		if !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("snapshot: creating a temporary file in %s: %w", dir, err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("snapshot: writing %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("snapshot: flushing %s to disk: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("snapshot: closing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("snapshot: moving %s into place as %s: %w", tmp, dst, err)
	}
	ok = true
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("snapshot: flushing directory %s to disk: %w", dir, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Get reads the object's file.
func (l *Local) Get(ctx context.Context, name string) ([]byte, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("snapshot: reading %s from %s: %w", name, l, err)
	}
	b, err := os.ReadFile(l.path(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("snapshot: %s in %s: %w", name, l, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot: reading %s: %w", l.path(name), err)
	}
	return b, nil
}

// List walks the directory holding prefix and returns the matching object names.
func (l *Local) List(ctx context.Context, prefix string) ([]string, error) {
	if strings.HasPrefix(prefix, "/") || strings.Contains(prefix, "..") {
		return nil, fmt.Errorf("snapshot: list prefix %q must be a relative path without \"..\"", prefix)
	}
	start := l.root
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		start = l.path(prefix[:i])
	}
	var out []string
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if d.IsDir() || strings.HasPrefix(d.Name(), tmpPrefix) || !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(l.root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if strings.HasPrefix(rel, prefix) {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot: listing %q in %s: %w", prefix, l, err)
	}
	sort.Strings(out)
	return out, nil
}

// Delete removes the object's file, and its directory when that becomes empty (never the
// root).
func (l *Local) Delete(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	p := l.path(name)
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("snapshot: deleting %s: %w", p, err)
	}
	// Tidy empty parent directories; failure (not empty) just stops the walk.
	for dir := filepath.Dir(p); dir != l.root && strings.HasPrefix(dir, l.root); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break
		}
	}
	return nil
}

var _ Backend = (*Local)(nil)
