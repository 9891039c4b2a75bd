// Package datadir knows the files a node keeps in its data directory
// beside Raft's own stores: the node-id and cluster-id files, and how many
// Raft snapshots are kept. The node (package service) and the offline
// restore (package backupfile), which seeds a data directory without
// running a node, both use it, so the two cannot disagree on a file's name
// or content.
package datadir

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// File names in the data directory. They cannot change without breaking
// every existing data directory.
const (
	// NodeIDFile holds the node's Raft id, recorded on first start.
	NodeIDFile = "node-id"
	// ClusterIDFile holds the cluster id, made at bootstrap and kept by
	// every member, so a node of one cluster cannot join another.
	ClusterIDFile = "cluster-id"
)

// SnapshotsRetained is how many Raft snapshots the node's file snapshot
// store keeps; a restore opens the store with the same retention. One is
// all Raft needs: its FileSnapshotStore writes a new snapshot into a
// temporary directory, syncs it, renames it into place, syncs the parent,
// and only then reaps the snapshots beyond this count
// (FileSnapshotSink.Close in hashicorp/raft), and Raft compacts its log
// only after that; a crash during the write leaves the previous snapshot
// and the log after it. Keeping a second one would only be a spare copy
// of the state, as large as the first.
const SnapshotsRetained = 1

// ErrNodeIDMismatch reports a data directory that belongs to another node.
var ErrNodeIDMismatch = errors.New("data directory belongs to another node")

// ErrTornFile reports a file of the data directory that a crash or power
// cut tore while it was written: empty, or cut short of the newline that
// ends every such file. Releases before the one that made these writes
// durable could leave one (the name reached the disk, the content not).
var ErrTornFile = errors.New("torn file in the data directory")

// CheckNodeID records the node id in dir on first start and refuses a
// different one later (ErrNodeIDMismatch): Raft knows this node by that id.
// The record is durable before anything else is written (writeFileSync),
// so a power cut leaves no file or the whole one; a torn file from an
// older release is ErrTornFile, with what to do.
func CheckNodeID(dir, id string) error {
	path := filepath.Join(dir, NodeIDFile)
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := writeFileSync(path, []byte(id+"\n")); err != nil {
			return fmt.Errorf("record node id: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("read node id: %w", err)
	}
	if !bytes.HasSuffix(b, []byte("\n")) || len(bytes.TrimSpace(b)) == 0 {
		return fmt.Errorf("%w: %s holds %q, not a whole node id: a crash or power cut during the node's first start tore it. "+
			"If this directory was first started as node %q, delete that file and start again; "+
			"otherwise start it with the --node-id it was first started with, or remove the directory and join the cluster anew",
			ErrTornFile, path, b, id)
	}
	if got := string(bytes.TrimSpace(b)); got != id {
		return fmt.Errorf("%w: %s holds node %q, not %q", ErrNodeIDMismatch, dir, got, id)
	}
	return nil
}

// Create makes the data directory dir if it does not exist and makes its
// name durable (a sync of the directory that holds it): what Raft and this
// package write inside must not outlive, after a power cut, the name of
// the directory that holds it.
func Create(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	if err := SyncDir(filepath.Dir(dir)); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	return nil
}

// SyncDir makes the names in dir durable: on a filesystem that keeps
// directory changes apart from file data (every one but ext4 and xfs in
// their default modes), a created, renamed or removed name survives a
// power cut only once its directory is synced.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err == nil {
		err = d.Sync()
		d.Close()
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// ReadClusterID returns the cluster id recorded in dir, or "" when there
// is none.
func ReadClusterID(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, ClusterIDFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read cluster id: %w", err)
	}
	return string(bytes.TrimSpace(b)), nil
}

// WriteClusterID records the cluster id crash-safely: a temporary file,
// synced, renamed over the old one, and the directory synced, so that a
// crash leaves the old id or the new one, never an empty file.
func WriteClusterID(dir, id string) error {
	path := filepath.Join(dir, ClusterIDFile)
	if err := writeFileSync(path, []byte(id+"\n")); err != nil {
		return fmt.Errorf("record cluster id: %w", err)
	}
	return nil
}

// writeFileSync replaces path with data durably.
func writeFileSync(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// NewClusterID makes a cluster id.
func NewClusterID() (string, error) { return RandomID("cluster id") }

// RandomID returns an id of the shape every id a node makes has (a
// cluster id, a backup id): 8 random bytes in lowercase hex. what names
// the id in the error.
func RandomID(what string) (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make a %s: %w", what, err)
	}
	return hex.EncodeToString(b), nil
}

// ValidID reports whether id has the shape RandomID gives, which also
// makes it a plain file name.
func ValidID(id string) bool { return len(id) == 16 && IsLowerHex(id) }

// IsLowerHex reports whether s holds only the digits 0-9 and a-f.
func IsLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// A Raft snapshot of a node starts with the index of the last entry its
// state has applied, 8 bytes big-endian, and then the fsm snapshot: on
// restore the node knows which entries the state already holds. The node
// writes this frame, and so does offline restore when it seeds a cluster.
const snapshotFrameLen = 8

// WriteSnapshotFrame writes the frame that starts a Raft snapshot.
func WriteSnapshotFrame(w io.Writer, applied uint64) (int, error) {
	var frame [snapshotFrameLen]byte
	binary.BigEndian.PutUint64(frame[:], applied)
	return w.Write(frame[:])
}

// ReadSnapshotFrame reads the frame that starts a Raft snapshot and returns
// the applied index it holds.
func ReadSnapshotFrame(r io.Reader) (uint64, error) {
	var frame [snapshotFrameLen]byte
	if _, err := io.ReadFull(r, frame[:]); err != nil {
		return 0, fmt.Errorf("read applied index: %w", err)
	}
	return binary.BigEndian.Uint64(frame[:]), nil
}
