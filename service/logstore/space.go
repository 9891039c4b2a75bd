package logstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/types"
	"golang.org/x/sys/unix"

	"github.com/concord-io/concord/service/failpoint"
)

// ErrDiskFull reports that the log's disk has no room: for the next
// segment (the node takes no new state until it has), or for an append.
// Errors that match it also match the system's ENOSPC where that was the
// cause.
var ErrDiskFull = errors.New("no space left on the data directory's disk")

// reserveName is the spare segment file in the WAL directory. raft-wal
// lists only names ending in .wal, so it never sees it.
const reserveName = "next-segment.reserve"

// spaceFS is raft-wal's file system with the room for the next segment
// held in advance, the way etcd's WAL pre-creates its next file: a
// rotation renames the reserve into place, which needs no free space, and
// then reserves again. raft-wal v0.4.1 seals the tail segment before it
// creates the next one and never retries a creation that failed, so
// without the reserve a full disk at that moment leaves a log that takes no
// append until it is reopened. A reserve that cannot be made is how the
// node learns its disk is full while it can still append: the gate in
// front of Raft refuses new state (Store.DiskFull) and the segment being
// written holds what still comes (keep-alives, expiries, the leader's
// entries on a follower).
//
// raft-wal writes a segment past its size limit: the batch that crosses it
// and the index that seals it. Segment files are preallocated with slack
// for that, and the disk also counts as full while less than the slack is
// free outside the reserve, so that a disk filled by something else is
// noticed before an append runs into it.
//
// A preallocation that fails is undone: the partial file is removed, so a
// failed attempt does not leave the disk full.
type spaceFS struct {
	*fs.FS // ListDir, Delete, OpenReader
	dir    string
	size   int64 // the configured segment size
	slack  int64 // preallocated past size, and the free space kept

	mu       sync.Mutex
	reserved bool  // the reserve file exists, preallocated to size
	full     error // why there is no reserve; nil while there is one
	onChange func(full error)
}

// newSpaceFS returns the file system of the WAL in dir, with segments of
// size bytes, and tries to make the reserve. A reserve left by an earlier
// run is kept if it has the right size. onChange, if not nil, hears every
// change between full (a non-nil cause) and not full.
func newSpaceFS(dir string, size int64, onChange func(full error)) *spaceFS {
	f := &spaceFS{FS: fs.New(), dir: dir, size: size, slack: slackFor(size), onChange: onChange}
	path := filepath.Join(dir, reserveName)
	if st, err := os.Stat(path); err == nil {
		if st.Size() == f.alloc() && allocated(st) >= f.alloc() {
			f.reserved = true
		} else {
			os.Remove(path) // torn by a crash, or of an older segment size
		}
	}
	f.Check()
	return f
}

// slackFor is the room kept past a segment of size bytes: an eighth,
// from 64 KiB to 8 MiB.
func slackFor(size int64) int64 {
	return min(max(size/8, 64<<10), 8<<20)
}

// alloc is the size of a segment file as preallocated.
func (f *spaceFS) alloc() int64 { return f.size + f.slack }

// allocated is the space a file holds on disk: a file whose size was set
// without its blocks (a crash mid-preallocation) holds less.
func allocated(st os.FileInfo) int64 {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return sys.Blocks * 512
	}
	return st.Size()
}

// Create makes a new segment file: the reserve renamed into place when
// there is one of this size, else a new file preallocated to size.
func (f *spaceFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	path := filepath.Join(dir, name)
	f.mu.Lock()
	defer f.mu.Unlock()
	alloc := int64(size)
	if alloc == f.size {
		alloc = f.alloc()
	}
	if f.reserved && dir == f.dir && int64(size) == f.size {
		if err := os.Rename(filepath.Join(f.dir, reserveName), path); err != nil {
			return nil, fmt.Errorf("take the reserved segment file: %w", err)
		}
		f.reserved = false
		file, err := openSynced(dir, path)
		if err != nil {
			return nil, err
		}
		f.checkLocked()
		return withSyncPoints(file), nil
	}
	file, err := preallocate(dir, path, alloc, os.O_EXCL)
	if err != nil {
		f.setFullLocked(err)
		return nil, err
	}
	return withSyncPoints(file), nil
}

