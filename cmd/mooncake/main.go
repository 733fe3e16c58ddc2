// Command mooncake is the four Go commands in one binary, which the wheel ships once instead of
// four copies of the same Go runtime, gRPC and etcd client. It runs the command its name says
// (argv[0]'s base name: mooncake_master, mooncake_client, transfer_engine_bench or
// mooncake_http_metadata_server, as a symlink or the package's console scripts call it), or,
// called as mooncake, the command named by its first argument:
//
//	mooncake mooncake_master --rpc_port=50051
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/mooncake-go/mooncake/cmd/internal/benchcmd"
	"github.com/mooncake-go/mooncake/cmd/internal/clientcmd"
	"github.com/mooncake-go/mooncake/cmd/internal/mastercmd"
	"github.com/mooncake-go/mooncake/cmd/internal/metadatacmd"
)

// commands maps each command's name to its Main.
func commands() map[string]func([]string) int {
	return map[string]func([]string) int{
		mastercmd.Name:   mastercmd.Main,
		clientcmd.Name:   clientcmd.Main,
		benchcmd.Name:    benchcmd.Main,
		metadatacmd.Name: metadatacmd.Main,
	}
}

func main() { os.Exit(run(os.Args)) }

// run dispatches argv (program name first) and returns the exit status.
func run(argv []string) int {
	cmds := commands()
	name, args := "", []string(nil)
	if len(argv) > 0 {
		name, args = filepath.Base(argv[0]), argv[1:]
	}
	if _, ok := cmds[name]; !ok && len(args) > 0 {
		if _, ok := cmds[args[0]]; ok {
			name, args = args[0], args[1:]
		}
	}
	if m, ok := cmds[name]; ok {
		return m(args)
	}
	fmt.Fprintf(os.Stderr, "mooncake: run as one of %s, %s, %s, %s (by that name, or as its first argument)\n",
		mastercmd.Name, clientcmd.Name, benchcmd.Name, metadatacmd.Name)
	return 2
}
