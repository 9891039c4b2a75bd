package lazyfs

import (
	"os"
	"path/filepath"
	"testing"
)

// A disk survives several cuts at the same mount point, and nothing stays
// mounted in between.
func TestRemountAfterPowerCut(t *testing.T) {
	d := mounted(t, Strict)
	d.durable("f", "one")
	d.writeAt("f", 0, []byte("lost"))
	d.cut()

	d.mount()
	if ents, err := os.ReadDir(d.mnt); err != nil || len(ents) != 1 || ents[0].Name() != "f" {
		t.Fatalf("listing through the mount after remount: %v, %v", ents, err)
	}
	if b, err := os.ReadFile(d.p("f")); err != nil || string(b) != "one" {
		t.Fatalf("f after remount = %q, %v; want \"one\"", b, err)
	}
	d.writeAt("f", 3, []byte(",two"))
	d.fsync("f")
	d.writeFile("g", "lost too")
	d.cut()
	d.expectNames(".", "f")
	d.expect("f", "one,two")

	d.mount()
	d.cut()
	d.expect("f", "one,two")
	d.expectNames(".", "f")
}

// A clean unmount keeps everything, synced or not, and cleans up after
// itself.
func TestUnmountKeepsEverything(t *testing.T) {
	d := mounted(t, Strict)
	d.writeFile("f", "never synced")
	if err := os.Remove(d.p("f")); err != nil {
		t.Fatal(err)
	}
	d.writeFile("f", "replacement")
	if err := d.fs.Unmount(); err != nil {
		t.Fatal(err)
	}
	if err := d.fs.Unmount(); err != nil {
		t.Fatalf("second unmount: %v", err)
	}
	if err := d.fs.PowerCut(); err == nil {
		t.Error("power cut after unmount succeeded")
	}
	d.fs = nil
	if isMounted(t, d.mnt) {
		t.Fatal("still mounted after Unmount")
	}
	d.expect("f", "replacement")
	work := filepath.Join(filepath.Dir(d.backing), "."+filepath.Base(d.backing)+".lazyfs")
	if _, err := os.Stat(work); err == nil {
		t.Error("work directory left behind")
	}
}
