package config

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// In a cgo binary os.Setenv (and t.Setenv) also write the C environment that getenv reads.
func TestSetenvReachesGetenv(t *testing.T) {
	t.Setenv("MC_FORCE_TCP", "1")
	if !ForceTCP.Bool() {
		t.Fatalf("MC_FORCE_TCP=1 set with t.Setenv: Bool() = false")
	}
	if v, ok := ForceTCP.Lookup(); !ok || v != "1" {
		t.Fatalf("Lookup() = %q, %v; want \"1\", true", v, ok)
	}
	os.Unsetenv("MC_FORCE_TCP")
	if v, ok := ForceTCP.Lookup(); ok || v != "" || ForceTCP.Bool() {
		t.Fatalf("after Unsetenv: Lookup() = %q, %v, Bool() = %v", v, ok, ForceTCP.Bool())
	}
}

func TestAccessors(t *testing.T) {
	for _, c := range []struct {
		v    string
		on   bool // MC_PG_SHM (default on)
		off  bool // MC_FORCE_TCP (default off)
		num  int
		isN  bool
		pos  int
		size int
	}{
		{"", true, false, 0, false, 0, 0},
		{"0", false, false, 0, true, 0, 0},
		{"1", true, true, 1, true, 1, 1},
		{" 42 ", true, false, 42, true, 42, 42},
		{"-1", true, false, -1, true, 0, 0},
		{"off", false, false, 0, false, 0, 0},
		{"YES", true, true, 0, false, 0, 0},
		{"64K", true, false, 0, false, 0, 64 << 10},
		{"3m", true, false, 0, false, 0, 3 << 20},
		{"1G", true, false, 0, false, 0, 1 << 30},
		{"x", true, false, 0, false, 0, 0},
	} {
		t.Setenv("MC_PG_SHM", c.v)
		t.Setenv("MC_FORCE_TCP", c.v)
		t.Setenv("MC_PG_CREDITS", c.v)
		if got := PGShm.Bool(); got != c.on {
			t.Errorf("MC_PG_SHM=%q: Bool() = %v, want %v", c.v, got, c.on)
		}
		if got := ForceTCP.Bool(); got != c.off {
			t.Errorf("MC_FORCE_TCP=%q: Bool() = %v, want %v", c.v, got, c.off)
		}
		if n, ok := PGCredits.Int(); n != c.num || ok != c.isN {
			t.Errorf("MC_PG_CREDITS=%q: Int() = %d, %v, want %d, %v", c.v, n, ok, c.num, c.isN)
		}
		if got := PGCredits.Positive(); got != c.pos {
			t.Errorf("MC_PG_CREDITS=%q: Positive() = %d, want %d", c.v, got, c.pos)
		}
		if got := PGCredits.Size(); got != c.size {
			t.Errorf("MC_PG_CREDITS=%q: Size() = %d, want %d", c.v, got, c.size)
		}
	}
	t.Setenv("MC_TRANSFER_TIMEOUT", "2.5")
	if f, ok := TransferTimeout.Float(); !ok || f != 2.5 {
		t.Errorf("MC_TRANSFER_TIMEOUT=2.5: Float() = %v, %v", f, ok)
	}
	t.Setenv("MC_REDIS_PASSWORD", " pw ")
	if RedisPassword.String() != " pw " || RedisPassword.Trimmed() != "pw" {
		t.Errorf("String() = %q, Trimmed() = %q", RedisPassword.String(), RedisPassword.Trimmed())
	}
}

var knobName = regexp.MustCompile(`^(MC_|MOONCAKE_|AWS_)[A-Z0-9_]+$|^GOMAXPROCS$|^GOGC$`)

