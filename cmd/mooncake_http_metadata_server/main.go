// Command mooncake_http_metadata_server: see package cmd/internal/metadatacmd, which holds it; the multi-call binary
// cmd/mooncake runs the same code when called by this name.
package main

import (
	"os"

	"github.com/mooncake-go/mooncake/cmd/internal/metadatacmd"
)

func main() { os.Exit(metadatacmd.Main(os.Args[1:])) }
