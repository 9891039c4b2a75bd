package lazyfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// object is one file or directory of the backing tree, as the model sees
// it. Objects, not inode numbers, are what snapshots refer to: a directory
// removed by rmdir frees its inode number for reuse while an older snapshot
// may still need the removed directory to come back.
type object struct {
	id   uint64 // names its graveyard link
	ino  uint64 // backing st_ino
	mode uint32 // st_mode when last seen: type, and permissions to recreate a removed directory

	// Guarded by tracker.mu.
	snap  map[string]*object // directory: durable entries; nil when they are the current ones
	grave string             // graveyard link keeping the data of a file with no name left

	mu   sync.Mutex
	data *undoLog // regular file: nil when its current data is durable
}

func (o *object) isDir() bool { return o.mode&unix.S_IFMT == unix.S_IFDIR }

// tracker is the durability state of one mount.
type tracker struct {
	model Model
	root  string // backing directory
	grave string // graveyard directory
	spill spiller

	mu      sync.Mutex
	ids     map[uint64]*object   // backing inode number -> object currently using it
	dirty   map[*object]struct{} // directories with a snapshot
	buried  map[*object]struct{} // objects with a graveyard link
	nextObj uint64

	fileSyncs atomic.Uint64
	dirSyncs  atomic.Uint64
	writes    atomic.Uint64

	failMu  sync.Mutex
	failure error
}

func newTracker(model Model, root, grave, spill string) *tracker {
	return &tracker{
		model:  model,
		root:   root,
		grave:  grave,
		spill:  spiller{dir: spill},
		ids:    map[uint64]*object{},
		dirty:  map[*object]struct{}{},
		buried: map[*object]struct{}{},
	}
}

// lookup returns the object using inode ino, whose st_mode is mode, making
// one for an inode not seen yet: nothing happened to it since the mount, so
// it is durable as it is. The mode is kept up to date, so that a removed
// directory comes back with the permissions it had last. Callers hold t.mu.
func (t *tracker) lookup(ino uint64, mode uint32) *object {
	if o := t.ids[ino]; o != nil && o.mode&unix.S_IFMT == mode&unix.S_IFMT {
		if mode&0o7777 != 0 || o.mode&0o7777 == 0 {
			o.mode = mode
		}
		return o
	}
	return t.fresh(ino, mode)
}

// fresh makes a new object for inode ino, which was just created: whatever
// used the number before is gone. Callers hold t.mu.
func (t *tracker) fresh(ino uint64, mode uint32) *object {
	t.nextObj++
	o := &object{id: t.nextObj, ino: ino, mode: mode}
	t.ids[ino] = o
	return o
}

// fileObject returns the object of a regular file for a data operation.
func (t *tracker) fileObject(ino uint64) *object {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lookup(ino, unix.S_IFREG)
}

// snapshotDir records the entries of directory ino (at path) as its durable
// ones, unless it already has a snapshot, before a change to them. Callers
// hold t.mu, and keep holding it until the change is made, so that no other
// change slips in between.
func (t *tracker) snapshotDir(ino uint64, path string) error {
	if d := t.ids[ino]; d != nil && d.isDir() && d.snap != nil {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return fmt.Errorf("snapshot directory %s: %w", path, err)
	}
	if st.Ino != ino {
		return fmt.Errorf("snapshot directory %s: inode %d, expected %d", path, st.Ino, ino)
	}
	d := t.lookup(ino, st.Mode)
	ents, err := readEntries(path)
	if err != nil {
		return fmt.Errorf("snapshot directory %s: %w", path, err)
	}
	snap := make(map[string]*object, len(ents))
	for _, e := range ents {
		snap[e.name] = t.lookup(e.ino, e.mode)
	}
	d.snap = snap
	t.dirty[d] = struct{}{}
	return nil
}

// bury hard-links the file at path, which is about to lose its last name,
// into the graveyard, so that a durable entry can still bring it back.
// Callers hold t.mu.
func (t *tracker) bury(o *object, path string) error {
	if o.grave != "" {
		return nil
	}
	g := filepath.Join(t.grave, strconv.FormatUint(o.id, 10))
	if err := os.Link(path, g); err != nil {
		return fmt.Errorf("keep %s in the graveyard: %w", path, err)
	}
	o.grave = g
	t.buried[o] = struct{}{}
	return nil
}

// syncFile makes the data of file ino durable (fsync, fdatasync).
func (t *tracker) syncFile(ino uint64) {
	t.fileSyncs.Add(1)
	o := t.fileObject(ino)
	o.mu.Lock()
	l := o.data
	o.data = nil
	o.mu.Unlock()
	l.discard()
	if t.model == Ext4Ordered {
		t.mu.Lock()
		t.syncAllDirs()
		t.mu.Unlock()
	}
}

// syncDir makes the entries of directory ino durable (fsync of a directory).
func (t *tracker) syncDir(ino uint64) {
	t.dirSyncs.Add(1)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.model == Ext4Ordered {
		t.syncAllDirs()
		return
	}
	d := t.lookup(ino, unix.S_IFDIR)
	if d.snap != nil {
		d.snap = nil
		delete(t.dirty, d)
	}
	t.collect()
}

// syncAllDirs makes every directory's current entries durable. Callers hold
// t.mu.
func (t *tracker) syncAllDirs() {
	for d := range t.dirty {
		d.snap = nil
	}
	clear(t.dirty)
	t.collect()
}

// collect removes the graveyard links of files that no snapshot names: the
// graveyard holds only files that are in no live directory, so nothing else
// can bring them back. Callers hold t.mu.
func (t *tracker) collect() {
	if len(t.buried) == 0 {
		return
	}
	named := map[*object]bool{}
	for d := range t.dirty {
		for _, c := range d.snap {
			named[c] = true
		}
	}
	for o := range t.buried {
		if named[o] {
			continue
		}
		_ = os.Remove(o.grave)
		o.grave = ""
		delete(t.buried, o)
		if t.ids[o.ino] == o {
			delete(t.ids, o.ino)
		}
		o.mu.Lock()
		l := o.data
		o.data = nil
		o.mu.Unlock()
		l.discard()
	}
}

// dirent is one entry of a backing directory.
type dirent struct {
	name string
	ino  uint64
	mode uint32
}

// readEntries lists a backing directory with each entry's inode and mode.
func readEntries(path string) ([]dirent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", path, err)
	}
	fd := int(f.Fd())
	out := make([]dirent, 0, len(names))
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return nil, fmt.Errorf("stat %s: %w", filepath.Join(path, name), err)
		}
		out = append(out, dirent{name: name, ino: st.Ino, mode: st.Mode})
	}
	return out, nil
}

// internalError returns EIO for a tracking failure, and keeps the failure
// for PowerCut to report: a test must not pass on a model that stopped
// tracking.
func (t *tracker) internalError(err error) syscall.Errno {
	t.fail(err)
	return syscall.EIO
}

// fail keeps the first tracking failure.
func (t *tracker) fail(err error) {
	t.failMu.Lock()
	defer t.failMu.Unlock()
	if t.failure == nil {
		t.failure = err
	}
}

// failed returns the first tracking failure, if any.
func (t *tracker) failed() error {
	t.failMu.Lock()
	defer t.failMu.Unlock()
	return t.failure
}
