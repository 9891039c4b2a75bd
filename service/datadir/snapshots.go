package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/service/failpoint"
)

// SnapshotDir is the directory of the data directory that holds Raft's
// snapshots, one subdirectory each (hashicorp/raft's FileSnapshotStore).
const SnapshotDir = "snapshots"

// snapshotTmpSuffix marks a snapshot FileSnapshotStore is still writing.
const snapshotTmpSuffix = ".tmp"

// ErrSnapshotMissing reports a log that was compacted past every snapshot
// the node can read: the entries the log no longer holds are nowhere.
var ErrSnapshotMissing = errors.New("no readable snapshot covers the start of the log")

// SnapshotStore is the node's Raft snapshot store: hashicorp/raft's
// FileSnapshotStore, durable on every filesystem. FileSnapshotStore (raft
// v1.8.0) syncs a snapshot's files, renames its directory into place and
// syncs the parent, but never syncs the snapshot's own directory, so on a
// filesystem that keeps names apart from data until their directory is
// synced, a power cut after Raft compacted its log can leave the renamed
// directory without the names of its files: the only copy of the entries
// the log dropped is gone, and raft.NewRaft panics on every start. The
// sink this store hands out syncs the snapshot's directory before
// FileSnapshotStore renames it. Both files are created when the snapshot
// is (Create writes meta.json and opens state.bin), and Close only
// rewrites them in place, so that one sync makes both names durable.
type SnapshotStore struct {
	*raft.FileSnapshotStore
	path string // the snapshots directory
}

var _ raft.SnapshotStore = (*SnapshotStore)(nil)

// OpenSnapshotStore opens the snapshot store in the data directory dir,
// creating its snapshots directory durably on first use.
func OpenSnapshotStore(dir string, logger hclog.Logger) (*SnapshotStore, error) {
	path := filepath.Join(dir, SnapshotDir)
	_, statErr := os.Stat(path)
	fs, err := raft.NewFileSnapshotStoreWithLogger(dir, SnapshotsRetained, logger)
	if err != nil {
		return nil, fmt.Errorf("snapshot store: %w", err)
	}
	if statErr != nil {
		if err := SyncDir(dir); err != nil {
			return nil, fmt.Errorf("snapshot store: %w", err)
		}
	}
	return &SnapshotStore{FileSnapshotStore: fs, path: path}, nil
}

// Create starts a snapshot whose Close makes it durable before it is put
// in place.
func (s *SnapshotStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration, configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return &durableSink{SnapshotSink: sink, dir: filepath.Join(s.path, sink.ID()+snapshotTmpSuffix)}, nil
}

// durableSink syncs the snapshot's directory before the inner sink's Close
// renames it into place.
type durableSink struct {
	raft.SnapshotSink
	dir    string
	closed bool
}

// Close makes the snapshot's file names durable, then lets
// FileSnapshotStore finish it (sync the files, rename, sync the parent).
// Like FileSnapshotSink's, a second Close does nothing: the node's
// snapshot closes its sink when persisted, and Raft closes it again.
func (k *durableSink) Close() error {
	if k.closed {
		return k.SnapshotSink.Close()
	}
	k.closed = true
	failpoint.Inject(failpoint.SnapshotBeforeRename)
	if err := SyncDir(k.dir); err != nil {
		_ = k.SnapshotSink.Cancel()
		return fmt.Errorf("snapshot: %w", err)
	}
	return k.SnapshotSink.Close()
}

// Write writes the snapshot's data (a failpoint before each write).
func (k *durableSink) Write(p []byte) (int, error) {
	failpoint.Inject(failpoint.SnapshotWrite)
	return k.SnapshotSink.Write(p)
}

// RemoveTornSnapshots deletes what a crash or power cut left of snapshots
// in the data directory dir, and returns the paths it removed: directories
// still named .tmp (FileSnapshotStore skips them but never deletes them,
// so each crash during a snapshot write would leave a snapshot's worth of
// disk behind for good), and finished ones whose meta.json or state.bin is
// missing or empty (a power cut that kept the directory's name and not its
// files' — possible only for snapshots written before SnapshotStore synced
// their directories). None can be read, so none is lost by the removal;
// whether the log still holds what they covered is CheckLogCovered's
// question.
func RemoveTornSnapshots(dir string) ([]string, error) {
	path := filepath.Join(dir, SnapshotDir)
	entries, err := os.ReadDir(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look for torn snapshots: %w", err)
	}
	var removed []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		p := filepath.Join(path, e.Name())
		if !strings.HasSuffix(e.Name(), snapshotTmpSuffix) && snapshotWhole(p) {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			return removed, fmt.Errorf("remove a torn snapshot: %w", err)
		}
		removed = append(removed, p)
	}
	if len(removed) > 0 {
		if err := SyncDir(path); err != nil {
			return removed, err
		}
	}
	return removed, nil
}

// snapshotWhole reports whether a finished snapshot directory has both of
// its files, neither empty. Their content is checked when the snapshot is
// opened (meta.json's CRC of state.bin).
func snapshotWhole(dir string) bool {
	for _, name := range []string{"meta.json", "state.bin"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Size() == 0 {
			return false
		}
	}
	return true
}

// CheckLogCovered refuses a data directory whose Raft log starts after the
// newest readable snapshot ends (ErrSnapshotMissing): the entries between
// them are lost, and raft.NewRaft would panic ("log not found") on every
// start. first and last are the log's first and last index (0, 0 when it
// is empty).
func CheckLogCovered(dir string, snaps raft.SnapshotStore, first, last uint64) error {
	if last == 0 || first <= 1 {
		return nil
	}
	list, err := snaps.List()
	if err != nil {
		return fmt.Errorf("list snapshots: %w", err)
	}
	var covered uint64
	if len(list) > 0 {
		covered = list[0].Index
	}
	if covered+1 >= first {
		return nil
	}
	return fmt.Errorf("%w: the Raft log in %s starts at index %d, but the newest readable snapshot ends at %d (0: none), so entries %d to %d are lost. "+
		"A power cut or a full disk destroyed the snapshot this node compacted its log into. "+
		"This node's data cannot be used: in a cluster, remove the node (P.cluster.remove), delete its data directory and let it join again; "+
		"a single node is restored from a backup (concord snapshot restore)",
		ErrSnapshotMissing, dir, first, covered, covered+1, first-1)
}
