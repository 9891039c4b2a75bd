package lazyfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// busyWait bounds how long an unmount is retried while the kernel says the
// mount is busy (a process being killed may still hold a file open) before
// it is detached. A variable so that a test can shorten it.
var busyWait = 5 * time.Second

// serveWait bounds how long a detached mount may take to let go before its
// connection is aborted. A variable so that a test can shorten it.
var serveWait = 10 * time.Second

// unmount takes the mount away and waits until no request can reach the
// tracker any more, which a power cut needs before it reads the state.
func (f *FS) unmount() error {
	// go-fuse retries briefly on EBUSY, then waits for its serve loops.
	if err := f.server.Unmount(); err == nil {
		return nil
	}
	deadline := time.Now().Add(busyWait)
	for {
		err := syscall.Unmount(f.mountpoint, 0)
		if err == nil || errors.Is(err, syscall.EINVAL) { // EINVAL: no longer mounted
			break
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			if derr := syscall.Unmount(f.mountpoint, syscall.MNT_DETACH); derr != nil && !errors.Is(derr, syscall.EINVAL) {
				return fmt.Errorf("unmount %s: %w (detach: %v)", f.mountpoint, err, derr)
			}
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if waitServer(f, serveWait) {
		return nil
	}
	// A detached mount lives on while anything holds a file in it;
	// aborting the connection ends it, if the fuse control filesystem is
	// there to do it.
	if f.dev != 0 && abortConnection(f.dev) && waitServer(f, 2*time.Second) {
		return nil
	}
	return fmt.Errorf("unmount %s: detached, but still in use after %v", f.mountpoint, serveWait)
}

// waitServer reports whether the serve loops ended within d.
func waitServer(f *FS, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		f.server.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// mountDev is the device number of the mount, which names its connection in
// the fuse control filesystem.
func mountDev(mountpoint string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(mountpoint, &st); err != nil {
		return 0, err
	}
	return uint64(st.Dev), nil
}

// fuseCtl is where the fuse control filesystem lives; each connection has
// a directory there whose abort file ends it.
const fuseCtl = "/sys/fs/fuse/connections"

// abortConnection ends the FUSE connection of device dev through the fuse
// control filesystem, mounting it for the moment if it is not mounted (and
// unmounting it again), and reports whether the abort was written.
func abortConnection(dev uint64) bool {
	abort := filepath.Join(fuseCtl, strconv.FormatUint(dev, 10), "abort")
	if _, err := os.Stat(abort); err != nil {
		if err := syscall.Mount("fusectl", fuseCtl, "fusectl", 0, ""); err != nil {
			return false
		}
		defer syscall.Unmount(fuseCtl, 0)
	}
	return os.WriteFile(abort, []byte("1"), 0) == nil
}
