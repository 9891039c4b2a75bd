// Command concord runs a Concord node (`concord serve`), measures one
// (`concord bench`), and is the command-line client of a cluster (lease,
// kv, watch, lock, elect, status).
package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// version is set at build time with -ldflags "-X main.version=...". It is
// also the version `nats micro info` shows, and NATS micro requires a
// semantic version (a leading "v" is dropped), hence the default.
var version = "0.0.0-dev"

const usage = `concord — leases and a revisioned key-value store over NATS

Usage:
  concord serve [flags]    run a node (embedded NATS and single-node Raft by default)
  concord bench [flags]    measure a running node
  concord version          print the version
  concord lease ...        grant, keep alive, revoke, describe and list leases
  concord kv ...           put, get and delete keys, prefixes or ranges (get also at a past revision); transactions; a key's history; compact
  concord watch KEY        print a key's or a prefix's events as they happen
  concord lock NAME -- CMD run CMD while holding a lock, with its fencing token
  concord elect NAME       lead an election, or observe its leader
  concord status           print the cluster's members and indexes
  concord snapshot ...     save a backup from the leader; check a backup file; restore one into a new cluster

Run "concord <command> -h" for the flags of a command.

`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage+clientUsage())
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	if strings.HasPrefix(cmd, "-") && !slices.Contains([]string{"-h", "--help", "-v", "--version"}, cmd) {
		// Connection and output flags before the command: they go to the
		// command, as if given after it.
		flags, rest, err := hoistFlags(os.Args[1:])
		switch {
		case err != nil:
			fmt.Fprintf(os.Stderr, "concord: %v\nRun \"concord help\" for the commands and their flags.\n", err)
			os.Exit(exitUsage)
		case len(rest) == 0:
			fmt.Fprintf(os.Stderr, "concord: missing command after %s\n\n%s", strings.Join(flags, " "), usage)
			os.Exit(exitUsage)
		}
		cmd, args = rest[0], append(flags, rest[1:]...)
	}
	var err error
	switch cmd {
	case "serve":
		err = runServe(args)
	case "bench":
		err = runBench(args)
	case "version", "--version", "-v":
		fmt.Println(version)
	case "lease", "kv", "watch", "lock", "elect", "status", "tenant":
		os.Exit(runCLI(cmd, args))
	case "snapshot":
		os.Exit(runSnapshot(args))
	case "help", "-h", "--help":
		fmt.Print(usage + clientUsage())
	default:
		fmt.Fprintf(os.Stderr, "concord: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "concord %s: %v\n", cmd, err)
		os.Exit(1)
	}
}
