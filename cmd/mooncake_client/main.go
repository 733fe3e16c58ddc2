// Command mooncake_client: see package internal/cmds/clientcmd, which holds it; the multi-call binary
// cmd/mooncake runs the same code when called by this name.
package main

import (
	"os"

	"github.com/mooncake-go/mooncake/internal/cmds/clientcmd"
)

func main() { os.Exit(clientcmd.Main(os.Args[1:])) }
