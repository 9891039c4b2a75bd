package check

import (
	"syscall"
	"unsafe"
)

// setDeathSignal makes the kernel kill the child when the thread that
// forked it exits (see child's start for why that thread lives as long as
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
