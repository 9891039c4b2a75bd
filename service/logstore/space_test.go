package logstore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"golang.org/x/sys/unix"
)

// smallDisk mounts a tmpfs of size bytes for the test: a real file system
// that runs out of space. It needs root; CI runs as root, so there a skip
// is a failure.
func smallDisk(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root to mount a small tmpfs, and CI is set")
		}
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Fatalf("mount a %s tmpfs: %v", size, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes a file in dir until the disk is full and returns its path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill the disk: %v", err)
			}
			break
		}
	}
	// The last partial chunk may leave a few blocks: take them too.
	for {
		if _, err := f.Write(chunk[:512]); err != nil {
			break
		}
	}
	return path
}

func freeBytes(t *testing.T, dir string) uint64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Bavail * uint64(st.Bsize)
}

// bigLogs returns n entries from index from, each of about 60 KiB, so a
// 1 MiB segment holds about 16.
func bigLogs(from uint64, n int) []*raft.Log {
	out := make([]*raft.Log, n)
	for i := range out {
		l := makeLog(from + uint64(i))
		l.Data = make([]byte, 60<<10)
		l.Data[0] = byte(l.Index)
		out[i] = l
	}
	return out
}

// TestFullDiskRefusesThenResumes fills the disk under the log: the node
// learns it is full while it can still append (the reserve for the next
// segment could not be made again); an append that finds no room gets
// ErrDiskFull at once and leaves no partial file; reads go on; and once the
// filler is gone appends resume by themselves, with every earlier entry
// intact, also after a reopen. Before the reserve, raft-wal's failed
// rotation sealed the log for good: every append failed "segment is
// sealed" until a restart.
func TestFullDiskRefusesThenResumes(t *testing.T) {
	disk := smallDisk(t, "8m")
	var changes atomic.Int32
	var lastFull atomic.Value
	opts := Options{SegmentBytes: 1 << 20, OnDiskFull: func(full error) {
		changes.Add(1)
		lastFull.Store(full != nil)
	}}
	s, err := Open(disk, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st, err := os.Stat(filepath.Join(disk, DirName, reserveName)); err != nil || st.Size() != 1<<20+128<<10 {
		t.Fatalf("the reserve for the next segment: %v, %v", st, err)
	}
	if err := s.DiskFull(); err != nil {
		t.Fatalf("DiskFull on an empty disk: %v", err)
	}
	filler := fill(t, disk)

	// The disk filled by something else is noticed within a check or two,
	// while the log can still append: the segment being written and the
	// reserve still have room, about two segments' worth.
	waitFor(t, 5*time.Second, "DiskFull to see the filled disk", func() bool { return s.DiskFull() != nil })
	if changes.Load() != 1 || lastFull.Load() != true {
		t.Fatalf("OnDiskFull heard %d changes; want 1, to full", changes.Load())
	}
	if !strings.Contains(s.DiskFull().Error(), "no space left") {
		t.Fatalf("DiskFull = %v; want it to name the full disk", s.DiskFull())
	}
	next := uint64(1)
	var refused error
	for next < 200 {
		if refused = s.StoreLogs(bigLogs(next, 1)); refused != nil {
			break
		}
		next++
	}
	if refused == nil {
		t.Fatal("200 appends of 60 KiB fit on a full 8 MiB disk")
	}
	if next < 17 {
		t.Fatalf("refused at entry %d; a full segment (16 entries) should still have fitted", next)
	}
	if !errors.Is(refused, ErrDiskFull) || !errors.Is(refused, syscall.ENOSPC) {
		t.Fatalf("refused append: %v; want ErrDiskFull and ENOSPC", refused)
	}
	acked := next - 1
	t.Logf("first refusal at entry %d: %v", next, refused)

	// Refused again at once, and nothing half-made stays behind to hold
	// space: the WAL directory holds segments and wal-meta.db only.
	start := time.Now()
	if err := s.StoreLogs(bigLogs(next, 1)); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("second refused append: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a refused append took %s", d)
	}
	ents, _ := os.ReadDir(filepath.Join(disk, DirName))
	for _, e := range ents {
		if name := e.Name(); !strings.HasSuffix(name, ".wal") && name != "wal-meta.db" {
			t.Errorf("left in the WAL directory on a full disk: %s", name)
		}
	}
	checkIndexes(t, s, 1, acked)
	var l raft.Log
	if err := s.GetLog(acked, &l); err != nil || l.Data[0] != byte(acked) {
		t.Fatalf("read entry %d on a full disk: %v", acked, err)
	}

	// Space returns: the reserve is made again within a retry or two, and
	// the next append reopens the sealed log and lands.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "DiskFull to clear after the filler was removed", func() bool { return s.DiskFull() == nil })
	if lastFull.Load() != false {
		t.Fatal("OnDiskFull did not hear the disk has room again")
	}
	for i := 0; i < 40; i++ { // more than two segments' worth
		if err := s.StoreLogs(bigLogs(next, 1)); err != nil {
			t.Fatalf("append %d after space returned: %v", next, err)
		}
		next++
	}
	checkIndexes(t, s, 1, next-1)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(disk, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	checkIndexes(t, s2, 1, next-1)
	for i := uint64(1); i < next; i++ {
		if err := s2.GetLog(i, &l); err != nil || l.Index != i || l.Data[0] != byte(i) {
			t.Fatalf("entry %d after reopen: %v (index %d)", i, err, l.Index)
		}
	}
}

// TestTooSmallDiskFailsCleanly starts a log whose first segment does not
// fit: Open fails naming the full disk, and the disk is left as free as it
// was (raft-wal's own preallocation left the partial file behind).
func TestTooSmallDiskFailsCleanly(t *testing.T) {
	disk := smallDisk(t, "2m")
	before := freeBytes(t, disk)
	_, err := Open(disk, Options{SegmentBytes: 4 << 20})
	if err == nil {
		t.Fatal("a 4 MiB segment opened on a 2 MiB disk")
	}
	if !errors.Is(err, ErrDiskFull) {
		t.Fatalf("Open: %v; want ErrDiskFull", err)
	}
	if after := freeBytes(t, disk); after+64<<10 < before {
		t.Fatalf("free space %d before the failed open, %d after", before, after)
	}
}

// TestReserveSurvivesRestart keeps a reserve of the right size across a
// reopen and replaces one of another size (a changed segment size).
func TestReserveSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{SegmentBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, DirName, reserveName)
	st1, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(dir, Options{SegmentBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	st2, err := os.Stat(path)
	if err != nil || !os.SameFile(st1, st2) {
		t.Fatalf("the reserve was remade on a reopen with the same size: %v", err)
	}
	s.Close()
	s, err = Open(dir, Options{SegmentBytes: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st3, err := os.Stat(path); err != nil || st3.Size() != 2<<20+256<<10 {
		t.Fatalf("reserve after the segment size changed: %v, %v", st3, err)
	}
}

func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
