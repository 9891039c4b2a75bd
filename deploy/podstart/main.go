// Command podstart starts Concord in a pod of a Kubernetes StatefulSet. It
// appends --bootstrap to its arguments on ordinal 0 (a pod name ending in
// "-0") and --join on every other ordinal, and then replaces itself with
// concord. A StatefulSet gives all its pods the same arguments, and the
// image has no shell to tell the first pod from the others; this is the
// shell's part, and nothing more.
//
//	podstart serve --node-id=$(POD_NAME) ...   # runs: /concord serve --node-id=concord-1 ... --join
//
// The pod name comes from $POD_NAME (the downward API), else the host name
// (a StatefulSet pod's host name is its pod name). $CONCORD_BIN overrides
// the binary, /concord by default.
package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

func main() {
	bin := os.Getenv("CONCORD_BIN")
	if bin == "" {
		bin = "/concord"
	}
	pod := os.Getenv("POD_NAME")
	if pod == "" {
		var err error
		if pod, err = os.Hostname(); err != nil {
			fail(err)
		}
	}
	args, err := command(bin, pod, os.Args[1:])
	if err != nil {
		fail(err)
	}
	fmt.Fprintf(os.Stderr, "podstart: pod %s: exec %s\n", pod, strings.Join(args, " "))
	if err := syscall.Exec(bin, args, os.Environ()); err != nil {
		fail(fmt.Errorf("exec %s: %w", bin, err))
	}
}

// command returns the argv to execute: bin, the given arguments, and
// --bootstrap or --join by the pod's ordinal.
func command(bin, pod string, given []string) ([]string, error) {
	if len(given) == 0 || given[0] != "serve" {
		return nil, fmt.Errorf("want the arguments of `concord serve`, starting with serve; got %q", given)
	}
	for _, a := range given {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && (name == "bootstrap" || name == "join") {
			return nil, fmt.Errorf("%s is chosen by the pod's ordinal; leave it out", a)
		}
	}
	i := strings.LastIndexByte(pod, '-')
	ordinal, err := strconv.Atoi(pod[i+1:])
	if i < 0 || err != nil || ordinal < 0 {
		return nil, fmt.Errorf("pod name %q does not end in -<ordinal>, as a StatefulSet pod's does", pod)
	}
	mode := "--join"
	if ordinal == 0 {
		mode = "--bootstrap"
	}
	return append(append([]string{bin}, slices.Clone(given)...), mode), nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "podstart:", err)
	os.Exit(2)
}
