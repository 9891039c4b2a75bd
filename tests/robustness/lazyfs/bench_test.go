package lazyfs

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// appendFsync is the log workload: small appends into a preallocated 64 MiB
// segment, each followed by an fsync.
func appendFsync(b *testing.B, dir string) {
	f, err := os.OpenFile(filepath.Join(dir, "seg"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, 64<<20); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	rec := make([]byte, 200)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		off := int64(i*len(rec)) % (64<<20 - int64(len(rec)))
		if _, err := f.WriteAt(rec, off); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendFsync measures the workload through lazyfs.
func BenchmarkAppendFsync(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	backing, mnt := b.TempDir(), b.TempDir()
	f, err := Mount(backing, mnt, Strict)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := f.Unmount(); err != nil {
			b.Error(err)
		}
	}()
	appendFsync(b, mnt)
}
