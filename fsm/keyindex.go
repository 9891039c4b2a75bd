package fsm

import (
	"cmp"
	"slices"
	"sync/atomic"

	"github.com/google/btree"
)

// The history's key index holds the versions that are no longer live, in
// (key, revision, op_index) order. It was one B-tree of versions; a put
// at the default retention then searched it twice (moving the version it
// replaced in, and, compacting the oldest revision, finding and dropping
// that key's version before it), each search a chain of cache misses
// through a million versions. It is now a B-tree of keys, each with its
// versions in a slice: a search passes one entry a key, and the versions
// of a key sit together, so both changes are one search of a much smaller
// tree and a few words of one slice.
//
// Views and snapshots share the index with the live state (an O(1) clone
// of the tree), so a key's run is changed in place only by the index that
// made it: each clone takes a new owner mark, and a run made under another
// is copied before it changes (own).
//
// A key with one version keeps it in the tree's item, without a run: at
// the default retention, after a million keys were each written again and
// again, nearly every key has just its version at the floor, and a run
// and its slice for each cost 170 MiB more resident memory
// (`etcdbench scale --rewrites 5`). A key's first version goes into its
// item, a second makes a run, and a run that compaction leaves with one
// version goes back into its item.

// keyRun is one key's versions in the key index, by (revision, op_index).
// Never empty while in the tree. Its key is its item's, and each of its
// versions' (version.k).
type keyRun struct {
	vs []*version
	// owner is the mark of the index that made the run, which alone may
	// change it in place.
	owner uint64
	// live is the key's live version when the run last changed, or nil: a
	// hint that spares a search of the change log for the version a put
	// replaces (recordChanges checks that it still is).
	live *version
}

// runRef is the key index tree's item: a key and its versions, either one
// version (one) or a run of any number (r), never both. The key is held
// in the item, not only in the run, so that a search reads the keys it
// compares from the tree's nodes and not each through a run: one cache
// miss less a comparison (two searches a put at the default retention).
type runRef struct {
	k   string
	one *version
	r   *keyRun
}

// len returns how many versions ref holds.
func (ref *runRef) len() int {
	if ref.r != nil {
		return len(ref.r.vs)
	}
	return 1
}

// get returns ref's i-th version, oldest first.
func (ref *runRef) get(i int) *version {
	if ref.r != nil {
		return ref.r.vs[i]
	}
	return ref.one
}

// search returns the position of ref's first version at or after (rev, op).
func (ref *runRef) search(rev int64, op int32) int {
	if ref.r != nil {
		return ref.r.search(rev, op)
	}
	if lessByRev(ref.one, &version{rev: rev, op: op}) {
		return 1
	}
	return 0
}

// at returns ref's newest version at or below rev, or nil.
func (ref *runRef) at(rev int64) *version {
	if i := ref.search(rev+1, minOp); i > 0 {
		return ref.get(i - 1)
	}
	return nil
}

func lessRun(a, b runRef) bool { return a.k < b.k }

// owners hands out owner marks. A mark only tells which index may change
// a run in place; it never shows in what the state answers or writes, so
// its values need not be the same on every replica.
var owners atomic.Uint64

// keyIndex is the history's key index (see above).
type keyIndex struct {
	runs  *btree.BTreeG[runRef]
	n     int // versions
	owner uint64
}

func newKeyIndex() keyIndex {
	return keyIndex{runs: btree.NewG(btreeDegree, lessRun), owner: owners.Add(1)}
}

// clone returns a copy that shares every run with x; from then on each
// side copies a shared run before changing it.
func (x *keyIndex) clone() keyIndex {
	x.owner = owners.Add(1)
	return keyIndex{runs: x.runs.Clone(), n: x.n, owner: owners.Add(1)}
}

// Len returns how many versions the index holds.
func (x *keyIndex) Len() int { return x.n }

// item returns key's item; ok is false when the index has no version of
// key.
func (x *keyIndex) item(key string) (ref runRef, ok bool) {
	return x.runs.Get(runRef{k: key})
}

// own returns the run of ref, an item of the index, for changing: copied
// first if another index made it, made from the item's one version if it
// had one.
func (x *keyIndex) own(ref runRef) *keyRun {
	r := ref.r
	switch {
	case r == nil:
		r = &keyRun{vs: make([]*version, 1, 2), owner: x.owner}
		r.vs[0] = ref.one
	case r.owner != x.owner:
		c := &keyRun{vs: make([]*version, len(r.vs), len(r.vs)+2), owner: x.owner, live: r.live}
		copy(c.vs, r.vs)
		r = c
	default:
		return r
	}
	x.runs.ReplaceOrInsert(runRef{k: ref.k, r: r})
	return r
}

// fold puts r's one version back into its item, dropping the run (and
// the live version it remembers).
func (x *keyIndex) fold(r *keyRun) {
	x.runs.ReplaceOrInsert(runRef{k: r.vs[0].k, one: r.vs[0]})
}

