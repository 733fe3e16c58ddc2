package layering

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/mooncake-go/mooncake"

// pkg is what `go list -json` says of one package (non-test imports only).
type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// loadPackages lists every package of the module with its direct and transitive imports.
func loadPackages(t *testing.T) map[string]*pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json", module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list: %v\n%s", err, stderr)
	}
	pkgs := map[string]*pkg{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if within(p.ImportPath, module) {
			pkgs[p.ImportPath] = &p
		}
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found only %d packages of the module", len(pkgs))
	}
	return pkgs
}

// within reports whether path is the package root or a package below it.
func within(path, root string) bool { return path == root || strings.HasPrefix(path, root+"/") }

// chain is an import path from "from" to "to" through the module's packages, for the message.
func chain(pkgs map[string]*pkg, from, to string) string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == to {
			var path []string
			for p := to; p != ""; p = prev[p] {
				path = append([]string{strings.TrimPrefix(p, module+"/")}, path...)
			}
			return strings.Join(path, " -> ")
		}
		if p := pkgs[cur]; p != nil {
			for _, next := range p.Imports {
				if _, seen := prev[next]; !seen {
					prev[next] = cur
					queue = append(queue, next)
				}
			}
		}
	}
	return from + " -> ... -> " + to
}

// forbid fails for every package below one of lower that imports, directly or not, a package
// below one of higher.
func forbid(t *testing.T, pkgs map[string]*pkg, lower, higher []string) {
	t.Helper()
	checked := 0
	for path, p := range pkgs {
		if !belowAny(path, lower) {
			continue
		}
		checked++
		for _, d := range p.Deps {
			if belowAny(d, higher) {
				t.Errorf("%s imports %s: %s", strings.TrimPrefix(path, module+"/"),
					strings.TrimPrefix(d, module+"/"), chain(pkgs, path, d))
			}
		}
	}
	if checked == 0 {
		t.Errorf("no package below %v", lower)
	}
}

func belowAny(path string, roots []string) bool {
	for _, r := range roots {
		if within(path, module+"/"+r) {
			return true
		}
	}
	return false
}

func TestLowerFloorsDoNotKnowHigherOnes(t *testing.T) {
	pkgs := loadPackages(t)
	forbid(t, pkgs, []string{"p2p", "engine", "wire"}, []string{"collective", "pg"})
	forbid(t, pkgs, []string{"collective"}, []string{"p2p", "pg", "engine"})
	for path, p := range pkgs {
		if !within(path, module+"/wire") {
			continue
		}
		for _, d := range p.Deps {
			if within(d, module) {
				t.Errorf("wire imports %s: it is below every other package of the module", d)
			}
		}
	}
}

func TestInternalImportsOnlyInternal(t *testing.T) {
	pkgs := loadPackages(t)
	n := 0
	for path, p := range pkgs {
		if !within(path, module+"/internal") {
			continue
		}
		n++
		for _, d := range p.Deps {
			if within(d, module) && !within(d, module+"/internal") {
				t.Errorf("%s imports %s (%s): internal/ holds the lowest helpers, which know nothing above them",
					strings.TrimPrefix(path, module+"/"), strings.TrimPrefix(d, module+"/"), chain(pkgs, path, d))
			}
		}
	}
	if n < 4 {
		t.Errorf("only %d packages under internal/", n)
	}
}
