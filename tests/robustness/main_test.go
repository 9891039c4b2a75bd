package robustness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// binPath is the concord binary the scenarios run, built once by TestMain.
var binPath string

func TestMain(m *testing.M) {
	if os.Geteuid() == 0 {
		sweepNamespaces()
	}
	os.Exit(buildAndRun(m))
}

// buildAndRun builds the concord binary, or takes the one named by
// CONCORD_ROBUSTNESS_BIN (to run the scenarios against another build, such
// as the release before a fix; CONCORD_ROBUSTNESS_FAILPOINTS_BIN names its
// failpoints build, without which the failpoint scenarios skip), and runs
// the tests.
func buildAndRun(m *testing.M) int {
	if bin := os.Getenv("CONCORD_ROBUSTNESS_BIN"); bin != "" {
		binPath = bin
		failpointBinPath = os.Getenv("CONCORD_ROBUSTNESS_FAILPOINTS_BIN")
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "concord-robustness-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binPath = filepath.Join(dir, "concord")
	failpointBinPath = filepath.Join(dir, "concord-failpoints")
	for _, b := range [][]string{{"-o", binPath}, {"-tags", "failpoints", "-o", failpointBinPath}} {
		build := exec.Command("go", append(append([]string{"build"}, b...), "../../cmd/concord")...)
		build.Stdout, build.Stderr = os.Stdout, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build concord:", err)
			return 1
		}
	}
	return m.Run()
}

// failpointBinPath is the concord binary built with the failpoints tag
// (service/failpoint), which only the failpoint scenarios run.
var failpointBinPath string

// requireRoot skips a scenario that needs root (FUSE mounts, network
// namespaces) when not root, unless CONCORD_REQUIRE_ROBUSTNESS is set (as
// `make robustness` and CI set it), where it fails instead: a suite that
// silently skips everything proves nothing.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		if _, err := os.Stat("/dev/fuse"); err == nil {
			return
		}
	}
	if os.Getenv("CONCORD_REQUIRE_ROBUSTNESS") != "" {
		t.Fatal("this scenario needs root and /dev/fuse, and CONCORD_REQUIRE_ROBUSTNESS is set")
	}
	t.Skip("needs root and /dev/fuse (set CONCORD_REQUIRE_ROBUSTNESS to fail instead)")
}

// longProfile reports whether the long profile runs (`make robustness`):
// more cuts per scenario. `make test` runs the short one.
func longProfile() bool { return os.Getenv("CONCORD_ROBUSTNESS_PROFILE") == "long" }
