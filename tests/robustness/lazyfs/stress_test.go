package lazyfs

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// refFile is a file of the reference model: what it holds and what it held
// at its last fsync (nil: nothing durable yet).
type refFile struct {
	cur, durable []byte
}

// ref is a plain in-memory model of the durability rules, over two
// directories: the root and "d", which exists before the mount.
type ref struct {
	model    Model
	cur, dur map[string]map[string]*refFile // directory -> name -> file
}

var (
	refDirs  = []string{".", "d"}
	refNames = []string{"a", "b", "c", "e"}
)

func newRef(model Model) *ref {
	r := &ref{model: model, cur: map[string]map[string]*refFile{}, dur: map[string]map[string]*refFile{}}
	for _, dir := range refDirs {
		r.cur[dir] = map[string]*refFile{}
		r.dur[dir] = map[string]*refFile{}
	}
	return r
}

// synced applies an fsync: file data, then names as the model says.
func (r *ref) synced(f *refFile, dir string) {
	if f != nil {
		f.durable = bytes.Clone(f.cur)
	}
	for _, d := range refDirs {
		if r.model == Ext4Ordered || d == dir {
			r.dur[d] = maps.Clone(r.cur[d])
		}
	}
}

// pick returns a random existing file, or ok false if there is none.
func (r *ref) pick(rng *rand.Rand) (dir, name string, f *refFile, ok bool) {
	type loc struct{ dir, name string }
	var all []loc
	for _, d := range refDirs {
		for _, n := range slices.Sorted(maps.Keys(r.cur[d])) {
			all = append(all, loc{d, n})
		}
	}
	if len(all) == 0 {
		return "", "", nil, false
	}
	l := all[rng.IntN(len(all))]
	return l.dir, l.name, r.cur[l.dir][l.name], true
}

// step does one random operation on the mount and on the model, and says
// what it did.
func step(t *testing.T, d *disk, r *ref, rng *rand.Rand) string {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	dir, name, f, ok := r.pick(rng)
	op := rng.IntN(100)
	if !ok {
		op = 0
	}
	switch {
	case op < 12: // create
		dir, name = refDirs[rng.IntN(len(refDirs))], refNames[rng.IntN(len(refNames))]
		if r.cur[dir][name] != nil {
			return "create: exists"
		}
		fh, err := os.OpenFile(d.p(filepath.Join(dir, name)), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
		must(err)
		must(fh.Close())
		r.cur[dir][name] = &refFile{cur: []byte{}}
		return "create " + filepath.Join(dir, name)
	case op < 40: // write at a random offset
		off := rng.IntN(len(f.cur) + 2048)
		data := make([]byte, 1+rng.IntN(512))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		d.writeAt(filepath.Join(dir, name), int64(off), data)
		if grow := off + len(data); grow > len(f.cur) {
			f.cur = append(f.cur, make([]byte, grow-len(f.cur))...)
		}
		copy(f.cur[off:], data)
		return fmt.Sprintf("write %s %d+%d", filepath.Join(dir, name), off, len(data))
	case op < 47: // truncate
		size := rng.IntN(len(f.cur) + 1024)
		must(os.Truncate(d.p(filepath.Join(dir, name)), int64(size)))
		if size < len(f.cur) {
			f.cur = f.cur[:size]
		} else {
			f.cur = append(f.cur, make([]byte, size-len(f.cur))...)
		}
		return fmt.Sprintf("truncate %s %d", filepath.Join(dir, name), size)
	case op < 52: // fallocate, growing the size
		off, n := rng.IntN(len(f.cur)+4096), 1+rng.IntN(8192)
		fh, err := os.OpenFile(d.p(filepath.Join(dir, name)), os.O_RDWR, 0)
		must(err)
		must(unix.Fallocate(int(fh.Fd()), 0, int64(off), int64(n)))
		must(fh.Close())
		if grow := off + n; grow > len(f.cur) {
			f.cur = append(f.cur, make([]byte, grow-len(f.cur))...)
		}
		return fmt.Sprintf("fallocate %s %d+%d", filepath.Join(dir, name), off, n)
	case op < 56: // replace through O_TRUNC
		data := []byte(fmt.Sprintf("replaced %d", rng.IntN(1000)))
		d.writeFile(filepath.Join(dir, name), string(data))
		f.cur = data
		return "replace " + filepath.Join(dir, name)
	case op < 72: // fsync a file
		d.fsync(filepath.Join(dir, name))
		r.synced(f, "")
		return "fsync " + filepath.Join(dir, name)
	case op < 82: // fsync a directory
		dir = refDirs[rng.IntN(len(refDirs))]
		d.fsync(dir)
		r.synced(nil, dir)
		return "fsync dir " + dir
	case op < 93: // rename, maybe over another file, maybe across directories
		toDir, toName := refDirs[rng.IntN(len(refDirs))], refNames[rng.IntN(len(refNames))]
		if toDir == dir && toName == name {
			return "rename: same"
		}
		must(os.Rename(d.p(filepath.Join(dir, name)), d.p(filepath.Join(toDir, toName))))
		delete(r.cur[dir], name)
		r.cur[toDir][toName] = f
		return fmt.Sprintf("rename %s %s", filepath.Join(dir, name), filepath.Join(toDir, toName))
	default: // unlink
		must(os.Remove(d.p(filepath.Join(dir, name))))
		delete(r.cur[dir], name)
		return "unlink " + filepath.Join(dir, name)
	}
}

// check compares the backing directory after a cut with the model.
func (r *ref) check(t *testing.T, d *disk) {
	t.Helper()
	for _, dir := range refDirs {
		want := slices.Sorted(maps.Keys(r.dur[dir]))
		if dir == "." {
			want = append(want, "d")
			slices.Sort(want)
		}
		d.expectNames(dir, want...)
		for name, f := range r.dur[dir] {
			got, ok := d.read(filepath.Join(dir, name))
			if !ok {
				continue // reported by expectNames
			}
			if !bytes.Equal([]byte(got), f.durable) {
				t.Errorf("%s: %d bytes, want %d (first difference at %d)",
					filepath.Join(dir, name), len(got), len(f.durable), firstDiff([]byte(got), f.durable))
			}
		}
	}
}

// Random operations, checked against the reference model after a cut.
func TestRandomOperationsMatchModel(t *testing.T) {
	for _, model := range []Model{Strict, Ext4Ordered} {
		t.Run(model.String(), func(t *testing.T) {
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 7))
			d := newDisk(t, model)
			r := newRef(model)
			if err := os.Mkdir(filepath.Join(d.backing, "d"), 0o755); err != nil {
				t.Fatal(err)
			}
			for _, dir := range refDirs {
				data := []byte("from before the mount in " + dir)
				if err := os.WriteFile(filepath.Join(d.backing, dir, "a"), data, 0o644); err != nil {
					t.Fatal(err)
				}
				f := &refFile{cur: bytes.Clone(data), durable: data}
				r.cur[dir]["a"], r.dur[dir]["a"] = f, f
			}
			d.mount()
			var log []string
			for range 200 {
				log = append(log, step(t, d, r, rng))
			}
			d.cut()
			r.check(t, d)
			if t.Failed() {
				t.Logf("operations:\n%s", fmt.Sprint(log))
			}
		})
	}
}
