package fsm

import (
	"github.com/google/btree"

	"github.com/concord-io/concord/schema"
)

// The history: every change to a key above the floor, kept as versions,
// and for each key changed above the floor the version it had at the
// floor (its base). kv.changes, reads at a past revision and a key's
// history are all served from it; nothing else keeps past states.
//
// A version of a put holds the record it wrote, the same *record as the
// live tree while it is current (records are immutable), so a value is
// stored once however many indexes point at it. A version that is still
// current (a live one) is in the change log only: the live tree answers
// for its key at any revision from its mod_revision on, so the key index
// holds only what the live tree cannot answer, the versions keys had
// before. A key changed once since the floor costs the key index nothing,
// and a read at a past revision walks only the keys that changed since.

// Causes of a version, as stored; schema.Cause* on the wire.
const (
	causePut uint8 = iota + 1
	causeDelete
	causeLeaseExpired
	causeLeaseRevoked
	causeTxn
)

var causeNames = [...]string{causePut: schema.CausePut, causeDelete: schema.CauseDelete,
	causeLeaseExpired: schema.CauseLeaseExpired, causeLeaseRevoked: schema.CauseLeaseRevoked,
	causeTxn: schema.CauseTxn}

func causeOf(name string) uint8 {
	for c, n := range causeNames {
		if n == name && c != 0 {
			return uint8(c)
		}
	}
	return 0
}

// version is one change of one key. Immutable once in the trees. It is
// kept to 48 bytes, since at default retention every key written in the
// last million revisions has one: a deleted key's lease is read from the
// record it points at.
type version struct {
	// rec is the record a put wrote, or the record a delete removed
	// (whose key and lease the tombstone reports). First, and k's bytes
	// next, so that the collector scans two words of each version.
	rec *record
	// k is rec.key (the same bytes), held here too: a search of the key
	// index compares the key of each version it passes, and read through
	// rec that was three cache misses one after another (the version, the
	// record, the key's bytes), two this way. Puts that overwrite a key
	// at the default retention run about a tenth faster
	// (BenchmarkApplyPutRetained), for 16 bytes a version.
	k   string
	rev int64
	// now is the lease-clock time of the command, for retention by age.
	now   int64
	op    int32
	cause uint8
}

func (v *version) isDelete() bool { return v.cause != causePut }

func (v *version) key() string { return v.k }

// written is the record a put wrote; nil for a delete.
func (v *version) written() *record {
	if v.isDelete() {
		return nil
	}
	return v.rec
}

// keyPivot is a search pivot for the key index: lessByKey reads only its
// key, revision and op_index, so it has no record.
func keyPivot(key string, rev int64, op int32) *version {
	return &version{k: key, rev: rev, op: op}
}

// event renders the version as the event it was published as.
func (v *version) event() schema.Event {
	r := v.rec
	if v.isDelete() {
		return deleteEvent(r.key, v.rev, int(v.op), r.lease, causeNames[v.cause])
	}
	return schema.Event{
		Type: schema.EventPut, Key: r.key, Value: r.value, Revision: v.rev, OpIndex: int(v.op),
		CreateRevision: r.createRevision, ModRevision: r.modRevision, Version: r.version,
		Lease: r.lease, Cause: causeNames[v.cause], ContentType: r.contentType(), Metadata: r.metadata(),
	}
}

func lessByRev(a, b *version) bool {
	if a.rev != b.rev {
		return a.rev < b.rev
	}
	return a.op < b.op
}

func lessByKey(a, b *version) bool {
	if ak, bk := a.k, b.k; ak != bk {
		return ak < bk
	}
	return lessByRev(a, b)
}

