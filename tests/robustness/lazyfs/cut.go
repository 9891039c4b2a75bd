package lazyfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// live is an inode found in the backing tree at the cut.
type live struct {
	path    string   // relative to the backing directory
	dir     bool     // entries are valid
	entries []dirent // of a directory
}

// builder lays out the durable tree in a staging directory, with hard links
// to the backing inodes, so that the live tree stays readable until the
// durable one is complete.
type builder struct {
	t       *tracker
	live    map[uint64]*live
	placed  map[*object]string // where each object went first
	restore []*object          // regular files whose data must be rolled back
}

// rebuild replaces the contents of the backing directory with its durable
// state. The mount must be gone: nothing may change the state meanwhile.
func (t *tracker) rebuild(stage string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var st unix.Stat_t
	if err := unix.Lstat(t.root, &st); err != nil {
		return fmt.Errorf("stat backing root: %w", err)
	}
	lv := map[uint64]*live{}
	if err := walkLive(t.root, "", st.Ino, lv); err != nil {
		return err
	}
	if err := os.Mkdir(stage, 0o700); err != nil {
		return fmt.Errorf("make staging directory: %w", err)
	}
	b := &builder{t: t, live: lv, placed: map[*object]string{}}
	root := t.lookup(st.Ino, st.Mode)
	b.placed[root] = stage
	if err := b.fill(root, stage); err != nil {
		return err
	}
	for _, o := range b.restore {
		if err := restoreData(o, b.placed[o]); err != nil {
			return err
		}
	}
	return swapContents(t.root, stage)
}

// walkLive records every inode under rel.
func walkLive(root, rel string, ino uint64, lv map[uint64]*live) error {
	ents, err := readEntries(filepath.Join(root, rel))
	if err != nil {
		return fmt.Errorf("walk backing tree: %w", err)
	}
	lv[ino] = &live{path: rel, dir: true, entries: ents}
	for _, e := range ents {
		p := filepath.Join(rel, e.name)
		if e.mode&unix.S_IFMT == unix.S_IFDIR {
			if err := walkLive(root, p, e.ino, lv); err != nil {
				return err
			}
			continue
		}
		lv[e.ino] = &live{path: p}
	}
	return nil
}

// entries are the durable entries of directory d: its snapshot, or else its
// live entries. A directory without a snapshot that no longer exists (its
// inode number gone, or now used by another object) was empty when it was
// removed, and that was durable.
func (b *builder) entries(d *object) map[string]*object {
	if d.snap != nil {
		return d.snap
	}
	l := b.live[d.ino]
	if l == nil || !l.dir || b.t.ids[d.ino] != d {
		return nil
	}
	m := make(map[string]*object, len(l.entries))
	for _, e := range l.entries {
		m[e.name] = b.t.lookup(e.ino, e.mode)
	}
	return m
}

// fill puts the durable entries of directory d into dst.
func (b *builder) fill(d *object, dst string) error {
	ents := b.entries(d)
	names := make([]string, 0, len(ents))
	for name := range ents {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		c, p := ents[name], filepath.Join(dst, name)
		if c.isDir() {
			if _, twice := b.placed[c]; twice {
				continue // see the package doc: first name wins, no cycles
			}
			b.placed[c] = p
			if err := os.Mkdir(p, 0o700); err != nil {
				return fmt.Errorf("make directory: %w", err)
			}
			if err := b.fill(c, p); err != nil {
				return err
			}
			if err := os.Chmod(p, os.FileMode(b.perm(c))); err != nil {
				return fmt.Errorf("set mode of directory: %w", err)
			}
			continue
		}
		src, err := b.source(c)
		if err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(b.placed[d], name), err)
		}
		if err := os.Link(src, p); err != nil {
			return fmt.Errorf("link durable file into place: %w", err)
		}
		if _, twice := b.placed[c]; !twice {
			b.placed[c] = p
			if c.mode&unix.S_IFMT == unix.S_IFREG {
				b.restore = append(b.restore, c)
			}
		}
	}
	return nil
}

// perm is the permission bits to give directory d: its live ones if it
// still exists, else those it had when first seen.
func (b *builder) perm(d *object) uint32 {
	if l := b.live[d.ino]; l != nil && l.dir && b.t.ids[d.ino] == d {
		var st unix.Stat_t
		if unix.Lstat(filepath.Join(b.t.root, l.path), &st) == nil {
			return st.Mode & 0o7777
		}
	}
	return d.mode & 0o7777
}

// source is a path to the inode of a durable non-directory.
func (b *builder) source(o *object) (string, error) {
	if o.grave != "" {
		return o.grave, nil
	}
	if l := b.live[o.ino]; l != nil && !l.dir && b.t.ids[o.ino] == o {
		return filepath.Join(b.t.root, l.path), nil
	}
	return "", fmt.Errorf("durable inode %d is neither in the backing tree nor in the graveyard", o.ino)
}

// restoreData rolls the file at path back to its durable data.
func restoreData(o *object, path string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.data == nil {
		return nil
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("open %s to restore its data: %w", path, err)
	}
	err = o.data.apply(fd)
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("restore %s: %w", path, err)
	}
	o.data.discard()
	o.data = nil
	return nil
}

// swapContents replaces what root holds with what stage holds. root itself
// stays: it is what the caller named.
func swapContents(root, stage string) error {
	old, err := os.ReadDir(root)
	if err != nil {
		return fmt.Errorf("list backing directory: %w", err)
	}
	for _, e := range old {
		if err := os.RemoveAll(filepath.Join(root, e.Name())); err != nil {
			return fmt.Errorf("clear backing directory: %w", err)
		}
	}
	fresh, err := os.ReadDir(stage)
	if err != nil {
		return fmt.Errorf("list staging directory: %w", err)
	}
	var errs []error
	for _, e := range fresh {
		if err := os.Rename(filepath.Join(stage, e.Name()), filepath.Join(root, e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("move durable entry into backing directory: %w", err))
		}
	}
	return errors.Join(errs...)
}
