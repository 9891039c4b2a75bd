package lazyfs

import (
	"os"
	"testing"
	"time"
)

// holdOpen opens name in the mount and closes it after d, as a process
// being killed would.
func holdOpen(t *testing.T, dk *disk, name string, d time.Duration) {
	t.Helper()
	f, err := os.Open(dk.p(name))
	if err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(d, func() { f.Close() })
	t.Cleanup(func() {
		timer.Stop()
		f.Close()
	})
}

// A power cut waits while the mount is busy, then goes ahead.
func TestPowerCutWaitsWhileBusy(t *testing.T) {
	d := mounted(t, Strict)
	d.durable("f", "durable")
	d.writeAt("f", 0, []byte("X"))
	holdOpen(t, d, "f", 700*time.Millisecond)
	start := time.Now()
	d.cut()
	if took := time.Since(start); took < 600*time.Millisecond {
		t.Errorf("power cut took %v while a file was open for 700ms", took)
	}
	d.expect("f", "durable")
}

// A mount still busy when the wait runs out is detached, and the power cut
// goes ahead once the last file is closed.
func TestPowerCutDetachesWhenBusyTooLong(t *testing.T) {
	saved := busyWait
	busyWait = 300 * time.Millisecond
	t.Cleanup(func() { busyWait = saved })
	d := mounted(t, Strict)
	d.durable("f", "durable")
	d.writeAt("f", 0, []byte("X"))
	holdOpen(t, d, "f", 1500*time.Millisecond)
	start := time.Now()
	d.cut()
	if took := time.Since(start); took < 1400*time.Millisecond {
		t.Errorf("power cut took %v: it did not wait for the detached mount to let go", took)
	}
	d.expect("f", "durable")
}

// A mount that stays busy past every wait is aborted through the fuse
// control filesystem, and the power cut goes ahead.
func TestPowerCutAbortsAStuckMount(t *testing.T) {
	savedBusy, savedServe := busyWait, serveWait
	busyWait, serveWait = 300*time.Millisecond, 500*time.Millisecond
	t.Cleanup(func() { busyWait, serveWait = savedBusy, savedServe })
	d := mounted(t, Strict)
	d.durable("f", "durable")
	d.writeAt("f", 0, []byte("X"))
	holdOpen(t, d, "f", time.Minute)
	d.cut()
	d.expect("f", "durable")
}