// history is the retained past of the keyspace.
type history struct {
	// byRev holds every version above the floor, by (revision, op_index):
	// the change log.
	byRev *btree.BTreeG[*version]
	// byKey holds the versions that are no longer live (those above the
	// floor, and the bases), by (key, revision, op_index): the live tree
	// and byRev hold the rest. keyindex.go.
	byKey keyIndex
	// floor is the compaction floor: the changes at or below it are gone,
	// and the keyspace can be read at any revision from it on.
	floor int64
	// revs counts the revisions byRev holds changes at. A space's log
	// skips the revisions of other tenants, so retention counts these
	// rather than subtracting revision numbers.
	revs int64
}

func newHistory() history {
	return history{byRev: btree.NewG(btreeDegree, lessByRev), byKey: newKeyIndex()}
}

// clone returns a copy-on-write copy of h. It changes h too: h's key index
// takes a new owner mark.
func (h *history) clone() history {
	return history{byRev: h.byRev.Clone(), byKey: h.byKey.clone(), floor: h.floor, revs: h.revs}
}

// latest returns the newest version of key at or below rev that the key
// index holds, or nil: never the key's live version (see recordAt).
func (h *history) latest(key string, rev int64) *version {
	return h.byKey.latest(key, rev)
}

// recordChanges adds a command's events to the history, then compacts what
// the retention limits no longer keep. prevs[i] is the record events[i]
// replaced or deleted (nil when the key did not exist), as the command's
// apply collected them in s.prevs.
func (s *State) recordChanges(events []schema.Event, now int64) {
	h := &s.hist
	var last map[string]int // a key's last event, for commands of many
	for i := range events {
		e := &events[i]
		if i == 0 || e.Revision != events[i-1].Revision {
			h.revs++
		}
		var prev *record
		if i < len(s.prevs) {
			prev = s.prevs[i]
		}
		// The event's version, lent to changeOf as its pivot first.
		v := s.newVersion()
		var run *keyRun // the key's run, when this change moved a version into one
		if prev != nil && prev.modRevision < e.Revision {
			// prev was live until this command: the key index takes over
			// its version. An earlier change of this command (at this
			// revision) went there already.
			var pv *version
			var ref runRef
			ok := false
			if prev.modRevision > h.floor {
				ref, ok = h.byKey.item(prev.key)
			}
			switch {
			case prev.modRevision <= h.floor:
				// The first change of the key since the floor passed it:
				// its record until now is the version it had at the floor.
				// The history holds a version of a key exactly when the key
				// changed above the floor, so its record says whether this
				// is the first, and that the key index has no item of it,
				// without a lookup.
				pv = &version{rev: prev.modRevision, cause: causePut, rec: prev, k: prev.key}
			case ok && ref.r != nil && ref.r.live != nil && ref.r.live.rec == prev && !ref.r.live.isDelete():
				pv = ref.r.live // the change log's version of prev, remembered
			default:
				pv = h.changeOf(prev, v)
			}
			if pv != nil {
				run = h.byKey.insertAt(ref, ok, pv)
			}
			if run != nil {
				run.live = nil
			}
		}
		*v = version{rev: e.Revision, op: int32(e.OpIndex), cause: causeOf(e.Cause), now: now}
		live := false
		switch {
		case e.Type == schema.EventDelete:
			// The record it deleted, whose key and lease are the event's.
			v.rec = prev
		case lastEventOf(events, i, &last):
			// The key's last change in the command: its record is live.
			if r := s.getRecord(e.Key); r != nil && r.modRevision == e.Revision && r.version == e.Version {
				v.rec, live = r, true
			}
		}
		if v.rec == nil {
			// A later operation of the same transaction changed the key
			// again: this version is no longer live.
			v.rec = &record{key: e.Key, value: e.Value, createRevision: e.CreateRevision, modRevision: e.ModRevision, version: e.Version, lease: e.Lease,
				extra: newExtra(e.ContentType, e.Metadata)}
		}
		v.k = v.rec.key
		h.byRev.ReplaceOrInsert(v)
		switch {
		case !live:
			h.byKey.insert(v)
		case run != nil:
			// The next put of the key finds the version it replaces here.
			run.live = v
		}
	}
	s.retain(now)
}

