//go:build !linux

package tests

import (
	"os"
	"syscall"
)

// Elsewhere than on Linux there is no Pdeathsig, no WNOWAIT wait and no
// /proc: a child alone (not its group, which no wait makes safe to signal)
// is killed at its deadline and in t.Cleanup.

func setDeathSignal(*syscall.SysProcAttr) {}

func waitExited(int) error { return os.ErrProcessDone }

func killMarked(func(string) bool) []leftover { return nil }
