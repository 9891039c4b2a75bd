package tests

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// setDeathSignal makes the kernel kill the child when the thread that
// forked it exits (see proc's start for why that thread lives as long as
// the child).
func setDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}

// waitExited blocks until child pid has exited, leaving it unreaped
// (waitid with WNOWAIT), as the os package itself does before reaping.
func waitExited(pid int) error {
	const pPID = 1      // P_PID
	var info [16]uint64 // siginfo_t, 128 bytes; only the wait matters
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info)), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return errno
		}
		return nil
	}
}

// killMarked sends SIGKILL to every process but this one whose environment
// has a variable whose name match accepts, and returns them. A process's
// environment in /proc is the one it was started with, so a marker stays
// visible whatever the process does with its variables; processes of other
// users are unreadable and skipped, and a zombie shows an empty one.
func killMarked(match func(name string) bool) []leftover {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var found []leftover
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + d.Name() + "/environ")
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			name, value, _ := strings.Cut(string(kv), "=")
			if !match(name) {
				continue
			}
			cmdline, _ := os.ReadFile("/proc/" + d.Name() + "/cmdline")
			_ = syscall.Kill(pid, syscall.SIGKILL)
			found = append(found, leftover{pid: pid, test: value,
				cmdline: strings.TrimSpace(string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))})
			break
		}
	}
	return found
}