// versionSlab is how many versions newVersion allocates at once. Versions
// leave the history in about the order they were made (by revision), so a
// slab is freed soon after its last version goes; a version that outlives
// its neighbours (a key's base) keeps its slab's 2 KiB, which bounds the
// waste to the versions made in one retention window. 42: the runtime
// adds an 8-byte header to an object this size with pointers, and 42
// versions of 48 bytes and the header fill the 2,048-byte size class
// (TestVersionSlabFillsItsSizeClass).
const versionSlab = 42

// newVersion returns a zero version from the current slab: one allocation,
// and one object for the collector to mark, per versionSlab changes.
func (s *State) newVersion() *version { return fromSlab(&s.versionSlab, versionSlab) }

// fromSlab returns the first element of *free and takes it off; an empty
// *free is first refilled with a new array of n zero elements.
func fromSlab[T any](free *[]T, n int) *T {
	if len(*free) == 0 {
		*free = make([]T, n)
	}
	e := &(*free)[0]
	*free = (*free)[1:]
	return e
}

// lastEventOf reports whether events[i] is the last event of its key. A
// command of a few events is searched; for one of many, *last is built
// once (a transaction may write many keys, each once).
func lastEventOf(events []schema.Event, i int, last *map[string]int) bool {
	const search = 16
	if len(events) <= search {
		for j := i + 1; j < len(events); j++ {
			if events[j].Key == events[i].Key {
				return false
			}
		}
		return true
	}
	if *last == nil {
		*last = make(map[string]int, len(events))
		for j := range events {
			(*last)[events[j].Key] = j
		}
	}
	return (*last)[events[i].Key] == i
}

// changeOf returns the change that wrote r, a put above the floor, or nil.
// A record does not know its op_index: the changes of its revision are
// searched, as many as its command made (one, but for a transaction).
// pivot, when not nil, is scratch space for the search (a pivot escapes to
// the heap: a caller that searches often lends one); it is overwritten.
func (h history) changeOf(r *record, pivot *version) *version {
	if pivot == nil {
		pivot = new(version)
	}
	*pivot = version{rev: r.modRevision}
	var found *version
	h.byRev.AscendGreaterOrEqual(pivot, func(v *version) bool {
		if v.rev != r.modRevision {
			return false
		}
		if v.rec == r && !v.isDelete() {
			found = v
			return false
		}
		return true
	})
	return found
}

// retain raises the floor so that the history keeps the last
// HistoryRevisions revisions and none older than HistoryAgeMS, whichever
// keeps less. A pure function of the state and the command's time, so
// every replica compacts at the same point of the log.
//
// The revisions counted are those the space's change log holds: a
// tenant's history keeps its own last HistoryRevisions revisions however
// many other tenants write, and so does the default tenant's. With one
// tenant, which holds every revision, that is the last HistoryRevisions
// revisions of the cluster, as before tenants.
func (s *State) retain(now int64) {
	h := &s.hist
	for h.revs > s.limits.HistoryRevisions {
		oldest, _ := h.byRev.Min()
		s.compactTo(oldest.rev)
	}
	for s.limits.HistoryAgeMS > 0 {
		oldest, ok := h.byRev.Min()
		if !ok || oldest.now >= now-s.limits.HistoryAgeMS {
			return
		}
		s.compactTo(oldest.rev)
	}
}

// compactTo raises the floor to rev (never lowers it). Each change at or
// below it leaves the change log; in the key index the version it replaced
// goes, and so does the change itself if it is a delete (never a base: the
// key did not exist). A put that is no longer live stays as its key's base;
// one that is still live is not in the key index (the live tree answers).
func (s *State) compactTo(rev int64) {
	h := &s.hist
	if rev <= h.floor {
		return
	}
	gone := int64(0) // the last revision removed
	for {
		v, ok := h.byRev.Min()
		if !ok || v.rev > rev {
			break
		}
		if v.rev != gone {
			h.revs--
			gone = v.rev
		}
		h.byRev.DeleteMin()
		h.byKey.compacted(v)
	}
	h.floor = rev
}

