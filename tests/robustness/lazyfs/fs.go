package lazyfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// FS is one mount of a backing directory.
type FS struct {
	backing    string
	mountpoint string
	work       string // graveyard, spill files and staging, next to backing
	t          *tracker
	dev        uint64 // device number of the mount, 0 if unknown

	mu      sync.Mutex
	server  *fuse.Server // nil once unmounted
	mounted bool
}

// Stats counts what the mount saw, so that a test can check that its
// workload really synced (a test of durability that never fsyncs proves
// little).
type Stats struct {
	FileSyncs uint64 // fsync and fdatasync of regular files
	DirSyncs  uint64 // fsync of directories
	Writes    uint64 // write requests
}

// cacheTimeout is how long the kernel may cache names and attributes.
// Every change goes through the mount, so the cache cannot go stale.
const cacheTimeout = time.Second

// Mount mounts backing at mountpoint under the given model. Whatever backing
// holds now is durable. It needs root and /dev/fuse.
func Mount(backing, mountpoint string, model Model) (*FS, error) {
	if !model.valid() {
		return nil, fmt.Errorf("lazyfs: unknown model %d", int(model))
	}
	backing, err := filepath.Abs(backing)
	if err != nil {
		return nil, fmt.Errorf("lazyfs: backing directory: %w", err)
	}
	mountpoint, err = filepath.Abs(mountpoint)
	if err != nil {
		return nil, fmt.Errorf("lazyfs: mount point: %w", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(backing, &st); err != nil {
		return nil, fmt.Errorf("lazyfs: backing directory: %w", err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return nil, fmt.Errorf("lazyfs: backing %s is not a directory", backing)
	}
	work, err := makeWorkDir(backing, uint64(st.Dev))
	if err != nil {
		return nil, err
	}
	t := newTracker(model, backing, filepath.Join(work, "graveyard"), filepath.Join(work, "spill"))
	t.lookup(st.Ino, st.Mode)

	root := &fs.LoopbackRoot{Path: backing, Dev: uint64(st.Dev), NewNode: t.newNode}
	rootNode := t.newNode(root, nil, "", &st)
	root.RootNode = rootNode
	timeout := cacheTimeout
	server, err := fs.Mount(mountpoint, rootNode, &fs.Options{
		EntryTimeout: &timeout,
		AttrTimeout:  &timeout,
		MountOptions: fuse.MountOptions{
			DirectMountStrict: true,
			FsName:            "lazyfs:" + backing,
			Name:              "lazyfs",
			// With passthrough the kernel would write to backing
			// files itself, past the tracking. (handle hides its
			// descriptor as well.)
			DisabledCapabilities: fuse.CAP_PASSTHROUGH,
			// O_TRUNC arrives with the open, which tracks it, instead
			// of as a separate truncate: one request fewer.
			ExtraCapabilities: fuse.CAP_ATOMIC_O_TRUNC,
		},
	})
	if err != nil {
		// fs.Mount leaves a mount behind if the kernel took it but the
		// handshake failed; nothing may stay mounted.
		_ = syscall.Unmount(mountpoint, syscall.MNT_DETACH)
		_ = os.RemoveAll(work)
		return nil, fmt.Errorf("lazyfs: mount %s on %s: %w", backing, mountpoint, err)
	}
	dev, _ := mountDev(mountpoint)
	return &FS{backing: backing, mountpoint: mountpoint, work: work, t: t, dev: dev, server: server, mounted: true}, nil
}

// makeWorkDir makes a fresh ".<name>.lazyfs" next to backing, on the same
// filesystem: the graveyard and the staging area are filled with hard links.
func makeWorkDir(backing string, dev uint64) (string, error) {
	work := filepath.Join(filepath.Dir(backing), "."+filepath.Base(backing)+".lazyfs")
	if err := os.RemoveAll(work); err != nil {
		return "", fmt.Errorf("lazyfs: clear work directory left by an earlier mount: %w", err)
	}
	for _, d := range []string{work, filepath.Join(work, "graveyard"), filepath.Join(work, "spill")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return "", fmt.Errorf("lazyfs: make work directory: %w", err)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(work, &st); err != nil {
		return "", fmt.Errorf("lazyfs: work directory: %w", err)
	}
	if uint64(st.Dev) != dev {
		_ = os.RemoveAll(work)
		return "", fmt.Errorf("lazyfs: %s is not on the same filesystem as %s", work, backing)
	}
	return work, nil
}

// Mountpoint is where the filesystem is (or was) mounted.
func (f *FS) Mountpoint() string { return f.mountpoint }

// Stats returns the counts so far.
func (f *FS) Stats() Stats {
	return Stats{
		FileSyncs: f.t.fileSyncs.Load(),
		DirSyncs:  f.t.dirSyncs.Load(),
		Writes:    f.t.writes.Load(),
	}
}

// Unmount unmounts and keeps the backing directory as it is now, synced or
// not. It does nothing if the filesystem is already unmounted, so that
// cleanup can always call it.
func (f *FS) Unmount() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.mounted {
		return nil
	}
	f.mounted = false
	err := f.unmount()
	if rmErr := os.RemoveAll(f.work); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("lazyfs: remove work directory: %w", rmErr))
	}
	return err
}

// PowerCut unmounts (processes using the mount should have been killed) and
// rewrites the backing directory to its durable state. The filesystem stays
// unmounted; Mount it again to go on.
func (f *FS) PowerCut() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.mounted {
		return errors.New("lazyfs: power cut: not mounted")
	}
	f.mounted = false
	defer os.RemoveAll(f.work)
	if err := f.unmount(); err != nil {
		return fmt.Errorf("lazyfs: power cut: %w", err)
	}
	if err := f.t.failed(); err != nil {
		return fmt.Errorf("lazyfs: power cut: tracking failed while mounted, durable state unknown: %w", err)
	}
	if err := f.t.rebuild(filepath.Join(f.work, "stage")); err != nil {
		return fmt.Errorf("lazyfs: power cut: rewrite %s: %w", f.backing, err)
	}
	return nil
}
