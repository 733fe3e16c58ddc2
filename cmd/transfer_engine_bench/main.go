// Command transfer_engine_bench: see package cmd/internal/benchcmd, which holds it; the multi-call binary
// cmd/mooncake runs the same code when called by this name.
package main

import (
	"os"

	"github.com/mooncake-go/mooncake/cmd/internal/benchcmd"
)

func main() { os.Exit(benchcmd.Main(os.Args[1:])) }