// ChangesQuery reads the change log.
type ChangesQuery struct {
	Key      string
	IsPrefix bool
	// IsRange reads the changes of [Key, RangeEnd), RangeEnd "" meaning
	// to the end of the keyspace.
	IsRange  bool
	RangeEnd string
	// AfterRevision and AfterOpIndex: events strictly after this position.
	// AfterOpIndex -1 means after the whole revision.
	AfterRevision int64
	AfterOpIndex  int
	Limit         int
	// MaxBytes bounds the approximate size of the events returned.
	MaxBytes int
}

// maxChangesScan bounds how many log entries one read looks at, so a
// narrow filter over a long log cannot stall the leader.
const maxChangesScan = 100_000

// Changes returns matching events after the position, in order. When the
// position is below the compaction floor the events in between are gone
// and it fails with ErrCompacted. The reply's next position is where the
// scan stopped, which may be past the last event returned when it skipped
// events that did not match; at the end of the log it is the current
// revision, so a client that polls from there misses nothing.
func (s *State) Changes(q ChangesQuery) (*schema.KVChangesReply, error) {
	floor := s.hist.floor
	if q.AfterRevision < floor || (q.AfterRevision == floor && q.AfterOpIndex >= 0 && floor > 0) {
		return nil, errf(ErrCompacted, "revisions up to %d are compacted; read again from %d", floor, floor)
	}
	reply := &schema.KVChangesReply{Events: []schema.Event{}, CompactRevision: floor}
	start := &version{rev: q.AfterRevision + 1}
	if q.AfterOpIndex >= 0 {
		start = &version{rev: q.AfterRevision, op: int32(q.AfterOpIndex + 1)}
	}
	posRev, posOp := q.AfterRevision, q.AfterOpIndex
	scanned, size := 0, 0
	sp := spanOf(q.Key, q.IsPrefix, q.IsRange, q.RangeEnd)
	s.hist.byRev.AscendGreaterOrEqual(start, func(v *version) bool {
		if k := v.key(); sp.contains(k) {
			n := len(k) + recordOverhead
			if r := v.written(); r != nil {
				n += len(r.value)
			}
			if len(reply.Events) >= q.Limit || (q.MaxBytes > 0 && len(reply.Events) > 0 && size+n > q.MaxBytes) {
				reply.More = true
				return false
			}
			size += n
			reply.Events = append(reply.Events, v.event())
		}
		posRev, posOp = v.rev, int(v.op)
		if scanned++; scanned >= maxChangesScan {
			reply.More = true
			return false
		}
		return true
	})
	switch {
	case !reply.More:
		posRev, posOp = max(posRev, s.revision), -1
	case !s.revisionHasMore(posRev, posOp):
		posOp = -1
	}
	reply.NextRevision, reply.NextOpIndex = posRev, posOp
	return reply, nil
}

// revisionHasMore reports whether the log holds an event of rev after opIndex.
func (s *State) revisionHasMore(rev int64, opIndex int) bool {
	if opIndex < 0 {
		return false
	}
	more := false
	s.hist.byRev.AscendGreaterOrEqual(&version{rev: rev, op: int32(opIndex + 1)}, func(v *version) bool {
		more = v.rev == rev
		return false
	})
	return more
}

// HistoryChanges is the number of changes the histories of every tenant
// hold above their floors.
func (s *State) HistoryChanges() int {
	n := 0
	s.each(func(sp *space) { n += sp.hist.byRev.Len() })
	return n
}

// CompactRevision is the floor of the current space's history: the changes
// at or below it are gone, and its keys can be read at any revision from
// it on.
func (s *State) CompactRevision() int64 { return s.hist.floor }

