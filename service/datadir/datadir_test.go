package datadir

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
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