func TestRegistry(t *testing.T) {
	stages := map[Stage]bool{LibraryLoad: true, EngineCreation: true, StoreSetup: true, ProcessGroupInit: true, MasterStart: true}
	kinds := map[Kind]bool{String: true, Bool: true, Int: true, Bytes: true, Number: true}
	seen := map[string]bool{}
	for _, k := range All() {
		if !knobName.MatchString(k.Name()) {
			t.Errorf("knob %q: not an MC_*/MOONCAKE_* name", k.Name())
		}
		if seen[k.Name()] {
			t.Errorf("knob %q registered twice", k.Name())
		}
		seen[k.Name()] = true
		if a := k.Alias(); a != "" && (!knobName.MatchString(a) || a == k.Name() || !strings.Contains(k.Doc(), a)) {
			t.Errorf("knob %q: alias %q (an MC_*/MOONCAKE_* name its doc mentions)", k.Name(), a)
		}
		if !stages[k.Stage()] || !kinds[k.Kind()] || k.Doc() == "" {
			t.Errorf("knob %q: stage %q, kind %q, doc %q", k.Name(), k.Stage(), k.Kind(), k.Doc())
		}
		if k.Kind() == Bool && k.Default() != "0" && k.Default() != "1" {
			t.Errorf("bool knob %q: default %q, want 0 or 1", k.Name(), k.Default())
		}
		if k.Kind() == Bytes && ParseSize(k.Default()) == 0 {
			t.Errorf("size knob %q: default %q is not a size", k.Name(), k.Default())
		}
	}
	for _, k := range All() {
		if seen[k.Alias()] {
			t.Errorf("knob %q: alias %q is another knob's name", k.Name(), k.Alias())
		}
	}
	if len(seen) < 40 {
		t.Errorf("only %d knobs registered", len(seen))
	}
}

// docRow matches a row of the knob table: | `NAME` | default | kind | when | what |
var docRow = regexp.MustCompile("^\\|\\s*`([A-Z0-9_]+)`\\s*\\|([^|]*)\\|([^|]*)\\|([^|]*)\\|([^|]*)\\|\\s*$")

// TestDocTable fails when docs/configuration.md's knob table and the registry disagree: a
// knob missing from either, or another default, kind or stage.
func TestDocTable(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type row struct{ def, kind, stage string }
	doc := map[string]row{}
	inTable := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "<!-- knobs begin -->"):
			inTable = true
		case strings.HasPrefix(line, "<!-- knobs end -->"):
			inTable = false
		case inTable:
			if m := docRow.FindStringSubmatch(line); m != nil {
				if _, dup := doc[m[1]]; dup {
					t.Errorf("docs/configuration.md lists %s twice", m[1])
				}
				doc[m[1]] = row{unquote(m[2]), unquote(m[3]), unquote(m[4])}
			}
		}
	}
	if len(doc) == 0 {
		t.Fatal("docs/configuration.md: no knob table between <!-- knobs begin --> and <!-- knobs end -->")
	}
	for _, k := range All() {
		r, ok := doc[k.Name()]
		if !ok {
			t.Errorf("%s is registered but missing from docs/configuration.md", k.Name())
			continue
		}
		if r.def != k.Default() || r.kind != string(k.Kind()) || r.stage != string(k.Stage()) {
			t.Errorf("%s: docs say default %q, kind %q, read at %q; registry: %q, %q, %q",
				k.Name(), r.def, r.kind, r.stage, k.Default(), k.Kind(), k.Stage())
		}
		delete(doc, k.Name())
	}
	for name := range doc {
		t.Errorf("docs/configuration.md lists %s, which is not registered in package config", name)
	}
}

func unquote(s string) string { return strings.Trim(strings.TrimSpace(s), "`") }

// TestNoEnvReadsOutsideConfig: outside this package, non-test Go code does not read the
// environment with os.Getenv/os.LookupEnv (Go's copy, blind to later putenv calls).
func TestNoEnvReadsOutsideConfig(t *testing.T) {
	root := ".."
	read := regexp.MustCompile(`\bos\.(Getenv|LookupEnv|Environ)\(`)
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch rel {
			case ".git", ".venv", "build", "config", "internal/testsvc": // testsvc: test helpers
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if read.MatchString(line) {
				t.Errorf("%s:%d reads the environment directly; use a knob of package config in capi/ or cmd/ and pass the value down: %s", rel, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestGCHeapFloor(t *testing.T) {
	for _, c := range []struct {
		floor, gogc string
		want        uint64
	}{
		{"", "", 64 << 20},
		{"16M", "", 16 << 20},
		{"1G", "", 1 << 30},
		{"0", "", 0},
		{"off", "", 0},
		{"nonsense", "", 64 << 20},
		{"16M", "200", 0}, // GOGC set: the runtime's own setting is kept
		{"", "off", 0},
	} {
		t.Setenv("MOONCAKE_GC_HEAP_FLOOR", c.floor)
		t.Setenv("GOGC", c.gogc)
		if got := GCHeapFloor(); got != c.want {
			t.Errorf("MOONCAKE_GC_HEAP_FLOOR=%q GOGC=%q: %d, want %d", c.floor, c.gogc, got, c.want)
		}
	}
}
