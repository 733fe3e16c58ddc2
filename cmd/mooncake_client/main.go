// Command mooncake_client: see package cmd/internal/clientcmd, which holds it; the multi-call binary
// cmd/mooncake runs the same code when called by this name.
package main

import (
	"os"

	"github.com/mooncake-go/mooncake/cmd/internal/clientcmd"
)

func main() { os.Exit(clientcmd.Main(os.Args[1:])) }
