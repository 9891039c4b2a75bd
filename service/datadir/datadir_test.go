package datadir

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

func TestCheckNodeID(t *testing.T) {
	dir := t.TempDir()
	if err := CheckNodeID(dir, "n1"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, NodeIDFile)); err != nil || string(b) != "n1\n" {
		t.Fatalf("node-id file %q, %v", b, err)
	}
	if err := CheckNodeID(dir, "n1"); err != nil {
		t.Fatalf("the same id again: %v", err)
	}
	if err := CheckNodeID(dir, "n2"); !errors.Is(err, ErrNodeIDMismatch) {
		t.Fatalf("another id: %v, want ErrNodeIDMismatch", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, NodeIDFile)); string(b) != "n1\n" {
		t.Fatalf("a refused id changed the file: %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, NodeIDFile+".tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the temporary file of the durable write is left: %v", err)
	}
	if err := CheckNodeID(filepath.Join(dir, "missing"), "n1"); err == nil {
		t.Fatal("a directory that does not exist was accepted")
	}
}

func TestClusterID(t *testing.T) {
	dir := t.TempDir()
	if id, err := ReadClusterID(dir); err != nil || id != "" {
		t.Fatalf("no file: %q, %v", id, err)
	}
	id, err := NewClusterID()
	if err != nil || !ValidID(id) {
		t.Fatalf("new id %q, %v", id, err)
	}
	if err := WriteClusterID(dir, id); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadClusterID(dir); err != nil || got != id {
		t.Fatalf("read back %q, %v, want %q", got, err, id)
	}
	other, _ := NewClusterID()
	if err := WriteClusterID(dir, other); err != nil {
		t.Fatal(err)
	}
	if got, _ := ReadClusterID(dir); got != other {
		t.Fatalf("replaced id reads %q, want %q", got, other)
	}
	if _, err := os.Stat(filepath.Join(dir, ClusterIDFile+".tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file left: %v", err)
	}
	if err := WriteClusterID(filepath.Join(dir, "missing"), id); err == nil {
		t.Fatal("a write into a missing directory succeeded")
	}
	// A cluster-id that cannot be read is an error, not "no id".
	odd := t.TempDir()
	if err := os.Mkdir(filepath.Join(odd, ClusterIDFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadClusterID(odd); err == nil {
		t.Fatal("an unreadable cluster-id read as no id")
	}
}

func TestIDs(t *testing.T) {
	a, err := RandomID("test id")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := RandomID("test id")
	if !ValidID(a) || !ValidID(b) || a == b {
		t.Fatalf("ids %q and %q", a, b)
	}
	for _, id := range []string{"", "0123456789abcde", "0123456789abcdef0", "0123456789ABCDEF", "../../raft.dbxxx", "0123456789abcdeg"} {
		if ValidID(id) {
			t.Errorf("%q is valid", id)
		}
	}
	if !IsLowerHex("") || !IsLowerHex("09af") || IsLowerHex("09aF") || IsLowerHex("g") {
		t.Error("IsLowerHex")
	}
}

func TestSnapshotFrame(t *testing.T) {
	var buf bytes.Buffer
	if n, err := WriteSnapshotFrame(&buf, 0x0102030405060708); err != nil || n != 8 {
		t.Fatalf("write: %d, %v", n, err)
	}
	// The frame is part of the on-disk snapshot format: its bytes must not move.
	if want := []byte{1, 2, 3, 4, 5, 6, 7, 8}; !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("frame %x, want %x", buf.Bytes(), want)
	}
	got, err := ReadSnapshotFrame(&buf)
	if err != nil || got != 0x0102030405060708 {
		t.Fatalf("read: %x, %v", got, err)
	}
	if _, err := ReadSnapshotFrame(bytes.NewReader([]byte{1, 2, 3})); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short frame: %v, want io.ErrUnexpectedEOF", err)
	}
}

// snapshotOf creates a Raft snapshot at index holding data, in the store
// the node opens (the same retention), and closes it unless cut is set,
// in which case only half of data is written and the sink is left open,
// as a crash during the write would leave it.
func snapshotOf(t *testing.T, store raft.SnapshotStore, index uint64, data string, cut bool) {
	t.Helper()
	_, trans := raft.NewInmemTransport("127.0.0.1:1")
	t.Cleanup(func() { trans.Close() })
	conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: "n1", Address: "127.0.0.1:1"}}}
	sink, err := store.Create(raft.SnapshotVersionMax, index, 1, conf, index, trans)
	if err != nil {
		t.Fatal(err)
	}
	if cut {
		if _, err := sink.Write([]byte(data[:len(data)/2])); err != nil {
			t.Fatal(err)
		}
		return
	}
	if _, err := sink.Write([]byte(data)); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
}

