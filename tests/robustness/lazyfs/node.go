package lazyfs

import (
	"context"
	"errors"
	"path/filepath"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is a loopback node whose changes are told to the tracker first.
// Namespace operations (this file) snapshot the directories they change;
// data operations (fileops.go) save what they overwrite.
type node struct {
	fs.LoopbackNode
	t   *tracker
	ino uint64 // backing st_ino
}

var (
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeTmpfiler       = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
)

// newNode is the loopback's LoopbackRoot.NewNode: every node of the mount is
// a *node.
func (t *tracker) newNode(root *fs.LoopbackRoot, _ *fs.Inode, _ string, st *syscall.Stat_t) fs.InodeEmbedder {
	return &node{LoopbackNode: fs.LoopbackNode{RootData: root}, t: t, ino: st.Ino}
}

// backingPath is where the node is in the backing directory.
func (n *node) backingPath() string {
	return filepath.Join(n.RootData.Path, n.Path(nil))
}

func (n *node) fileType() uint32 { return n.StableAttr().Mode & unix.S_IFMT }

// widen opens a write-only file read-write on the backing side, so that the
// old bytes a write overwrites can be read through the same descriptor. The
// caller still only writes: the kernel enforces its own open mode.
func widen(flags uint32) uint32 {
	if flags&syscall.O_ACCMODE == syscall.O_WRONLY {
		return flags&^syscall.O_ACCMODE | syscall.O_RDWR
	}
	return flags
}

// Open opens the backing file. O_TRUNC (the kernel passes it on, since Mount
// asks for atomic O_TRUNC) is carried out here, tracked, rather than by the
// backing open.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if n.fileType() != unix.S_IFREG {
		fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
		if errno != 0 {
			return nil, 0, errno
		}
		h, errno := wrapHandle(fh)
		return h, fl, errno
	}
	trunc := flags&syscall.O_TRUNC != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY
	flags &^= syscall.O_TRUNC
	fh, fl, errno := n.LoopbackNode.Open(ctx, widen(flags))
	if errno == syscall.EACCES {
		fh, fl, errno = n.LoopbackNode.Open(ctx, flags)
	}
	if errno != 0 {
		return nil, 0, errno
	}
	h, errno := wrapHandle(fh)
	if errno != 0 {
		return nil, 0, errno
	}
	if trunc {
		if errno := n.t.truncate(n.ino, h.fd, 0); errno != 0 {
			h.Release(ctx)
			return nil, 0, errno
		}
	}
	return h, fl, 0
}

// Create creates (or, if it appeared meanwhile, opens) a file. A new file
// has no durable data: if its name becomes durable before its data, it comes
// back empty.
func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	t := n.t
	t.mu.Lock()
	dir := n.backingPath()
	if err := t.snapshotDir(n.ino, dir); err != nil {
		t.mu.Unlock()
		return nil, nil, 0, t.internalError(err)
	}
	var st unix.Stat_t
	existed := unix.Lstat(filepath.Join(dir, name), &st) == nil
	trunc := existed && flags&syscall.O_TRUNC != 0
	ch, fh, fl, errno := n.LoopbackNode.Create(ctx, name, widen(flags&^syscall.O_TRUNC), mode, out)
	if errno != 0 {
		t.mu.Unlock()
		return nil, nil, 0, errno
	}
	child := ch.Operations().(*node)
	if !existed {
		// Created empty: its durable data, when its undo log starts at
		// the first write, is nothing.
		t.fresh(child.ino, out.Attr.Mode)
	}
	t.mu.Unlock()
	h, errno := wrapHandle(fh)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if trunc {
		if errno := t.truncate(child.ino, h.fd, 0); errno != 0 {
			h.Release(ctx)
			return nil, nil, 0, errno
		}
	}
	return ch, h, fl, 0
}

// Mkdir makes a directory. It has no durable entries of its own until it is
// fsynced: the snapshot its first change takes is empty.
func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	t := n.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.snapshotDir(n.ino, n.backingPath()); err != nil {
		return nil, t.internalError(err)
	}
	ch, errno := n.LoopbackNode.Mkdir(ctx, name, mode, out)
	if errno != 0 {
		return nil, errno
	}
	t.fresh(ch.Operations().(*node).ino, out.Attr.Mode)
	return ch, 0
}

