//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"syscall"

	gofail "go.etcd.io/gofail/runtime"
)

// Enabled reports whether this build has the points.
const Enabled = true

// points registers every point with gofail; registering also applies what
// GOFAIL_FAILPOINTS sets for it.
var points = func() map[string]*gofail.Failpoint {
	m := make(map[string]*gofail.Failpoint, len(Names))
	for _, name := range Names {
		m[name] = gofail.NewFailpoint(name)
	}
	return m
}()

// Inject evaluates the point name: nothing happens unless its terms are
// set, and terms that return "kill" kill the process.
func Inject(name string) {
	fp, ok := points[name]
	if !ok {
		panic("failpoint: no point named " + name)
	}
	v, err := fp.Acquire()
	if err != nil {
		return // not set, or its terms did not fire this time
	}
	if v != killValue {
		fmt.Fprintf(os.Stderr, "failpoint %s returned %v; only %q does anything\n", name, v, killValue)
		return
	}
	// The line is for the node's log: a test that sees the process die
	// can tell a failpoint from a crash of its own.
	fmt.Fprintf(os.Stderr, "failpoint %s: killing the process\n", name)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way; nothing after the point runs
}
