package lazyfs

import (
	"os"
	"testing"
)

// Writes after the last fsync of a file are lost; those before it stay.
func TestStrictWritesAfterFsyncAreLost(t *testing.T) {
	d := mounted(t, Strict)
	d.durable("f", "durable-1")
	d.writeAt("f", 0, []byte("CHANGED"))
	d.writeAt("f", 9, []byte("-and-longer"))
	d.cut()
	d.expect("f", "durable-1")
}

// A new file's name needs an fsync of its directory; its data an fsync of
// the file.
func TestStrictNewFileNeedsDirFsync(t *testing.T) {
	t.Run("file only", func(t *testing.T) {
		d := mounted(t, Strict)
		d.writeFile("f", "data")
		d.fsync("f")
		d.cut()
		d.expectGone("f")
		d.expectNames(".")
	})
	t.Run("file and directory", func(t *testing.T) {
		d := mounted(t, Strict)
		d.writeFile("f", "data")
		d.fsync("f")
		d.fsync(".")
		d.cut()
		d.expect("f", "data")
	})
}

// The torn write: the name is durable but the data never was.
func TestStrictDirFsyncWithoutFileFsyncLeavesEmptyFile(t *testing.T) {
	d := mounted(t, Strict)
	d.writeFile("f", "never synced")
	d.fsync(".")
	d.cut()
	d.expect("f", "")
}

// A rename without a directory fsync is undone: both old names are back.
func TestStrictRenameWithoutDirFsyncIsUndone(t *testing.T) {
	d := mounted(t, Strict)
	d.durable("a", "old a")
	d.durable("a.tmp", "new a")
	if err := os.Rename(d.p("a.tmp"), d.p("a")); err != nil {
		t.Fatal(err)
	}
	d.cut()
	d.expectNames(".", "a", "a.tmp")
	d.expect("a", "old a")
	d.expect("a.tmp", "new a")
}

// An unlink without a directory fsync is undone, with the file's durable
// data, even after other fsyncs (which clean up the graveyard) and a new
// file under the same name.
func TestStrictUnlinkWithoutDirFsyncIsUndone(t *testing.T) {
	d := mounted(t, Strict)
	d.durable("f", "durable")
	d.writeAt("f", 0, []byte("XX"))
	if err := os.Remove(d.p("f")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(d.p("sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	d.fsync("sub")
	d.durable("sub/g", "g")
	d.writeFile("f", "impostor")
	d.fsync("f")
	d.cut()
	d.expectNames(".", "f")
	d.expect("f", "durable")
}

// A new directory is reachable only once its parent is fsynced, however
// well its own contents were synced.
func TestStrictNewDirNeedsParentFsync(t *testing.T) {
	for _, parent := range []bool{false, true} {
		name := "parent not synced"
		if parent {
			name = "parent synced"
		}
		t.Run(name, func(t *testing.T) {
			d := mounted(t, Strict)
			if err := os.Mkdir(d.p("sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			d.writeFile("sub/f", "inside")
			d.fsync("sub/f")
			d.fsync("sub")
			if parent {
				d.fsync(".")
			}
			d.cut()
			if parent {
				d.expect("sub/f", "inside")
			} else {
				d.expectNames(".")
			}
		})
	}
}

// An rmdir (and the unlinks that emptied the directory) without fsyncs is
// undone, even when new directories may reuse the inode number.
func TestStrictRmdirIsUndone(t *testing.T) {
	d := newDisk(t, Strict)
	if err := os.MkdirAll(d.backing+"/dir", 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.backing+"/dir/f", []byte("from before the mount"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.mount()
	if err := os.Remove(d.p("dir/f")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(d.p("dir")); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"x", "y", "z"} {
		if err := os.Mkdir(d.p(n), 0o755); err != nil {
			t.Fatal(err)
		}
		d.fsync(n)
	}
	d.cut()
	d.expectNames(".", "dir")
	d.expect("dir/f", "from before the mount")
	if st, err := os.Stat(d.backing + "/dir"); err != nil || st.Mode().Perm() != 0o750 {
		t.Errorf("dir came back as %v, %v; want mode 0750", st, err)
	}
}

// Fsyncing a directory makes removals durable too.
func TestStrictDirFsyncMakesRemovalsDurable(t *testing.T) {
	d := mounted(t, Strict)
	d.durable("gone", "x")
	d.durable("a.tmp", "new")
	if err := os.Remove(d.p("gone")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(d.p("a.tmp"), d.p("a")); err != nil {
		t.Fatal(err)
	}
	d.fsync(".")
	d.cut()
	d.expectNames(".", "a")
	d.expect("a", "new")
}

// Hard links are refused rather than modelled.
func TestLinkIsRefused(t *testing.T) {
	d := mounted(t, Strict)
	d.writeFile("f", "x")
	if err := os.Link(d.p("f"), d.p("g")); err == nil {
		t.Fatal("link succeeded; lazyfs does not model hard links")
	}
}

// A new directory's own entries need its own fsync, even once its name is
// durable.
func TestStrictNewDirEntriesNeedItsFsync(t *testing.T) {
	d := mounted(t, Strict)
	if err := os.Mkdir(d.p("sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	d.writeFile("sub/f", "inside")
	d.fsync("sub/f")
	d.fsync(".")
	d.cut()
	d.expectNames(".", "sub")
	d.expectNames("sub")
}