// Mknod makes a special file (or an empty regular one).
func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	t := n.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.snapshotDir(n.ino, n.backingPath()); err != nil {
		return nil, t.internalError(err)
	}
	ch, errno := n.LoopbackNode.Mknod(ctx, name, mode, rdev, out)
	if errno != 0 {
		return nil, errno
	}
	t.fresh(ch.Operations().(*node).ino, out.Attr.Mode)
	return ch, 0
}

// Symlink makes a symbolic link; its target is written once, so only its
// name needs tracking.
func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	t := n.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.snapshotDir(n.ino, n.backingPath()); err != nil {
		return nil, t.internalError(err)
	}
	ch, errno := n.LoopbackNode.Symlink(ctx, target, name, out)
	if errno != 0 {
		return nil, errno
	}
	t.fresh(ch.Operations().(*node).ino, out.Attr.Mode)
	return ch, 0
}

// Link is refused: with one name per file, a file that loses its name has
// lost its last one and goes to the graveyard, which keeps the model simple.
func (n *node) Link(context.Context, fs.InodeEmbedder, string, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EOPNOTSUPP
}

// Tmpfile is refused: an O_TMPFILE file only gets a name through link.
func (n *node) Tmpfile(context.Context, uint32, uint32, *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}

// Unlink removes a name; the file goes to the graveyard first, since a
// durable entry may still name it.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	t := n.t
	t.mu.Lock()
	defer t.mu.Unlock()
	dir := n.backingPath()
	if err := t.snapshotDir(n.ino, dir); err != nil {
		return t.internalError(err)
	}
	p := filepath.Join(dir, name)
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return fs.ToErrno(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := t.bury(t.lookup(st.Ino, st.Mode), p); err != nil {
			return t.internalError(err)
		}
	}
	return n.LoopbackNode.Unlink(ctx, name)
}

// Rmdir removes an empty directory. Nothing more is needed to bring it back:
// a directory that no longer exists had no entries when it went, and its
// durable ones, if different, are in its snapshot.
func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	t := n.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.snapshotDir(n.ino, n.backingPath()); err != nil {
		return t.internalError(err)
	}
	return n.LoopbackNode.Rmdir(ctx, name)
}

// renameFlags are the renameat2 flags that keep one name per file.
const renameFlags = unix.RENAME_NOREPLACE | unix.RENAME_EXCHANGE

// Rename changes both directories' entries; a file renamed over goes to the
// graveyard first (an empty directory renamed over needs nothing, as for
// Rmdir).
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	if flags&^renameFlags != 0 {
		return syscall.EINVAL
	}
	t := n.t
	t.mu.Lock()
	defer t.mu.Unlock()
	from, to := n.backingPath(), np.backingPath()
	if err := t.snapshotDir(n.ino, from); err != nil {
		return t.internalError(err)
	}
	if err := t.snapshotDir(np.ino, to); err != nil {
		return t.internalError(err)
	}
	var src, dst unix.Stat_t
	if err := unix.Lstat(filepath.Join(from, name), &src); err != nil {
		return fs.ToErrno(err)
	}
	err := unix.Lstat(filepath.Join(to, newName), &dst)
	switch {
	case err == nil && flags&unix.RENAME_EXCHANGE == 0 && dst.Ino != src.Ino && dst.Mode&unix.S_IFMT != unix.S_IFDIR:
		if err := t.bury(t.lookup(dst.Ino, dst.Mode), filepath.Join(to, newName)); err != nil {
			return t.internalError(err)
		}
	case err != nil && !errors.Is(err, unix.ENOENT):
		return fs.ToErrno(err)
	}
	return n.LoopbackNode.Rename(ctx, name, &np.LoopbackNode, newName, flags)
}

// OpendirHandle opens a directory with a handle whose fsync reaches Fsync.
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ds, errno := fs.NewLoopbackDirStream(n.backingPath())
	if errno != 0 {
		return nil, 0, errno
	}
	return &dirHandle{ds: ds}, 0, 0
}

// Fsync makes the node durable under the model: a file's data, or a
// directory's entries. fdatasync counts as fsync. Nothing is synced to the
// host disk.
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	switch n.fileType() {
	case unix.S_IFDIR:
		n.t.syncDir(n.ino)
	case unix.S_IFREG:
		n.t.syncFile(n.ino)
	}
	return 0
}