// search returns the position of the first version of r at or after
// (rev, op).
func (r *keyRun) search(rev int64, op int32) int {
	i, _ := slices.BinarySearchFunc(r.vs, version{rev: rev, op: op}, func(v *version, p version) int {
		if v.rev != p.rev {
			return cmp.Compare(v.rev, p.rev)
		}
		return cmp.Compare(v.op, p.op)
	})
	return i
}

// add puts v into r, an owned run of its key; one of the same revision
// and op_index is replaced.
func (x *keyIndex) add(r *keyRun, v *version) {
	if n := len(r.vs); n == 0 || lessByRev(r.vs[n-1], v) {
		// Versions move in as their keys change again: nearly always the
		// newest of the run.
		r.vs = append(r.vs, v)
		x.n++
		return
	}
	i := r.search(v.rev, v.op)
	if i < len(r.vs) && r.vs[i].rev == v.rev && r.vs[i].op == v.op {
		r.vs[i] = v
		return
	}
	r.vs = slices.Insert(r.vs, i, v)
	x.n++
}

// insert puts v into the index, replacing one of the same key, revision
// and op_index, and returns the key's run: nil when v is the key's only
// version, which its item then holds.
func (x *keyIndex) insert(v *version) *keyRun {
	ref, ok := x.item(v.k)
	return x.insertAt(ref, ok, v)
}

// insertAt is insert with v's key's item already looked up (ok false
// when there is none).
func (x *keyIndex) insertAt(ref runRef, ok bool, v *version) *keyRun {
	if !ok || ref.r == nil && ref.one.rev == v.rev && ref.one.op == v.op {
		if !ok {
			x.n++
		}
		x.runs.ReplaceOrInsert(runRef{k: v.k, one: v})
		return nil
	}
	r := x.own(ref)
	x.add(r, v)
	return r
}

// removeAt takes the i-th version out of r, an owned run, and r out of
// the tree once it is empty.
func (x *keyIndex) removeAt(r *keyRun, i int) {
	k := r.vs[i].k
	if i == 0 {
		// The oldest goes first (compaction): no copy, and the slot is
		// cleared so the version can be collected.
		r.vs[0] = nil
		r.vs = r.vs[1:]
	} else {
		r.vs = slices.Delete(r.vs, i, i+1)
	}
	x.n--
	if len(r.vs) == 0 {
		x.runs.Delete(runRef{k: k})
	}
}

// compacted drops what the compaction of v (leaving the change log) frees
// in the index: the version of v's key just before v, and v itself when it
// is a delete (a key that does not exist at the floor needs no version
// there). v need not be in the index (a live version is not).
func (x *keyIndex) compacted(v *version) {
	ref, ok := x.item(v.k)
	if !ok {
		return
	}
	r := x.own(ref)
	if r.live == v {
		r.live = nil
	}
	i := r.search(v.rev, v.op)
	if i > 0 {
		x.removeAt(r, i-1)
		i--
	}
	if v.isDelete() && i < len(r.vs) && r.vs[i].rev == v.rev && r.vs[i].op == v.op {
		x.removeAt(r, i)
	}
	if len(r.vs) == 1 {
		x.fold(r)
	}
}

// minOp is below every op_index: (rev, minOp) comes before all of rev.
const minOp = -1 << 31

// latest returns key's newest version at or below rev, or nil.
func (x *keyIndex) latest(key string, rev int64) *version {
	if ref, ok := x.item(key); ok {
		return ref.at(rev)
	}
	return nil
}

// versionsOf returns key's versions, oldest first, for reading only.
func (x *keyIndex) versionsOf(key string) []*version {
	ref, ok := x.item(key)
	switch {
	case !ok:
		return nil
	case ref.r != nil:
		return ref.r.vs
	}
	return []*version{ref.one}
}

// Has reports whether the index holds a version of v's key, revision and
// op_index.
func (x *keyIndex) Has(v *version) bool {
	ref, ok := x.item(v.k)
	if !ok {
		return false
	}
	i := ref.search(v.rev, v.op)
	return i < ref.len() && ref.get(i).rev == v.rev && ref.get(i).op == v.op
}

// Ascend calls f with every version in (key, revision, op_index) order
// until f returns false.
func (x *keyIndex) Ascend(f func(*version) bool) {
	x.AscendGreaterOrEqual(keyPivot("", -1<<63, minOp), f)
}

// AscendGreaterOrEqual calls f, in order, with every version at or after
// pivot's (key, revision, op_index) until f returns false.
func (x *keyIndex) AscendGreaterOrEqual(pivot *version, f func(*version) bool) {
	x.runs.AscendGreaterOrEqual(runRef{k: pivot.k}, func(ref runRef) bool {
		i := 0
		if ref.k == pivot.k {
			i = ref.search(pivot.rev, pivot.op)
		}
		for ; i < ref.len(); i++ {
			if !f(ref.get(i)) {
				return false
			}
		}
		return true
	})
}

// ascendItems calls f with every key's item from key from on, in key
// order, until f returns false. The items are for reading only.
func (x *keyIndex) ascendItems(from string, f func(runRef) bool) {
	x.runs.AscendGreaterOrEqual(runRef{k: from}, f)
}
