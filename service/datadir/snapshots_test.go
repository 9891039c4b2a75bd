package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// The store the node opens writes a snapshot that a store opened again
// lists and reads back whole, and creates its snapshots directory itself.
func TestSnapshotStoreRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := Create(dir); err != nil {
		t.Fatal(err)
	}
	store, err := OpenSnapshotStore(dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	snapshotOf(t, store, 7, "the state", false)
	again, err := OpenSnapshotStore(dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if index, data := openSnapshot(t, again); index != 7 || data != "the state" {
		t.Fatalf("read back the snapshot at %d holding %q", index, data)
	}
}

// A sink closed twice (the node's snapshot closes it when persisted, and
// Raft closes it again) succeeds both times, as FileSnapshotSink's does.
func TestSnapshotSinkClosedTwice(t *testing.T) {
	store, err := OpenSnapshotStore(t.TempDir(), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	_, trans := raft.NewInmemTransport("127.0.0.1:1")
	defer trans.Close()
	sink, err := store.Create(raft.SnapshotVersionMax, 5, 1, raft.Configuration{}, 5, trans)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write([]byte("state")); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		if err := sink.Close(); err != nil {
			t.Fatalf("close %d: %v", i, err)
		}
	}
	if index, data := openSnapshot(t, store); index != 5 || data != "state" {
		t.Fatalf("the snapshot at %d holding %q", index, data)
	}
}

// A snapshot whose directory cannot be synced (here: it is gone) fails
// its Close with the reason and is not put in place; the previous one
// stays the newest.
func TestSnapshotStoreCloseFailsWithoutTheSync(t *testing.T) {
	dir := t.TempDir()
	store, err := OpenSnapshotStore(dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	snapshotOf(t, store, 10, "first", false)
	_, trans := raft.NewInmemTransport("127.0.0.1:1")
	defer trans.Close()
	sink, err := store.Create(raft.SnapshotVersionMax, 20, 1, raft.Configuration{}, 20, trans)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write([]byte("second")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, SnapshotDir, sink.ID()+".tmp")); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err == nil || !strings.Contains(err.Error(), "sync directory") {
		t.Fatalf("close of a snapshot whose directory is gone: %v", err)
	}
	if index, data := openSnapshot(t, store); index != 10 || data != "first" {
		t.Fatalf("after the failed close: the snapshot at %d holding %q", index, data)
	}
}

// What a crash or a power cut can leave of snapshots is removed: a .tmp
// directory, and finished directories with a file missing or empty. A
// whole snapshot stays, and still reads.
func TestRemoveTornSnapshots(t *testing.T) {
	dir := t.TempDir()
	if removed, err := RemoveTornSnapshots(dir); err != nil || removed != nil {
		t.Fatalf("no snapshots directory: %v, %v", removed, err)
	}
	store, err := OpenSnapshotStore(dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	snapshotOf(t, store, 10, "whole", false)
	snaps := filepath.Join(dir, SnapshotDir)
	torn := map[string]map[string]string{
		"1-20-1.tmp":   {"meta.json": "{}", "state.bin": "x"},
		"1-30-2":       {},                                   // names lost, as a power cut leaves them
		"1-40-3":       {"meta.json": "", "state.bin": ""},   // names kept, data lost
		"1-50-4":       {"meta.json": "{}"},                  // state.bin lost
		"1-60-5":       {"meta.json": "{}", "state.bin": ""}, // state.bin empty
		"not-a-dir.go": nil,
	}
	for name, files := range torn {
		p := filepath.Join(snaps, name)
		if files == nil {
			if err := os.WriteFile(p, []byte("a file"), 0o600); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		for f, content := range files {
			if err := os.WriteFile(filepath.Join(p, f), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	removed, err := RemoveTornSnapshots(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range removed {
		names = append(names, filepath.Base(p))
	}
	slices.Sort(names)
	if want := []string{"1-20-1.tmp", "1-30-2", "1-40-3", "1-50-4", "1-60-5"}; !slices.Equal(names, want) {
		t.Fatalf("removed %v, want %v", names, want)
	}
	left := snapshotDirs(t, dir)
	slices.Sort(left)
	if len(left) != 2 || left[1] != "not-a-dir.go" {
		t.Fatalf("left %v", left)
	}
	if index, data := openSnapshot(t, store); index != 10 || data != "whole" {
		t.Fatalf("the whole snapshot: at %d holding %q", index, data)
	}
}

// A log compacted past every readable snapshot is refused in words, not
// met with raft.NewRaft's panic; a log the newest snapshot covers, an
// uncompacted log and an empty one are accepted.
func TestCheckLogCovered(t *testing.T) {
	dir := t.TempDir()
	store, err := OpenSnapshotStore(dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ first, last uint64 }{{0, 0}, {1, 500}} {
		if err := CheckLogCovered(dir, store, c.first, c.last); err != nil {
			t.Fatalf("log %d..%d, no snapshot: %v", c.first, c.last, err)
		}
	}
	err = CheckLogCovered(dir, store, 90, 500)
	if !errors.Is(err, ErrSnapshotMissing) || !strings.Contains(err.Error(), "entries 1 to 89 are lost") {
		t.Fatalf("log from 90, no snapshot: %v", err)
	}
	snapshotOf(t, store, 100, "state", false)
	for _, first := range []uint64{1, 50, 101} {
		if err := CheckLogCovered(dir, store, first, 500); err != nil {
			t.Fatalf("log from %d, snapshot at 100: %v", first, err)
		}
	}
	if err := CheckLogCovered(dir, store, 102, 500); !errors.Is(err, ErrSnapshotMissing) {
		t.Fatalf("log from 102, snapshot at 100: %v", err)
	}
}
