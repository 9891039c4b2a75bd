package lazyfs

import (
	"context"
	"fmt"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

var (
	_ fs.NodeWriter         = (*node)(nil)
	_ fs.NodeWritever       = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeAllocater      = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
)

// change runs op on file ino, open on fd, after save has recorded in the
// file's undo log what op is about to overwrite. The file's lock is held
// throughout, so that an fsync or another change sees op either wholly done
// or not started.
func (t *tracker) change(ino uint64, fd int, save func(*undoLog) error, op func() syscall.Errno) syscall.Errno {
	o := t.fileObject(ino)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.data == nil {
		l, err := newUndoLog(fd)
		if err != nil {
			return t.internalError(fmt.Errorf("inode %d: %w", ino, err))
		}
		o.data = l
	}
	if err := save(o.data); err != nil {
		return t.internalError(fmt.Errorf("inode %d: %w", ino, err))
	}
	return op()
}

// truncate sets the size of file ino, open on fd, to size.
func (t *tracker) truncate(ino uint64, fd int, size int64) syscall.Errno {
	return t.change(ino, fd,
		func(l *undoLog) error { return l.saveShrink(fd, size, &t.spill) },
		func() syscall.Errno { return fs.ToErrno(unix.Ftruncate(fd, size)) })
}

// Write writes through the handle's descriptor once the bytes it overwrites
// are saved.
func (n *node) Write(ctx context.Context, f fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	return n.Writev(ctx, f, [][]byte{data}, off)
}

// Writev is Write for a request the kernel split into several buffers.
func (n *node) Writev(ctx context.Context, f fs.FileHandle, data [][]byte, off int64) (uint32, syscall.Errno) {
	h, ok := f.(*handle)
	if !ok {
		return 0, syscall.EBADF
	}
	var total int64
	for _, b := range data {
		total += int64(len(b))
	}
	n.t.writes.Add(1)
	var written int
	errno := n.t.change(n.ino, h.fd,
		func(l *undoLog) error { return l.save(h.fd, off, total, &n.t.spill) },
		func() syscall.Errno {
			var err error
			if len(data) == 1 {
				written, err = pwriteFull(h.fd, data[0], off)
			} else {
				written, err = unix.Pwritev(h.fd, data, off)
			}
			return fs.ToErrno(err)
		})
	return uint32(max(written, 0)), errno
}

// Setattr carries out a size change itself, tracked, and leaves the rest
// (mode, owner, times) to the loopback.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	var lf fs.FileHandle // stays a nil interface without a handle
	h, _ := f.(*handle)
	if h != nil {
		lf = h.lf
	}
	if size, ok := in.GetSize(); ok {
		if errno := n.setSize(h, int64(size)); errno != 0 {
			return errno
		}
		rest := *in
		rest.Valid &^= fuse.FATTR_SIZE
		in = &rest
	}
	return n.LoopbackNode.Setattr(ctx, lf, in, out)
}

// setSize truncates through the handle, or through a descriptor of its own
// for truncate(2) by path.
func (n *node) setSize(h *handle, size int64) syscall.Errno {
	if h != nil {
		return n.t.truncate(n.ino, h.fd, size)
	}
	fd, err := unix.Open(n.backingPath(), unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer unix.Close(fd)
	return n.t.truncate(n.ino, fd, size)
}

// fallocate mode bits, by what they do to data.
const (
	fallocWriteZeroes = 0x80 // FALLOC_FL_WRITE_ZEROES, Linux 6.17
	// fallocZeroing modes overwrite the range with zeros.
	fallocZeroing = unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_ZERO_RANGE | fallocWriteZeroes
	// fallocKnown are the bits Allocate accepts; COLLAPSE_RANGE and
	// INSERT_RANGE shift data, which the undo log does not model.
	fallocKnown = unix.FALLOC_FL_KEEP_SIZE | unix.FALLOC_FL_UNSHARE_RANGE | fallocZeroing
)

// Allocate is fallocate. Allocating changes no bytes; growing the size needs
// nothing saved, since a power cut truncates to the durable size anyway.
func (n *node) Allocate(ctx context.Context, f fs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	h, ok := f.(*handle)
	if !ok {
		return syscall.EBADF
	}
	if mode&^fallocKnown != 0 {
		return syscall.EOPNOTSUPP
	}
	return n.t.change(n.ino, h.fd,
		func(l *undoLog) error {
			if mode&fallocZeroing == 0 {
				return nil
			}
			return l.save(h.fd, int64(off), int64(size), &n.t.spill)
		},
		func() syscall.Errno { return h.lf.Allocate(ctx, off, size, mode) })
}

// maxCopy bounds one copy_file_range request.
const maxCopy = 1 << 30

// CopyFileRange copies between two open files of the mount, saving what it
// overwrites in the target first.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	in, ok1 := fhIn.(*handle)
	dst, ok2 := fhOut.(*handle)
	target, ok3 := out.Operations().(*node)
	if !ok1 || !ok2 || !ok3 {
		return 0, syscall.EOPNOTSUPP
	}
	// The reply carries a 32-bit count; a short copy is allowed and lets
	// the caller loop. Bounding it also keeps the saved range sane.
	length = min(length, maxCopy)
	var copied int
	errno := n.t.change(target.ino, dst.fd,
		func(l *undoLog) error { return l.save(dst.fd, int64(offOut), int64(length), &n.t.spill) },
		func() syscall.Errno {
			ri, ro := int64(offIn), int64(offOut)
			var err error
			copied, err = unix.CopyFileRange(in.fd, &ri, dst.fd, &ro, int(length), int(flags))
			return fs.ToErrno(err)
		})
	return uint32(max(copied, 0)), errno
}
