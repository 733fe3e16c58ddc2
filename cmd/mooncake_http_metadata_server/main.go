// Command mooncake_http_metadata_server: see package internal/cmds/metadatacmd, which holds it; the multi-call binary
// cmd/mooncake runs the same code when called by this name.
package main

import (
	"os"

	"github.com/mooncake-go/mooncake/internal/cmds/metadatacmd"
)

func main() { os.Exit(metadatacmd.Main(os.Args[1:])) }