// recordAt returns key's record as it stood right after revision rev
// committed, or nil when the key did not exist then. rev must not be below
// the floor.
func (s *State) recordAt(key string, rev int64) *record {
	if r := s.getRecord(key); r != nil && r.modRevision <= rev {
		// No change of the key since rev: the live record answers.
		return r
	}
	if v := s.hist.latest(key, rev); v != nil {
		return v.written()
	}
	return nil
}

// checkReadRevision refuses a read at a revision the history cannot answer.
func (s *State) checkReadRevision(rev int64) error {
	switch {
	case rev < s.hist.floor:
		return errf(ErrCompacted, "revision %d is compacted; the oldest readable revision is %d", rev, s.hist.floor)
	case rev > s.revision:
		return errf(ErrFutureRevision, "revision %d is in the future; the current revision is %d", rev, s.revision)
	}
	return nil
}

// ascendAt calls f, in key order, with every key in [start, end) (end ""
// means no end) as it stood at revision rev, until f returns false: the
// live keys that have not changed since, and the versions the history
// holds of the others. It walks the live tree once and, beside it, the
// history a page at a time (so no history callback runs inside the live
// one): a read of many keys costs one pass over each tree.
func (s *State) ascendAt(start, end string, rev int64, f func(r *record) bool) {
	hc := histCursor{h: s.hist, from: start, rev: rev, inRange: func(k string) bool { return end == "" || k < end }}
	// hk is the history's next key, nil at its end; next moves on. Every
	// live key is asked about, so the cursor is read once a key at most.
	hk := hc.peek()
	next := func() {
		hc.pop()
		hk = hc.peek()
	}
	stopped := false
	s.kv.AscendGreaterOrEqual(&record{key: start}, func(r *record) bool {
		if end != "" && r.key >= end {
			return false
		}
		// Keys only the history holds, before this one.
		for hk != nil && hk.key < r.key {
			at := hk.record()
			next()
			if at != nil && !f(at) {
				stopped = true
				return false
			}
		}
		at := r // unchanged since rev: the live record answers
		if r.modRevision > rev {
			at = nil // the key's version at rev is the history's, if any
			if hk != nil && hk.key == r.key {
				at = hk.record()
			}
		}
		if hk != nil && hk.key == r.key {
			next()
		}
		if at != nil && !f(at) {
			stopped = true
			return false
		}
		return true
	})
	for ; hk != nil && !stopped; next() {
		if at := hk.record(); at != nil && !f(at) {
			return
		}
	}
}

// histKey is one key of the history: its newest version at or below a
// revision, nil when it has none there.
type histKey struct {
	key string
	at  *version
}

// record is the key's record at the revision, nil if it did not exist.
func (k *histKey) record() *record {
	if k.at == nil {
		return nil
	}
	return k.at.written()
}

// histCursor reads the keys of the history in order, a page at a time.
type histCursor struct {
	h       history
	from    string
	rev     int64
	inRange func(string) bool
	page    []histKey
	i       int
	done    bool
}

// peek returns the next key, or nil at the end.
func (c *histCursor) peek() *histKey {
	if c.i == len(c.page) && !c.done {
		c.fill()
	}
	if c.i == len(c.page) {
		return nil
	}
	return &c.page[c.i]
}

func (c *histCursor) pop() { c.i++ }

func (c *histCursor) fill() {
	const pageSize = 256
	if c.page == nil {
		c.page = make([]histKey, 0, pageSize)
	}
	c.page, c.i = c.page[:0], 0
	c.h.byKey.ascendItems(c.from, func(r runRef) bool {
		if !c.inRange(r.k) {
			c.done = true
			return false
		}
		if len(c.page) == pageSize {
			return false
		}
		c.page = append(c.page, histKey{key: r.k, at: r.at(c.rev)})
		return true
	})
	if len(c.page) < pageSize {
		c.done = true
	}
	if len(c.page) > 0 {
		c.from = c.page[len(c.page)-1].key + "\x00"
	}
}

