// Package logstore opens a node's Raft log store and stable store:
// hashicorp/raft-wal, the append-only segment log HashiCorp wrote for
// Consul, in <data-dir>/wal.
//
// # Layout
//
//	<data-dir>/wal/wal-meta.db       bbolt: the list of segments, and the
//	                                 stable store (term, vote)
//	<data-dir>/wal/<base>-<id>.wal   segment files of 64 MiB, preallocated;
//	                                 each append batch ends in a commit frame
//	                                 with a CRC of the batch, then one fsync
//	<data-dir>/raft.db.migrated      the log of a release before the WAL,
//	                                 kept after migration (see below)
//
// A batch that a crash tore (power lost during its write) fails its CRC or
// lacks its commit frame; raft-wal drops it on open and keeps every batch
// before it. StoreLogs returns only after the batch's fsync, and Raft
// acknowledges nothing before then, so what is dropped was never
// acknowledged.
//
// # Migration
//
// Releases before the WAL kept the log and the stable store in
// <data-dir>/raft.db (bbolt; buckets "logs" and "stable"). Open migrates
// such a directory once, before it opens the WAL:
//
//  1. remove any <data-dir>/wal.migrating left by an earlier attempt;
//  2. create it and open a WAL there; copy the stable keys, then every log
//     entry in order, in batches (each batch fsynced); check the first and
//     last index against raft.db; close the WAL and fsync the directory;
//  3. rename raft.db to raft.db.migrated, fsync <data-dir>;
//  4. rename wal.migrating to wal, fsync <data-dir>.
//
// Every crash leaves a state that the next start recognises: raft.db
// present and no wal means steps 1-3 run again from the start (step 1
// throws away a partial copy); wal.migrating and raft.db.migrated present,
// neither raft.db nor wal, means the copy is complete (step 3 only happens
// after it) and step 4 runs. raft.db and wal both present never follows
// from a crash (raft.db is renamed before wal appears): it means an
// operator put raft.db back, and Open refuses to guess which log is
// current (ErrTwoLogs).
//
// raft.db.migrated is kept for one release so that an operator can go back:
// stop the node, move wal away and raft.db.migrated back to raft.db, and
// start the previous release. It then has the log as it was at the upgrade;
// what was written since is only in wal.
package logstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/metrics"
)

// Names inside the data directory.
const (
	// DirName is the WAL's directory.
	DirName = "wal"
	// LegacyName is the bbolt log of releases before the WAL.
	LegacyName = "raft.db"
	// MigratedName is LegacyName after migration.
	MigratedName = "raft.db.migrated"
	// tempName is the WAL being written by a migration.
	tempName = "wal.migrating"
)

var (
	// ErrLocked reports a data directory that another process has open.
	ErrLocked = errors.New("data directory is in use by another process")
	// ErrTwoLogs reports a data directory holding both the old and the new
	// log, which no crash produces.
	ErrTwoLogs = errors.New("data directory holds both raft.db and wal")
	// ErrLayout reports a leftover migration directory that no crash
	// explains.
	ErrLayout = errors.New("data directory holds an unfinished migration without its source")
)

// Options tune Open.
type Options struct {
	// Logger receives the WAL's and the migration's log lines; nil
	// discards them.
	Logger hclog.Logger
	// Metrics receives the WAL's counters (wal.MetricDefinitions); nil
	// drops them.
	Metrics metrics.Collector
	// SegmentBytes is the size of each segment file; 0 is raft-wal's
	// default (64 MiB). Segments already written keep their size.
	SegmentBytes int
}

// Store is the WAL, a raft.LogStore and raft.StableStore, holding the data
// directory's lock until Close.
type Store struct {
	*wal.WAL
	meta *metadb.BoltMetaDB
	lock *os.File
}

var (
	_ raft.LogStore          = (*Store)(nil)
	_ raft.StableStore       = (*Store)(nil)
	_ raft.MonotonicLogStore = (*Store)(nil)
)

// Open locks dataDir, migrates a raft.db found there (see the package
// comment), and opens the WAL, creating it on first start.
func Open(dataDir string, opts Options) (*Store, error) {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Metrics == nil {
		opts.Metrics = &metrics.NoOpCollector{}
	}
	lock, err := lockDir(dataDir)
	if err != nil {
		return nil, err
	}
	s, err := open(dataDir, opts)
	if err != nil {
		lock.Close()
		return nil, err
	}
	s.lock = lock
	return s, nil
}

func open(dataDir string, opts Options) (*Store, error) {
	if err := migrate(dataDir, opts.Logger, nil); err != nil {
		return nil, err
	}
	dir := filepath.Join(dataDir, DirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create the raft log directory: %w", err)
	}
	return openWAL(dir, opts)
}

// openWAL opens the WAL in dir. It owns the meta store so that it can close
// it when wal.Open fails after opening it: the bbolt file stays locked
// while open.
func openWAL(dir string, opts Options) (*Store, error) {
	meta := &metadb.BoltMetaDB{}
	w, err := wal.Open(dir, wal.WithMetaStore(meta), wal.WithLogger(opts.Logger.Named("wal")), wal.WithMetricsCollector(opts.Metrics), wal.WithSegmentSize(opts.SegmentBytes))
	if err != nil {
		meta.Close()
		return nil, fmt.Errorf("open the raft log %s: %w", dir, err)
	}
	return &Store{WAL: w, meta: meta}, nil
}

// GetLog reads the entry at index. Below FirstIndex it is
// raft.ErrLogNotFound: raft-wal v0.4.1 goes on serving entries a head
// truncation (compaction after a snapshot) removed while they are still in
// the open tail segment, and until the next restart. Raft sends a follower
// a snapshot only when the entry before the ones it needs is not found, so
// without this a follower far behind replays the whole old log instead.
func (s *Store) GetLog(index uint64, l *raft.Log) error {
	first, err := s.WAL.FirstIndex()
	if err != nil {
		return err
	}
	if first == 0 || index < first {
		return raft.ErrLogNotFound
	}
	return s.WAL.GetLog(index, l)
}

// Close closes the WAL (and its meta store) and releases the lock.
func (s *Store) Close() error {
	err := s.WAL.Close()
	if cerr := s.meta.Close(); err == nil && cerr != nil { // a no-op once closed
		err = cerr
	}
	if err != nil {
		err = fmt.Errorf("close the raft log: %w", err)
	}
	if s.lock != nil {
		s.lock.Close() // closing the descriptor drops the flock
		s.lock = nil
	}
	return err
}

// lockDir takes an exclusive flock on the directory itself, so that a
// second process on the same data directory fails at once: the WAL's bbolt
// file would otherwise make it wait forever.
func lockDir(dataDir string) (*os.File, error) {
	f, err := os.Open(dataDir)
	if err != nil {
		return nil, fmt.Errorf("lock the data directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, dataDir)
		}
		return nil, fmt.Errorf("lock the data directory %s: %w", dataDir, err)
	}
	return f, nil
}

// syncDir makes dir's entries (creations, renames) durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
