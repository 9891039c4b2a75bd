package lazyfs

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// disk is a backing directory and a mount point for one test. Its cleanup
// unmounts, and fails the test if anything is still mounted there.
type disk struct {
	t       *testing.T
	model   Model
	backing string
	mnt     string
	fs      *FS
}

// newDisk prepares a disk without mounting it, so that a test can seed the
// backing directory with what must be durable at mount.
func newDisk(t *testing.T, model Model) *disk {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("CONCORD_REQUIRE_ROBUSTNESS") != "" {
		skip = t.Fatalf // make robustness, and CI: a skipped suite proves nothing
	}
	if os.Geteuid() != 0 {
		skip("lazyfs mounts with mount(2) and needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		skip("no /dev/fuse: %v", err)
	}
	d := &disk{t: t, model: model, backing: t.TempDir(), mnt: t.TempDir()}
	// Registered after TempDir's, so it runs before the directories go.
	t.Cleanup(d.cleanup)
	return d
}

// mounted is newDisk, mounted.
func mounted(t *testing.T, model Model) *disk {
	t.Helper()
	d := newDisk(t, model)
	d.mount()
	return d
}

func (d *disk) cleanup() {
	if d.fs != nil {
		if err := d.fs.Unmount(); err != nil {
			d.t.Errorf("unmount: %v", err)
		}
		d.fs = nil
	}
	if isMounted(d.t, d.mnt) {
		_ = syscall.Unmount(d.mnt, syscall.MNT_DETACH)
		d.t.Errorf("%s was left mounted", d.mnt)
	}
}

func (d *disk) mount() {
	d.t.Helper()
	f, err := Mount(d.backing, d.mnt, d.model)
	if err != nil {
		d.t.Fatalf("mount: %v", err)
	}
	d.fs = f
}

// cut cuts the power; the disk is then unmounted, its backing directory
// holding what survived.
func (d *disk) cut() {
	d.t.Helper()
	f := d.fs
	d.fs = nil
	if err := f.PowerCut(); err != nil {
		d.t.Fatalf("power cut: %v", err)
	}
	if isMounted(d.t, d.mnt) {
		d.t.Fatalf("%s still mounted after the power cut", d.mnt)
	}
}

// isMounted reports whether /proc/self/mountinfo lists dir as a mount point.
func isMounted(t *testing.T, dir string) bool {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatalf("read mountinfo: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && unescapeMountinfo(fields[4]) == dir {
			return true
		}
	}
	return false
}

// unescapeMountinfo undoes the octal escapes (\040 for a space) of a
// mountinfo path.
func unescapeMountinfo(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// p is name's path in the mount.
func (d *disk) p(name string) string { return filepath.Join(d.mnt, name) }

// writeFile creates or replaces name in the mount with data.
func (d *disk) writeFile(name, data string) {
	d.t.Helper()
	if err := os.WriteFile(d.p(name), []byte(data), 0o644); err != nil {
		d.t.Fatalf("write %s: %v", name, err)
	}
}

// writeAt writes data at off into the existing file name.
func (d *disk) writeAt(name string, off int64, data []byte) {
	d.t.Helper()
	f, err := os.OpenFile(d.p(name), os.O_RDWR, 0)
	if err != nil {
		d.t.Fatalf("open %s: %v", name, err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, off); err != nil {
		d.t.Fatalf("write %s at %d: %v", name, off, err)
	}
}

// fsync fsyncs the file or directory name ("." for the root).
func (d *disk) fsync(name string) {
	d.t.Helper()
	f, err := os.Open(d.p(name))
	if err != nil {
		d.t.Fatalf("open %s to fsync: %v", name, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		d.t.Fatalf("fsync %s: %v", name, err)
	}
}

// durable writes name with data and makes both durable in any model.
func (d *disk) durable(name, data string) {
	d.t.Helper()
	d.writeFile(name, data)
	d.fsync(name)
	d.fsync(filepath.Dir(name))
}

// read reads name from the backing directory, which after a cut is the
// durable state.
func (d *disk) read(name string) (string, bool) {
	d.t.Helper()
	b, err := os.ReadFile(filepath.Join(d.backing, name))
	if os.IsNotExist(err) {
		return "", false
	}
	if err != nil {
		d.t.Fatalf("read %s: %v", name, err)
	}
	return string(b), true
}

// expect fails unless name survived with content want.
func (d *disk) expect(name, want string) {
	d.t.Helper()
	got, ok := d.read(name)
	switch {
	case !ok:
		d.t.Errorf("%s is gone, want %q", name, want)
	case got != want:
		d.t.Errorf("%s = %q, want %q", name, got, want)
	}
}

// expectGone fails if name survived.
func (d *disk) expectGone(name string) {
	d.t.Helper()
	if got, ok := d.read(name); ok {
		d.t.Errorf("%s survived with %q, want it gone", name, got)
	}
}

// expectNames fails unless directory dir of the backing holds exactly names.
func (d *disk) expectNames(dir string, names ...string) {
	d.t.Helper()
	ents, err := os.ReadDir(filepath.Join(d.backing, dir))
	if err != nil {
		d.t.Fatalf("list %s: %v", dir, err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	slices.Sort(got)
	names = slices.Clone(names)
	slices.Sort(names)
	if !slices.Equal(got, names) {
		d.t.Errorf("%s holds %q, want %q", dir, got, names)
	}
}

// expectBytes fails unless name survived with exactly want.
func (d *disk) expectBytes(name string, want []byte) {
	d.t.Helper()
	got, err := os.ReadFile(filepath.Join(d.backing, name))
	if err != nil {
		d.t.Fatalf("read %s: %v", name, err)
	}
	if len(got) != len(want) {
		d.t.Errorf("%s has %d bytes, want %d", name, len(got), len(want))
		return
	}
	if i := firstDiff(got, want); i >= 0 {
		d.t.Errorf("%s differs from the synced content first at byte %d", name, i)
	}
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
