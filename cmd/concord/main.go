// Command concord runs a Concord node (`concord serve`) and measures one
// (`concord bench`).
package main

import (
	"fmt"
	"os"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `concord — leases and a revisioned key-value store over NATS

Usage:
  concord serve [flags]    run a node (embedded NATS and single-node Raft by default)
  concord bench [flags]    measure a running node
  concord version          print the version

Run "concord <command> -h" for the flags of a command.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = runServe(os.Args[2:])
	case "bench":
		err = runBench(os.Args[2:])
	case "version", "--version", "-v":
		fmt.Println(version)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "concord: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "concord %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