// HistoryQuery reads the versions of one key.
type HistoryQuery struct {
	Key string
	// From and To bound the window, both included; 0 means from the
	// floor, and to the present.
	From, To int64
	// After continues a listing: versions after this revision (before
	// it, when NewestFirst); 0 means from the window's start.
	After       int64
	NewestFirst bool
	Limit       int
	// MaxBytes bounds the approximate size of the records returned; at
	// least one revision's records are returned whatever their size.
	MaxBytes int
}

// History returns the changes of one key in a window, as their events
// carried them. A window that starts at or below the floor fails with
// ErrCompacted (those changes are gone); one that ends above the present,
// with ErrFutureRevision. A page never splits one revision's changes.
func (s *State) History(q HistoryQuery) (*schema.KVHistoryReply, error) {
	h := s.hist
	if q.From != 0 && q.From <= h.floor {
		return nil, errf(ErrCompacted, "revisions up to %d are compacted; the history starts after %d", h.floor, h.floor)
	}
	if q.To > s.revision {
		return nil, errf(ErrFutureRevision, "to_revision %d is in the future; the current revision is %d", q.To, s.revision)
	}
	// A listing continued past records that were compacted since its
	// last page must say so, or the reader would skip them unknowing.
	if q.After != 0 && ((!q.NewestFirst && q.After < h.floor) || (q.NewestFirst && q.After-1 <= h.floor && q.After-1 >= max(q.From, 1))) {
		return nil, errf(ErrCompacted, "revisions up to %d are compacted; the history continued after %d is gone in part", h.floor, q.After)
	}
	lo, hi := max(q.From, h.floor+1), s.revision
	if q.To != 0 {
		hi = q.To
	}
	if q.After != 0 {
		if q.NewestFirst {
			hi = min(hi, q.After-1)
		} else {
			lo = max(lo, q.After+1)
		}
	}
	reply := &schema.KVHistoryReply{Key: q.Key, Records: []schema.Event{}, Revision: s.revision, CompactRevision: h.floor}
	size := 0
	add := func(v *version) bool {
		if v.rev < lo || v.rev > hi {
			return true
		}
		n := len(v.rec.key) + recordOverhead
		if r := v.written(); r != nil {
			n += len(r.value)
		}
		full := len(reply.Records) >= q.Limit || (q.MaxBytes > 0 && len(reply.Records) > 0 && size+n > q.MaxBytes)
		if full && v.rev != reply.NextRevision {
			reply.More = true
			return false
		}
		size += n
		reply.Records = append(reply.Records, v.event())
		reply.NextRevision = v.rev
		return true
	}
	// The key's live version, its newest, is in the change log only.
	var live *version
	if r := s.getRecord(q.Key); r != nil && r.modRevision > h.floor && r.modRevision >= lo && r.modRevision <= hi {
		live = h.changeOf(r, nil)
	}
	vs := h.byKey.versionsOf(q.Key)
	if q.NewestFirst {
		if live == nil || add(live) {
			for i := len(vs) - 1; i >= 0 && vs[i].rev >= lo; i-- {
				if vs[i].rev <= hi && !add(vs[i]) {
					break
				}
			}
		}
	} else {
		for _, v := range vs {
			if v.rev > hi || !add(v) {
				break
			}
		}
		if live != nil && !reply.More {
			add(live)
		}
	}
	if !reply.More {
		reply.NextRevision = 0
	}
	return reply, nil
}

// Compact raises the history's floor to a revision: the changes at and
// below it are gone, and reads at revisions below it fail. Compacting
// to or below the floor changes nothing.
type Compact struct {
	Revision int64
}

func (s *State) compact(_ int64, c *Compact) (any, error) {
	if c.Revision > s.revision {
		return nil, errf(ErrFutureRevision, "revision %d is in the future; the current revision is %d", c.Revision, s.revision)
	}
	s.compactTo(c.Revision)
	return &schema.KVCompactReply{Revision: s.revision, CompactRevision: s.hist.floor}, nil
}
