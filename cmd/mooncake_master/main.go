// Command mooncake_master: see package internal/cmds/mastercmd, which holds it; the multi-call binary
// cmd/mooncake runs the same code when called by this name.
package main

import (
	"os"

	"github.com/mooncake-go/mooncake/internal/cmds/mastercmd"
)

func main() { os.Exit(mastercmd.Main(os.Args[1:])) }