// OpenWriter opens an existing segment to append to it.
func (f *spaceFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	file, err := f.FS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return withSyncPoints(file), nil
}

// syncPoints puts the failpoints on either side of a segment's fsync,
// the one that makes an append durable (service/failpoint).
type syncPoints struct{ types.WritableFile }

func (s syncPoints) Sync() error {
	failpoint.Inject(failpoint.LogBeforeSync)
	if err := s.WritableFile.Sync(); err != nil {
		return err
	}
	failpoint.Inject(failpoint.LogAfterSync)
	return nil
}

// withSyncPoints wraps file in syncPoints in a failpoints build only.
func withSyncPoints(file types.WritableFile) types.WritableFile {
	if !failpoint.Enabled {
		return file
	}
	return syncPoints{file}
}

// Check makes the reserve if there is none, looks at the free space, and
// returns why the disk counts as full, nil if it does not.
func (f *spaceFS) Check() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.checkLocked()
}

func (f *spaceFS) checkLocked() error {
	if !f.reserved {
		file, err := preallocate(f.dir, filepath.Join(f.dir, reserveName), f.alloc(), os.O_TRUNC)
		if err != nil {
			f.setFullLocked(fmt.Errorf("cannot reserve %d MiB for the next log segment in %s: %w", f.alloc()>>20, f.dir, err))
			return f.full
		}
		file.Close()
		f.reserved = true
	}
	var st unix.Statfs_t
	if err := unix.Statfs(f.dir, &st); err == nil {
		if free := int64(st.Bavail) * st.Bsize; free < f.slack {
			f.setFullLocked(fmt.Errorf("%d KiB free in %s, under the %d KiB kept for the segment being written: %w", free>>10, f.dir, f.slack>>10, syscall.ENOSPC))
			return f.full
		}
	}
	f.setFullLocked(nil)
	return nil
}

// Full returns why the disk has no room for the next segment, or nil.
func (f *spaceFS) Full() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.full
}

// NoteAppendError marks the disk full when an append failed for want of
// space; the next Check clears it once there is room.
func (f *spaceFS) NoteAppendError(err error) {
	if !isNoSpace(err) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setFullLocked(fmt.Errorf("an append to the raft log in %s failed: %w", f.dir, err))
}

// setFullLocked records cause (nil: not full) and tells onChange when
// that flips.
func (f *spaceFS) setFullLocked(cause error) {
	var full error
	if cause != nil {
		full = cause
		if isNoSpace(cause) {
			full = fmt.Errorf("%w: %w", ErrDiskFull, cause)
		}
	}
	changed := (f.full == nil) != (full == nil)
	f.full = full
	if changed && f.onChange != nil {
		f.onChange(full)
	}
}

// preallocate creates path (flag adds O_EXCL or O_TRUNC), gives it size
// bytes of disk, and makes it and its name durable. On any failure the
// file is removed again.
func preallocate(dir, path string, size int64, flag int) (*os.File, error) {
	file, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|flag, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	fail := func(err error) (*os.File, error) {
		file.Close()
		os.Remove(path)
		return nil, err
	}
	if size > 0 {
		if err := unix.Fallocate(int(file.Fd()), 0, 0, size); err != nil {
			if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOSYS) {
				return fail(fmt.Errorf("preallocate %d bytes for %s: %w", size, path, err))
			}
			// A file system without fallocate: the size only, as raft-wal
			// does; such a disk runs out on append instead (NoteAppendError).
			if err := file.Truncate(size); err != nil {
				return fail(fmt.Errorf("size %s: %w", path, err))
			}
		}
	}
	if err := file.Sync(); err != nil {
		return fail(fmt.Errorf("sync %s: %w", path, err))
	}
	if err := syncDir(dir); err != nil {
		return fail(err)
	}
	return file, nil
}

// openSynced opens a segment file that was just renamed into place and
// makes its name durable before the first append relies on it.
func openSynced(dir, path string) (*os.File, error) {
	file, err := os.OpenFile(path, os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := syncDir(dir); err != nil {
		file.Close()
		return nil, err
	}
	return file, nil
}

// isNoSpace reports a write that failed for want of disk space or quota.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, ErrDiskFull)
}
