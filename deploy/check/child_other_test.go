//go:build !linux

package check

import (
	"os"
	"syscall"
)

// Elsewhere than on Linux there is no Pdeathsig and no WNOWAIT wait: a
// child alone (not its group, which no wait makes safe to signal) is
// killed at its deadline and in t.Cleanup.

func setDeathSignal(*syscall.SysProcAttr) {}

func waitExited(int) error { return os.ErrProcessDone }
