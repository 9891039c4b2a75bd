// Package lazyfs is a FUSE filesystem for tests that simulates a power cut,
// in the spirit of LazyFS (used by etcd's robustness tests).
//
// Mount passes a mount point through to a backing directory (go-fuse's
// loopback) and keeps track of what a real disk would still hold if the
// power were cut at this instant. PowerCut unmounts and rewrites the backing
// directory to exactly that durable state; the directory can then be
// mounted again, or read directly. Unmount ends a mount without losing
// anything. kill -9 alone keeps the page cache and so proves nothing about
// fsync: a power cut does not.
//
// # Durability models
//
// Everything that exists in the backing directory when it is mounted is
// durable. From then on, under Strict:
//
//   - A regular file's data (its bytes and its size) is durable as of the
//     last fsync or fdatasync of that file, through any open descriptor.
//     Writes, truncates (ftruncate, truncate, open with O_TRUNC), fallocate
//     (plain fallocate grows the size; KEEP_SIZE does not; PUNCH_HOLE and
//     ZERO_RANGE change bytes) and copy_file_range made after it are undone
//     by a power cut. A file created since the mount has no durable data
//     until it is fsynced: if only its name is durable, it comes back with
//     zero length (the torn write).
//   - A directory's entries (which names exist, and which file or directory
//     each name refers to) are durable as of the last fsync of that
//     directory. Creates, mkdir, mknod, symlink, unlink, rmdir and renames
//     (on both sides) made after it are undone by a power cut. A directory
//     made by mkdir has no durable entries until it is fsynced, and is
//     itself reachable only once its parent is fsynced.
//   - Fsyncing a file does not make its name durable, and fsyncing a
//     directory does not make the data of the files in it durable.
//
// Ext4Ordered is the same, except that every fsync (of a file or of a
// directory) also makes the current entries of every directory durable, as
// ext4's journal commit does with data=ordered: a name change made before
// any fsync becomes durable with it. File data still needs its own fsync.
//
// After a power cut the backing directory holds, for each directory
// reachable from the root through durable entries, exactly its durable
// entries; each file with the data it had at its last fsync, and each file
// that was unlinked or renamed over since (while a durable entry still
// names it) back under its durable name with its durable data.
//
// # What is not modelled
//
//   - Metadata other than names and data: modes, owners, times and extended
//     attributes are whatever they are at the cut. A directory that was
//     removed and comes back is recreated with the mode it had when lazyfs
//     first saw it.
//   - Hard links: link(2) and O_TMPFILE fail with EOPNOTSUPP, so that every
//     file has at most one name in the live tree. If the durable entries of
//     two directories name the same file (a rename between directories with
//     only the target fsynced), both names come back as hard links of one
//     file; a directory named twice comes back only under the first name in
//     the walk (sorted by name), which also breaks cycles.
//   - sync(2) and syncfs(2) do not reach a FUSE filesystem and make nothing
//     durable; only fsync and fdatasync do.
//   - Ioctls are refused (ENOTTY), so that FICLONE and friends cannot change
//     data behind the tracking; fallocate's COLLAPSE_RANGE and INSERT_RANGE
//     are refused (EOPNOTSUPP) because they shift data.
//
// # How it is tracked
//
// Files and directories are identified by the backing inode number, which
// stays the same across renames. Each file changed since its last fsync has
// an undo log: before every change, the old bytes of the range it overwrites
// that lie within the durable size are saved (in memory, or in a spill file
// when large), together with the durable size. An fsync just drops the log,
// so a preallocated log segment that is fsynced after every small append
// costs one small record per write and nothing per fsync. A power cut
// applies the records in reverse order and truncates to the durable size.
//
// A directory changed since its last fsync has a snapshot of its entries
// taken from the backing directory just before the first change; an fsync
// drops it. A file that loses its last name (unlink, rename over it) is
// first hard-linked into a graveyard next to the backing directory, so that
// it can come back; graveyard files that no snapshot names any more are
// removed at the next fsync.
//
// fsync is not passed on to the backing filesystem: what survives is decided
// by the model, not by the host's disk, and the host fsync would only slow
// the tests down.
//
// lazyfs needs root (it mounts with mount(2), not fusermount) and
// /dev/fuse. It keeps its graveyard, spill files and staging area in a
// directory next to the backing directory (".<name>.lazyfs"), which must be
// on the same filesystem.
package lazyfs
