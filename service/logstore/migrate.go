package logstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/hashicorp/raft-wal/metrics"

	"github.com/concord-io/concord/service/failpoint"
)

// Migration copies in batches of this many entries or about this many
// bytes: one fsync each, bounded memory. Tests make batches smaller.
var (
	migrateBatchEntries = 4096
	migrateBatchBytes   = 4 << 20
)

// Points at which a test stops a migration as a crash would: after each
// of these is done, nothing after it.
const (
	stepTempRemoved   = "temp-removed"
	stepTempOpened    = "temp-opened"
	stepStableCopied  = "stable-copied"
	stepLogBatch      = "log-batch" // after every batch
	stepTempClosed    = "temp-closed"
	stepTempSynced    = "temp-synced"
	stepLegacyMoved   = "legacy-moved"
	stepLegacySynced  = "legacy-synced"
	stepInstalled     = "installed"
	stepInstallSynced = "install-synced"
)

// crashHook, when not nil, is called after each step; an error from it
// ends the migration there with that error and no clean-up, as a crash
// would (open files are closed, as the kernel would close them).
type crashHook func(step string) error

// migrationPoint is the hook of a real start: the failpoint that kills
// the process after a step (in a failpoints build only).
func migrationPoint(string) error {
	failpoint.Inject(failpoint.MigrationStep)
	return nil
}

// migrate brings dataDir to the WAL layout (see the package comment). It
// does nothing on a directory that has the WAL or no log at all.
func migrate(dataDir string, log hclog.Logger, hook crashHook) error {
	if hook == nil {
		hook = func(string) error { return nil }
	}
	var (
		legacy = filepath.Join(dataDir, LegacyName)
		done   = filepath.Join(dataDir, MigratedName)
		temp   = filepath.Join(dataDir, tempName)
		dir    = filepath.Join(dataDir, DirName)
	)
	exists := func(p string) (bool, error) {
		_, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("migrate the raft log: %w", err)
		}
		return true, nil
	}
	var have [4]bool
	for i, p := range []string{legacy, done, temp, dir} {
		ok, err := exists(p)
		if err != nil {
			return err
		}
		have[i] = ok
	}
	haveLegacy, haveDone, haveTemp, haveDir := have[0], have[1], have[2], have[3]
	switch {
	case haveDir && haveLegacy:
		return fmt.Errorf("%w: %s: keep the log that is current and move the other away (see the operations notes)", ErrTwoLogs, dataDir)
	case haveDir:
		return nil
	case haveLegacy:
		if err := copyLegacy(legacy, temp, dataDir, log, hook); err != nil {
			return err
		}
	case haveTemp && haveDone:
		// A crash between the two renames: the copy is complete.
	case haveTemp:
		return fmt.Errorf("%w: %s holds %s but neither %s nor %s", ErrLayout, dataDir, tempName, LegacyName, MigratedName)
	case haveDone:
		// The old log was moved aside but no new one exists: starting as
		// a new node would forget the term and vote this node gave.
		return fmt.Errorf("%w: %s holds %s but no %s: restore the log directory, or rename %s back to %s to migrate again", ErrLayout, dataDir, MigratedName, filepath.Base(dir), MigratedName, LegacyName)
	default:
		return nil // a new node
	}
	if err := os.Rename(temp, dir); err != nil {
		return fmt.Errorf("migrate the raft log: install the new log: %w", err)
	}
	if err := hook(stepInstalled); err != nil {
		return err
	}
	if err := syncDir(dataDir); err != nil {
		return fmt.Errorf("migrate the raft log: %w", err)
	}
	if err := hook(stepInstallSynced); err != nil {
		return err
	}
	log.Info("migrated the raft log to the WAL", "from", legacy, "kept_as", done, "to", dir)
	return nil
}

// copyLegacy runs steps 1 to 3: a complete, synced copy of legacy in temp,
// then legacy renamed out of the way.
func copyLegacy(legacy, temp, dataDir string, log hclog.Logger, hook crashHook) error {
	if err := os.RemoveAll(temp); err != nil {
		return fmt.Errorf("migrate the raft log: remove an earlier attempt: %w", err)
	}
	if err := hook(stepTempRemoved); err != nil {
		return err
	}
	n, err := copyInto(legacy, temp, log, hook)
	if err != nil {
		return err
	}
	if err := syncDir(temp); err != nil {
		return fmt.Errorf("migrate the raft log: %w", err)
	}
	if err := syncDir(dataDir); err != nil { // temp's own entry
		return fmt.Errorf("migrate the raft log: %w", err)
	}
	if err := hook(stepTempSynced); err != nil {
		return err
	}
	log.Info("copied the raft log", "from", legacy, "entries", n)
	if err := os.Rename(legacy, filepath.Join(dataDir, MigratedName)); err != nil {
		return fmt.Errorf("migrate the raft log: move %s aside: %w", LegacyName, err)
	}
	if err := hook(stepLegacyMoved); err != nil {
		return err
	}
	if err := syncDir(dataDir); err != nil {
		return fmt.Errorf("migrate the raft log: %w", err)
	}
	return hook(stepLegacySynced)
}

// copyInto copies the stable keys and the log of legacy into a new WAL in
// temp, checks the copy's bounds, and closes it. It returns the number of
// entries copied.
func copyInto(legacy, temp string, log hclog.Logger, hook crashHook) (n uint64, err error) {
	src, err := openLegacy(legacy)
	if err != nil {
		return 0, fmt.Errorf("migrate the raft log: %w", err)
	}
	defer src.close()
	if err := os.Mkdir(temp, 0o700); err != nil {
		return 0, fmt.Errorf("migrate the raft log: %w", err)
	}
	dst, err := openPlain(temp, Options{Logger: log, Metrics: &metrics.NoOpCollector{}})
	if err != nil {
		return 0, fmt.Errorf("migrate the raft log: %w", err)
	}
	closed := false
	defer func() {
		if !closed {
			dst.Close()
		}
	}()
	if err := hook(stepTempOpened); err != nil {
		return 0, err
	}
	stable, err := src.stable()
	if err != nil {
		return 0, fmt.Errorf("migrate the raft log: read %s: %w", LegacyName, err)
	}
	for k, v := range stable {
		// The WAL's Set takes raw bytes; the integers were re-encoded.
		if err := dst.Set([]byte(k), v); err != nil {
			return 0, fmt.Errorf("migrate the raft log: copy stable key %s: %w", k, err)
		}
	}
	if err := hook(stepStableCopied); err != nil {
		return 0, err
	}
	err = src.forEachBatch(migrateBatchEntries, migrateBatchBytes, func(batch []*raft.Log) error {
		if err := dst.StoreLogs(batch); err != nil {
			return fmt.Errorf("migrate the raft log: write entries %d-%d: %w", batch[0].Index, batch[len(batch)-1].Index, err)
		}
		n += uint64(len(batch))
		return hook(stepLogBatch)
	})
	if err != nil {
		return 0, err
	}
	first, last, err := src.bounds()
	if err != nil {
		return 0, fmt.Errorf("migrate the raft log: read %s: %w", LegacyName, err)
	}
	gotFirst, _ := dst.FirstIndex()
	gotLast, _ := dst.LastIndex()
	if gotFirst != first || gotLast != last {
		return 0, fmt.Errorf("migrate the raft log: the copy holds %d-%d, %s holds %d-%d", gotFirst, gotLast, LegacyName, first, last)
	}
	closed = true
	if err := dst.Close(); err != nil {
		return 0, fmt.Errorf("migrate the raft log: close the copy: %w", err)
	}
	return n, hook(stepTempClosed)
}
