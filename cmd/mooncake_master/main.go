// Command mooncake_master: see package cmd/internal/mastercmd, which holds it; the multi-call binary
// cmd/mooncake runs the same code when called by this name.
package main

import (
	"os"

	"github.com/mooncake-go/mooncake/cmd/internal/mastercmd"
)

func main() { os.Exit(mastercmd.Main(os.Args[1:])) }
