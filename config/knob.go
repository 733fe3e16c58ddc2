package config

import (
	"strconv"
	"strings"
)

// Stage says when a knob is read, and so from when on a change to it takes effect.
type Stage string

const (
	LibraryLoad      Stage = "library load"       // libmooncake.so's init (or a Go binary's start)
	EngineCreation   Stage = "engine creation"    // TransferEngine.initialize, or the first process group / store that needs the engine
	StoreSetup       Stage = "store setup()"      // MooncakeDistributedStore.setup, mooncake_client start
	ProcessGroupInit Stage = "init_process_group" // creating a process group
	MasterStart      Stage = "master start"       // mooncake_master start
)

// Kind is the type of a knob's value.
type Kind string

const (
	String Kind = "string"
	Bool   Kind = "bool"   // 1/true/yes/on or 0/false/no/off; anything else: the default
	Int    Kind = "int"    // a decimal integer
	Bytes  Kind = "bytes"  // a positive size with an optional K, M or G suffix
	Number Kind = "number" // a decimal number (may have a fraction)
)

// Knob is one registered environment variable. Knobs are the exported variables of this
// package; their fields are set once, when the package initialises.
type Knob struct {
	name  string
	kind  Kind
	def   string
	stage Stage
	doc   string
	alias string // an earlier name, still read when name is unset ("": none)
}

// registry lists every knob in declaration order (knob appends to it).
var registry []*Knob

func knob(name string, kind Kind, def string, stage Stage, doc string) *Knob {
	k := &Knob{name: name, kind: kind, def: def, stage: stage, doc: doc}
	registry = append(registry, k)
	return k
}

// formerly registers alias, an earlier name of the knob, which is read when the knob's own
// name is unset (the knob's doc names it).
func (k *Knob) formerly(alias string) *Knob {
	k.alias = alias
	return k
}

// All returns every registered knob, in the order of docs/configuration.md.
func All() []*Knob { return append([]*Knob(nil), registry...) }

// Name is the environment variable, e.g. "MC_FORCE_TCP".
func (k *Knob) Name() string { return k.name }

// Kind is the type of the value.
func (k *Knob) Kind() Kind { return k.kind }

// Default describes the value used when the knob is unset (for Bool knobs, "0" or "1").
func (k *Knob) Default() string { return k.def }

// Stage says when the knob is read.
func (k *Knob) Stage() Stage { return k.stage }

// Doc is a one-line description of what the knob changes.
func (k *Knob) Doc() string { return k.doc }

// Alias is the knob's earlier name, still read when Name is unset ("" when it has none).
func (k *Knob) Alias() string { return k.alias }

// Lookup returns the variable's value as it is now, and whether it is set: under its name, or,
// when that is unset or empty, under its alias.
func (k *Knob) Lookup() (string, bool) {
	v, ok := lookupEnv(k.name)
	if v == "" && k.alias != "" {
		if av, aok := lookupEnv(k.alias); aok {
			return av, true
		}
	}
	return v, ok
}

// String returns the value as it is now ("" when unset). Callers that ignore surrounding
// blanks trim it themselves; passwords and names are used as given.
func (k *Knob) String() string {
	v, _ := k.Lookup()
	return v
}

// Trimmed returns the value without surrounding blanks ("" when unset).
func (k *Knob) Trimmed() string { return strings.TrimSpace(k.String()) }

// Bool reports the switch: 1/true/yes/on is true, 0/false/no/off is false, and an unset,
// empty or unrecognised value is the registered default.
func (k *Knob) Bool() bool {
	switch strings.ToLower(k.Trimmed()) {
	case "1", "true", "yes", "on":
		return true
	case "0", "false", "no", "off":
		return false
	}
	return k.def == "1"
}

// Int returns the value as an integer; ok is false when the knob is unset, empty or not an
// integer (the caller then keeps its default).
func (k *Knob) Int() (n int, ok bool) {
	n, err := strconv.Atoi(k.Trimmed())
	return n, err == nil
}

// Positive returns the value when it is an integer above zero, else 0: what an Options field
// whose zero value means "the default" wants.
func (k *Knob) Positive() int {
	if n, ok := k.Int(); ok && n > 0 {
		return n
	}
	return 0
}

// Float returns the value as a number; ok is false when it is unset or not a number.
func (k *Knob) Float() (f float64, ok bool) {
	f, err := strconv.ParseFloat(k.Trimmed(), 64)
	return f, err == nil
}

// Size returns a positive size with an optional K, M or G suffix (powers of 1024), else 0
// (unset or invalid: the default).
func (k *Knob) Size() int {
	return ParseSize(k.Trimmed())
}

// ParseSize parses a positive size with an optional K, M or G suffix (powers of 1024); it
// returns 0 for anything else.
func ParseSize(v string) int {
	if v == "" {
		return 0
	}
	mul := 1
	switch strings.ToUpper(v[len(v)-1:]) {
	case "K":
		mul = 1 << 10
	case "M":
		mul = 1 << 20
	case "G":
		mul = 1 << 30
	}
	if mul != 1 {
		v = v[:len(v)-1]
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0
	}
	return n * mul
}
