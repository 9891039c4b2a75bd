package lazyfs

import (
	"os"
	"testing"
)

// An fsync of a file makes its name durable too, and the names of files
// created before it, but not their data.
func TestExt4FileFsyncMakesNamesDurable(t *testing.T) {
	d := mounted(t, Ext4Ordered)
	d.writeFile("other", "not synced")
	d.writeFile("f", "synced")
	d.fsync("f")
	d.cut()
	d.expectNames(".", "f", "other")
	d.expect("f", "synced")
	d.expect("other", "")
}

// A rename followed by an fsync of an unrelated file is durable.
func TestExt4RenameDurableWithUnrelatedFsync(t *testing.T) {
	d := mounted(t, Ext4Ordered)
	d.writeFile("a", "old")
	d.fsync("a")
	d.writeFile("a.tmp", "new")
	d.fsync("a.tmp")
	if err := os.Rename(d.p("a.tmp"), d.p("a")); err != nil {
		t.Fatal(err)
	}
	d.writeFile("unrelated", "u")
	d.fsync("unrelated")
	d.cut()
	d.expectNames(".", "a", "unrelated")
	d.expect("a", "new")
}

// Changes after the last fsync are still undone: the model is not "all
// durable".
func TestExt4ChangesAfterLastFsyncAreUndone(t *testing.T) {
	d := mounted(t, Ext4Ordered)
	d.writeFile("a", "a")
	d.fsync("a")
	if err := os.Rename(d.p("a"), d.p("b")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(d.p("dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	d.writeAt("b", 0, []byte("B"))
	d.cut()
	d.expectNames(".", "a")
	d.expect("a", "a")
}

// A directory fsync counts as an fsync for every directory, and a new
// directory's entries become durable with it.
func TestExt4DirFsyncSyncsAllDirectories(t *testing.T) {
	d := mounted(t, Ext4Ordered)
	if err := os.MkdirAll(d.p("x/y"), 0o755); err != nil {
		t.Fatal(err)
	}
	d.writeFile("x/y/f", "data")
	d.fsync("x/y/f")
	if err := os.Mkdir(d.p("z"), 0o755); err != nil {
		t.Fatal(err)
	}
	d.fsync("z")
	d.cut()
	d.expectNames(".", "x", "z")
	d.expect("x/y/f", "data")
}
