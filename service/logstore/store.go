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
//	<data-dir>/wal/next-segment.reserve
//	                                 the next segment's room, held ahead
//	                                 (space.go)
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
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/metrics"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
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
	// OnDiskFull, if not nil, hears each change of DiskFull: its new
	// value, a cause while full and nil once there is room again. It is
	// called with the store's space lock held and must not call back.
	OnDiskFull func(full error)
}

// reserveRetry is how often a store without room for its next segment
// tries again, so that writes resume by themselves once space is freed.
const reserveRetry = time.Second

// Store is the WAL, a raft.LogStore and raft.StableStore, holding the data
// directory's lock until Close.
//
// It reopens the WAL when raft-wal sealed its tail segment and could not
// create the next one (see spaceFS): raft-wal would refuse every append
// from then on, and reopening is the only way it creates a missing tail.
// The lock serialises that reopen against every other call.
type Store struct {
	dir  string
	opts Options

	mu   sync.RWMutex
	w    *wal.WAL
	meta *metadb.BoltMetaDB

	space *spaceFS
	lock  *os.File
	stop  chan struct{}
	done  chan struct{}
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
	if opts.SegmentBytes == 0 {
		opts.SegmentBytes = wal.DefaultSegmentSize
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
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go s.keepReserving()
	return s, nil
}

func open(dataDir string, opts Options) (*Store, error) {
	if err := migrate(dataDir, opts.Logger, migrationPoint); err != nil {
		return nil, err
	}
	dir := filepath.Join(dataDir, DirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create the raft log directory: %w", err)
	}
	s := &Store{dir: dir, opts: opts}
	s.space = newSpaceFS(dir, int64(opts.SegmentBytes), opts.OnDiskFull)
	if err := s.openWAL(); err != nil {
		return nil, err
	}
	return s, nil
}

// openWAL opens the WAL in s.dir. It owns the meta store so that it can
// close it when wal.Open fails after opening it: the bbolt file stays
// locked while open. A store without s.space (the migration's copy) uses
// raft-wal's own file system.
func (s *Store) openWAL() error {
	meta := &metadb.BoltMetaDB{}
	// raft-wal's option type is unexported: a filer is always given, its
	// own file system where there is no reserve.
	var vfs types.VFS = fs.New()
	if s.space != nil {
		vfs = s.space
	}
	w, err := wal.Open(s.dir, wal.WithMetaStore(meta), wal.WithLogger(s.opts.Logger.Named("wal")),
		wal.WithMetricsCollector(s.opts.Metrics), wal.WithSegmentSize(s.opts.SegmentBytes),
		wal.WithSegmentFiler(segment.NewFiler(s.dir, vfs)))
	if err != nil {
		meta.Close()
		if full := s.DiskFull(); full != nil {
			return fmt.Errorf("open the raft log %s: %w (%w)", s.dir, err, full)
		}
		return fmt.Errorf("open the raft log %s: %w", s.dir, err)
	}
	s.w, s.meta = w, meta
	return nil
}

// openPlain opens a WAL in dir with raft-wal's own file system and no
// reserve: the migration's temporary copy, which is renamed into place.
func openPlain(dir string, opts Options) (*Store, error) {
	s := &Store{dir: dir, opts: opts}
	if err := s.openWAL(); err != nil {
		return nil, err
	}
	return s, nil
}

// DiskFull returns why the disk has no room for the next log segment, nil
// while it has. The node takes no new state while it is not nil.
func (s *Store) DiskFull() error {
	if s.space == nil {
		return nil
	}
	return s.space.Full()
}

// keepReserving checks the space every reserveRetry: it notices a disk
// filled by something else, and makes the reserve again once there is
// room.
func (s *Store) keepReserving() {
	defer close(s.done)
	t := time.NewTicker(reserveRetry)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.space.Check()
		}
	}
}

// FirstIndex implements raft.LogStore.
func (s *Store) FirstIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.w.FirstIndex()
}

// LastIndex implements raft.LogStore.
func (s *Store) LastIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.w.LastIndex()
}

// GetLog reads the entry at index. Below FirstIndex it is
// raft.ErrLogNotFound: raft-wal v0.4.1 goes on serving entries a head
// truncation (compaction after a snapshot) removed while they are still in
// the open tail segment, and until the next restart. Raft sends a follower
// a snapshot only when the entry before the ones it needs is not found, so
// without this a follower far behind replays the whole old log instead.
func (s *Store) GetLog(index uint64, l *raft.Log) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	first, err := s.w.FirstIndex()
	if err != nil {
		return err
	}
	if first == 0 || index < first {
		return raft.ErrLogNotFound
	}
	return s.w.GetLog(index, l)
}

// StoreLog implements raft.LogStore.
func (s *Store) StoreLog(l *raft.Log) error {
	return s.StoreLogs([]*raft.Log{l})
}

// StoreLogs appends logs. When raft-wal refuses because its tail is sealed
// (a rotation could not create the next segment), it reopens the WAL once
// the reserve exists again and appends there; until then the error is
// ErrDiskFull's, at once.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	s.mu.RLock()
	err := s.w.StoreLogs(logs)
	s.mu.RUnlock()
	if errors.Is(err, wal.ErrSealed) && s.space != nil {
		if rerr := s.reopenSealed(); rerr != nil {
			return fmt.Errorf("append to the raft log: %w", rerr)
		}
		s.mu.RLock()
		err = s.w.StoreLogs(logs)
		s.mu.RUnlock()
	}
	if err != nil && s.space != nil {
		s.space.NoteAppendError(err)
		if full := s.space.Full(); full != nil && isNoSpace(err) {
			return fmt.Errorf("append to the raft log: %w", full)
		}
	}
	return err
}

// reopenSealed reopens a WAL whose tail is sealed, so that raft-wal's
// open creates the missing tail from the reserve. Without a reserve it
// changes nothing and returns why: closing the WAL first would leave a
// store that cannot be reopened.
func (s *Store) reopenSealed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.space.Check(); err != nil {
		return err
	}
	s.opts.Logger.Warn("reopening the raft log: its last segment is sealed and the next one was never created; space is available again")
	if err := s.closeWAL(); err != nil {
		return err
	}
	return s.openWAL()
}

// DeleteRange implements raft.LogStore.
func (s *Store) DeleteRange(min, max uint64) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.w.DeleteRange(min, max)
}

// IsMonotonic implements raft.MonotonicLogStore: the WAL takes no gaps.
func (s *Store) IsMonotonic() bool { return true }

// Set implements raft.StableStore.
func (s *Store) Set(key, val []byte) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.w.Set(key, val)
}

// Get implements raft.StableStore.
func (s *Store) Get(key []byte) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.w.Get(key)
}

// SetUint64 implements raft.StableStore.
func (s *Store) SetUint64(key []byte, val uint64) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.w.SetUint64(key, val)
}

// GetUint64 implements raft.StableStore.
func (s *Store) GetUint64(key []byte) (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.w.GetUint64(key)
}

func (s *Store) closeWAL() error {
	err := s.w.Close()
	if cerr := s.meta.Close(); err == nil && cerr != nil { // a no-op once closed
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("close the raft log: %w", err)
	}
	return nil
}

// Close closes the WAL (and its meta store) and releases the lock.
func (s *Store) Close() error {
	if s.stop != nil {
		close(s.stop)
		<-s.done
		s.stop = nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.closeWAL()
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
