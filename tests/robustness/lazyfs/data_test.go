package lazyfs

import (
	"bytes"
	"math/rand/v2"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// openRW opens name in the mount read-write and closes it at cleanup.
func (d *disk) openRW(name string, flag int) *os.File {
	d.t.Helper()
	f, err := os.OpenFile(d.p(name), os.O_RDWR|flag, 0o644)
	if err != nil {
		d.t.Fatalf("open %s: %v", name, err)
	}
	d.t.Cleanup(func() { f.Close() })
	return f
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// A preallocated log segment, fsynced after each small append, loses
// exactly what was appended (and overwritten) after the last fsync.
func TestPreallocatedSegment(t *testing.T) {
	const size = 8 << 20
	rng := rand.New(rand.NewPCG(1, 2))
	d := mounted(t, Strict)
	f := d.openRW("seg", os.O_CREATE|os.O_EXCL)
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		t.Fatalf("fallocate: %v", err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	d.fsync(".")
	want := make([]byte, size)
	var off int64
	for range 200 {
		rec := randomBytes(rng, 1+rng.IntN(300))
		if _, err := f.WriteAt(rec, off); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		copy(want[off:], rec)
		off += int64(len(rec))
	}
	for range 5 {
		if _, err := f.WriteAt(randomBytes(rng, 1000), off); err != nil {
			t.Fatal(err)
		}
		off += 1000
	}
	if _, err := f.WriteAt([]byte("overwrite synced"), 10); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("past the end"), size+100); err != nil {
		t.Fatal(err)
	}
	if st := d.fs.Stats(); st.FileSyncs < 201 || st.DirSyncs < 1 || st.Writes < 207 {
		t.Errorf("stats %+v: the workload's fsyncs and writes were not all seen", st)
	}
	f.Close()
	d.cut()
	d.expectBytes("seg", want)
}

// Plain fallocate grows the size, which is not durable until an fsync;
// KEEP_SIZE grows nothing.
func TestFallocateGrowthNeedsFsync(t *testing.T) {
	d := mounted(t, Strict)
	d.durable("f", "hundred?")
	f := d.openRW("f", 0)
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, 1<<20); err != nil {
		t.Fatalf("fallocate keep size: %v", err)
	}
	if st, _ := f.Stat(); st.Size() != 8 {
		t.Fatalf("size after KEEP_SIZE fallocate = %d, want 8", st.Size())
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, 1<<20); err != nil {
		t.Fatalf("fallocate: %v", err)
	}
	if st, _ := f.Stat(); st.Size() != 1<<20 {
		t.Fatalf("size after fallocate = %d, want 1 MiB", st.Size())
	}
	f.Close()
	d.cut()
	d.expect("f", "hundred?")
}

// Truncates, by descriptor, by path and by O_TRUNC, are undone; one of them
// cuts off more than spillThreshold, so its old bytes go to a spill file.
func TestTruncatesAreUndone(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	d := mounted(t, Strict)
	small := randomBytes(rng, 64<<10)
	big := randomBytes(rng, 3<<20)
	d.durable("small", string(small))
	d.durable("big", string(big))
	d.durable("otrunc", "old content")

	f := d.openRW("small", 0)
	if err := f.Truncate(10); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("regrown"), 20000); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Truncate(d.p("big"), 0); err != nil {
		t.Fatal(err)
	}
	d.writeAt("big", 1<<20, []byte("new"))
	d.writeFile("otrunc", "new")
	d.cut()
	d.expectBytes("small", small)
	d.expectBytes("big", big)
	d.expect("otrunc", "old content")
}

// A truncate that was fsynced is durable, writes after it are not.
func TestFsyncedTruncateIsDurable(t *testing.T) {
	d := mounted(t, Strict)
	d.durable("f", "0123456789abcdef")
	f := d.openRW("f", 0)
	if err := f.Truncate(4); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("zz"), 8); err != nil {
		t.Fatal(err)
	}
	f.Close()
	d.cut()
	d.expect("f", "0123")
}

// Punching a hole changes bytes, which come back.
func TestPunchHoleIsUndone(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	d := mounted(t, Strict)
	data := randomBytes(rng, 64<<10)
	d.durable("f", string(data))
	f := d.openRW("f", 0)
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 4096, 8192); err != nil {
		t.Fatalf("punch hole: %v", err)
	}
	got := make([]byte, 8192)
	if _, err := f.ReadAt(got, 4096); err != nil || !bytes.Equal(got, make([]byte, 8192)) {
		t.Fatalf("hole not punched while mounted (err %v)", err)
	}
	f.Close()
	d.cut()
	d.expectBytes("f", data)
}

// copy_file_range into a durable file is undone.
func TestCopyFileRangeIsUndone(t *testing.T) {
	d := mounted(t, Strict)
	d.durable("dst", "destination, durable")
	d.durable("src", "SOURCE")
	src, dst := d.openRW("src", 0), d.openRW("dst", 0)
	n, err := unix.CopyFileRange(int(src.Fd()), nil, int(dst.Fd()), nil, 6, 0)
	if err != nil || n != 6 {
		t.Fatalf("copy_file_range = %d, %v", n, err)
	}
	if b, _ := os.ReadFile(d.p("dst")); string(b) != "SOURCEation, durable" {
		t.Fatalf("dst while mounted = %q", b)
	}
	src.Close()
	dst.Close()
	d.cut()
	d.expect("dst", "destination, durable")
}

// A write-only descriptor still lets lazyfs save what a write overwrites.
func TestWriteOnlyOpenIsTracked(t *testing.T) {
	d := mounted(t, Strict)
	d.durable("f", "durable")
	f, err := os.OpenFile(d.p("f"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := f.Write([]byte(" appended")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	f, err = os.OpenFile(d.p("f"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := f.WriteAt([]byte("DUR"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if b, _ := os.ReadFile(d.p("f")); string(b) != "DURable appended" {
		t.Fatalf("f while mounted = %q", b)
	}
	d.cut()
	d.expect("f", "durable")
}