// snapshotDirs lists the directories of the snapshot store.
func snapshotDirs(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "snapshots"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// openSnapshot returns the data of the newest snapshot the store lists.
func openSnapshot(t *testing.T, store raft.SnapshotStore) (uint64, string) {
	t.Helper()
	list, err := store.List()
	if err != nil || len(list) == 0 {
		t.Fatalf("list: %v, %v", list, err)
	}
	_, rc, err := store.Open(list[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return list[0].Index, string(data)
}

// After two snapshots the store holds one, the newer: Raft reaps the older
// only once the newer is complete.
func TestOneSnapshotRetained(t *testing.T) {
	dir := t.TempDir()
	store, err := OpenSnapshotStore(dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	snapshotOf(t, store, 10, "first state", false)
	snapshotOf(t, store, 20, "second state", false)
	if dirs := snapshotDirs(t, dir); len(dirs) != 1 {
		t.Fatalf("snapshot directories after two snapshots: %v", dirs)
	}
	if index, data := openSnapshot(t, store); index != 20 || data != "second state" {
		t.Fatalf("the snapshot kept is at %d, holding %q", index, data)
	}
}

// A snapshot whose writing was cut short leaves the previous one whole and
// in place: a store opened again, as after a crash, lists and opens it.
func TestSnapshotCutShortKeepsThePreviousOne(t *testing.T) {
	dir := t.TempDir()
	store, err := OpenSnapshotStore(dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	snapshotOf(t, store, 10, "first state", false)
	snapshotOf(t, store, 20, "second state", true)
	if dirs := snapshotDirs(t, dir); len(dirs) != 2 || !strings.HasSuffix(dirs[1], ".tmp") && !strings.HasSuffix(dirs[0], ".tmp") {
		t.Fatalf("snapshot directories during the second write: %v", dirs)
	}
	again, err := OpenSnapshotStore(dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if index, data := openSnapshot(t, again); index != 10 || data != "first state" {
		t.Fatalf("after a cut write: the snapshot at %d, holding %q", index, data)
	}
	// The next snapshot completes, and is the only finished one.
	snapshotOf(t, again, 30, "third state", false)
	if index, data := openSnapshot(t, again); index != 30 || data != "third state" {
		t.Fatalf("the next snapshot: at %d, holding %q", index, data)
	}
	finished := 0
	for _, d := range snapshotDirs(t, dir) {
		if !strings.HasSuffix(d, ".tmp") {
			finished++
		}
	}
	if finished != 1 {
		t.Fatalf("finished snapshots: %v", snapshotDirs(t, dir))
	}
}

// A node-id file a power cut tore (the name durable, the content not, as
// releases that wrote it without a sync could leave it) is reported as
// torn, with what to do, and left alone; it is not blamed on the user as
// another node's directory.
func TestCheckNodeIDTorn(t *testing.T) {
	for _, content := range []string{"", "n", "\n", "   \n"} {
		dir := t.TempDir()
		path := filepath.Join(dir, NodeIDFile)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		err := CheckNodeID(dir, "n1")
		if !errors.Is(err, ErrTornFile) || errors.Is(err, ErrNodeIDMismatch) {
			t.Fatalf("node-id %q: %v, want ErrTornFile", content, err)
		}
		for _, words := range []string{"power cut", `first started as node "n1", delete that file`} {
			if !strings.Contains(err.Error(), words) {
				t.Fatalf("node-id %q: %q does not say %q", content, err, words)
			}
		}
		if b, _ := os.ReadFile(path); string(b) != content {
			t.Fatalf("node-id %q changed to %q", content, b)
		}
	}
}

// Create makes a data directory, nested too, and leaves an existing one
// as it is.
func TestCreate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "data")
	if err := Create(dir); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("created %v, %v", fi, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Create(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "f")); err != nil {
		t.Fatalf("an existing directory was not left alone: %v", err)
	}
	file := filepath.Join(dir, "f")
	if err := Create(filepath.Join(file, "sub")); err == nil {
		t.Fatal("a data directory under a file was made")
	}
}
