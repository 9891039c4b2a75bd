package fsm

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/google/btree"
)

// Restoring a snapshot, whatever its version: read the records from the
// source, check each against the rules Apply keeps, collect them in the
// order the snapshot gives (every writer gives the trees' own order), and
// build the trees from the sorted lists. The rules are checked here once,
// so the JSON and the binary encodings cannot disagree on what a valid
// snapshot is.
//
// The work is spread over goroutines where the data allows: a version 5
// snapshot is decoded a frame at a time ahead of the checks
// (snapshot_binary.go); the key tree is built while the keys are still
// being read, and the history's tree by key while the history is; the
// tree by revision once the history is checked. Each tree is built by one
// goroutine, from one list, in one order, so the result does not depend on
// the scheduling; the state is handed to the caller only after every
// goroutine is done. On the two cores of the machine this was measured on,
// a fresh process restores a million bench-scale keys (version 5) in 1.1 s
// this way and in 1.6 s with everything on one goroutine
// (restoreConcurrently, which BenchmarkSnapshotRestore's v5-sequential
// turns off).

// restorer holds a state being restored and the lists it is built from.
type restorer struct {
	s *State
	h snapshotHeader

	leases []*lease  // by id
	counts []int64   // keys per lease, as leases
	recs   []*record // by key
	// cur is where the history's look-ups of live records are in recs;
	// the history comes in key order, so they only move forward.
	cur  int
	vers []*version // the history, by key
	// runs are the key index's items (vers without the live versions, an
	// item a key) not yet handed to its builder.
	runs []runRef
	// above counts the versions above the floor: the change log.
	above int
	// owned are the revisions of each space's change log read so far.
	owned []spaceRevisions
	// quotas are the quota records read (version 5, after the spaces).
	quotas []quotaRecord

	// The slabs new records and versions are taken from.
	records  []record
	versions []version
	// building waits for the trees built concurrently, and closers stop
	// the builders still waiting for items.
	building sync.WaitGroup
	closers  []func()
}

// restoreFrom reads and checks a whole snapshot into a new state, from
// the source newSource makes.
func restoreFrom(newSource func(*restorer) snapshotSource) (*State, error) {
	rs := &restorer{s: New()}
	src := newSource(rs)
	h, err := src.header()
	if err != nil {
		return nil, err
	}
	rs.h = h
	err = rs.read(src)
	// The goroutines only touch the new state: wait for them on every path,
	// so none outlives the call.
	for _, stop := range rs.closers {
		stop()
	}
	rs.building.Wait()
	if err != nil {
		return nil, err
	}
	return rs.s, nil
}

// restoreConcurrently builds the trees concurrently; the benchmarks turn
// it off to measure what that gains.
var restoreConcurrently = true

// goBuild runs f concurrently with the rest of the restore.
func (rs *restorer) goBuild(f func()) {
	if !restoreConcurrently {
		f()
		return
	}
	rs.building.Add(1)
	go func() {
		defer rs.building.Done()
		f()
	}()
}

// buildChunk is how many items a tree builder is handed at a time.
const buildChunk = 4096

// treeBuilder builds a tree, in its own goroutine, from a list that the
// restore is still appending to: the items already appended are handed
// over a chunk at a time, in order. The list's elements are never written
// once appended (a reallocation copies them), so the builder reads them
// while the restore goes on.
type treeBuilder[T any] struct {
	tree *btree.BTreeG[T]
	// ch hands chunks to the builder goroutine, nil once it is closed or
	// when the restore builds sequentially.
	ch         chan []T
	concurrent bool
	sent       int // how many items of the list were handed over
}

func startTree[T any](rs *restorer, tree *btree.BTreeG[T]) *treeBuilder[T] {
	b := &treeBuilder[T]{tree: tree, concurrent: restoreConcurrently}
	if b.concurrent {
		ch := make(chan []T, 64)
		b.ch = ch
		rs.goBuild(func() {
			for chunk := range ch {
				for _, it := range chunk {
					tree.ReplaceOrInsert(it)
				}
			}
		})
		// Whatever happens to the restore, the builder ends.
		rs.closers = append(rs.closers, b.stop)
	}
	return b
}

// add hands over the items of list not yet handed over, once there is a
// chunk of them.
func (b *treeBuilder[T]) add(list []T) {
	if b.ch != nil && len(list)-b.sent >= buildChunk {
		b.ch <- list[b.sent:len(list):len(list)]
		b.sent = len(list)
	}
}

// handOver is add for a list that nothing but the builder reads (and a
// builder handOver feeds is fed by it and finish alone): once the list
// holds a chunk, it goes to the builder whole, and handOver returns a new
// empty list to go on with. The key index's items of a history of a
// million keys were one list that append grew a quarter at a time, 250 MB
// allocated and copied for 32 MB of items; chunk by chunk they are
// allocated once.
func (b *treeBuilder[T]) handOver(list []T) []T {
	if b.ch == nil || len(list) < buildChunk {
		return list
	}
	b.ch <- list
	return make([]T, 0, buildChunk+1)
}

// finish hands over the rest of list and lets the builder end; without a
// builder, it builds the tree.
func (b *treeBuilder[T]) finish(list []T) {
	if !b.concurrent {
		for _, it := range list {
			b.tree.ReplaceOrInsert(it)
		}
		return
	}
	if b.ch != nil && len(list) > b.sent {
		b.ch <- list[b.sent:len(list):len(list)]
		b.sent = len(list)
	}
	b.stop()
}

func (b *treeBuilder[T]) stop() {
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}

// grow makes room in list for one more item, doubling its capacity (a
// large append grows it by a quarter, which for a million items copies
// them over and over) but never past want, what the header announced.
func grow[T any](list []T, want int) []T {
	if len(list) < cap(list) {
		return list
	}
	c := min(max(2*cap(list), 1024), max(want, len(list)+1))
	return append(make([]T, 0, c), list...)
}

func (rs *restorer) read(src snapshotSource) error {
	s, h := rs.s, rs.h
	s.revision, s.now, s.limits = h.Revision, h.Now, h.Limits.withDefaults()
	if err := rs.readSpace(src); err != nil {
		return err
	}
	main := rs.s
	for {
		th, err := src.nextSpace()
		if err != nil {
			return fmt.Errorf("%w: %v", ErrBadSnapshot, err)
		}
		if th == nil {
			break
		}
		if err := rs.readTenant(src, main, th); err != nil {
			return err
		}
	}
	rs.s = main
	main.leave()
	main.each(func(sp *space) { main.leaseTotal += int64(sp.leases.Len()) })
	if err := rs.readQuotas(main); err != nil {
		return err
	}
	return rs.checkRevisionsOwned(main)
}

// readQuotas checks the quota records and gives them to s.
func (rs *restorer) readQuotas(s *State) error {
	if len(rs.quotas) == 0 {
		return nil
	}
	s.quotas = make(map[string]Quota, len(rs.quotas))
	for i, r := range rs.quotas {
		if err := ValidateQuotaTenant(r.name); err != nil {
			return fmt.Errorf("%w: a quota for %q: %v", ErrBadSnapshot, r.name, err)
		}
		if i > 0 && r.name <= rs.quotas[i-1].name {
			return fmt.Errorf("%w: the quota of %q after %q: duplicate or out of order", ErrBadSnapshot, r.name, rs.quotas[i-1].name)
		}
		for _, v := range r.quota.fields() {
			if v < 0 {
				return fmt.Errorf("%w: the quota of %q is negative", ErrBadSnapshot, r.name)
			}
		}
		s.quotas[r.name] = r.quota
	}
	return nil
}

// readTenant reads the space of a tenant into main: the restorer reads it
// as the default space of a state of its own, with main's revision, time
// and limits, and hands the space over.
func (rs *restorer) readTenant(src snapshotSource, main *State, th *snapshotHeader) error {
	name := th.Tenant
	if err := ValidateTenant(name); err != nil || name == DefaultTenant {
		return fmt.Errorf("%w: a tenant frame names %q, not a tenant", ErrBadSnapshot, name)
	}
	if last := main.names[len(main.names)-1]; name <= last {
		return fmt.Errorf("%w: tenant %q after %q: duplicate or out of order", ErrBadSnapshot, name, last)
	}
	sub := New()
	sub.revision, sub.now, sub.limits = main.revision, main.now, main.limits
	h := *th
	h.Version, h.Revision, h.Now, h.Limits = rs.h.Version, main.revision, main.now, main.limits
	rs.s, rs.h = sub, h
	rs.leases, rs.counts, rs.recs, rs.cur, rs.vers, rs.runs, rs.above = nil, nil, nil, 0, nil, nil, 0
	if err := rs.readSpace(src); err != nil {
		return fmt.Errorf("tenant %q: %w", name, err)
	}
	sp := sub.space
	sp.name = name
	sp.status, sp.movedTo, sp.fencedAt = th.Status, th.MovedTo, th.FencedAt
	switch {
	case sp.status > tenantMoved:
		return fmt.Errorf("%w: tenant %q has status %d", ErrBadSnapshot, name, sp.status)
	case (sp.status == tenantMoving || sp.status == tenantMoved) != (sp.movedTo != ""):
		return fmt.Errorf("%w: tenant %q has status %d and destination %q", ErrBadSnapshot, name, sp.status, sp.movedTo)
	case sp.status == tenantMoved && (sp.kv.Len() > 0 || sp.leases.Len() > 0):
		return fmt.Errorf("%w: tenant %q moved away but holds keys or leases", ErrBadSnapshot, name)
	}
	main.addSpace(sp)
	return nil
}

// readSpace reads the sections of one space into rs.s's current space.
func (rs *restorer) readSpace(src snapshotSource) error {
	s, h := rs.s, rs.h
	s.nextLeaseID, s.idemSeq = h.NextLeaseID, h.IdempotencySeq
	if err := rs.readLeases(src); err != nil {
		return err
	}
	if err := rs.readKeys(src); err != nil {
		return err
	}
	if err := rs.readIdempotency(src); err != nil {
		return err
	}
	s.hist.floor = h.CompactRevision
	if s.hist.floor < 0 || s.hist.floor > s.revision {
		return fmt.Errorf("%w: compact revision %d outside 0..%d", ErrBadSnapshot, s.hist.floor, s.revision)
	}
	if h.Version < 4 {
		// A version 3 change log holds the changes above its floor but not
		// the versions keys had at the floor, which reads at a past
		// revision need: the history starts at the snapshot's revision.
		if h.Version < 3 {
			s.hist.floor = h.Revision
		}
		if err := s.checkChangeLogV3(src, h.Changes); err != nil {
			return err
		}
		s.hist.floor = s.revision
	}
	if err := rs.readHistory(src, h.History); err != nil {
		return err
	}
	return rs.buildLeases()
}

// readLeases reads the leases, which come by id, each once.
func (rs *restorer) readLeases(src snapshotSource) error {
	n := rs.h.Leases
	var sl snapshotLease
	for i := 0; i < n; i++ {
		if err := src.lease(&sl); err != nil {
			return fmt.Errorf("%w: lease %d of %d: %v", ErrBadSnapshot, i+1, n, err)
		}
		if sl.ID < 1 || sl.TTL < 1 {
			return fmt.Errorf("%w: lease %d of %d: bad id %d or ttl %d", ErrBadSnapshot, i+1, n, sl.ID, sl.TTL)
		}
		if k := len(rs.leases); k > 0 && sl.ID <= rs.leases[k-1].id {
			return fmt.Errorf("%w: lease %d of %d: id %d after %d: duplicate or out of order", ErrBadSnapshot, i+1, n, sl.ID, rs.leases[k-1].id)
		}
		rs.leases = append(grow(rs.leases, n), &lease{id: sl.ID, ttl: sl.TTL, deadline: sl.Deadline, grantedRevision: sl.GrantedRevision, anonymous: sl.Anonymous, metadata: sl.Metadata})
	}
	rs.counts = make([]int64, len(rs.leases))
	return nil
}

// leaseIndex returns the index in rs.leases of lease id, or -1.
func (rs *restorer) leaseIndex(id int64) int {
	i, ok := slices.BinarySearchFunc(rs.leases, id, func(l *lease, id int64) int {
		switch {
		case l.id < id:
			return -1
		case l.id > id:
			return 1
		}
		return 0
	})
	if !ok {
		return -1
	}
	return i
}

// readKeys reads the keys, which come by key, each once, and counts the
// keys of each lease.
func (rs *restorer) readKeys(src snapshotSource) error {
	n := rs.h.Keys
	kv := startTree(rs, rs.s.kv)
	var sk snapshotKV
	for i := 0; i < n; i++ {
		if err := src.key(&sk); err != nil {
			return fmt.Errorf("%w: key %d of %d: %v", ErrBadSnapshot, i+1, n, err)
		}
		if sk.Key == "" || len(sk.Value) == 0 {
			return fmt.Errorf("%w: key %d of %d: empty or valueless key %q", ErrBadSnapshot, i+1, n, sk.Key)
		}
		if k := len(rs.recs); k > 0 && sk.Key <= rs.recs[k-1].key {
			return fmt.Errorf("%w: key %d of %d: %q after %q: duplicate or out of order", ErrBadSnapshot, i+1, n, sk.Key, rs.recs[k-1].key)
		}
		rec := rs.newRecord(&sk)
		if rec.lease != 0 {
			li := rs.leaseIndex(rec.lease)
			if li < 0 {
				return fmt.Errorf("%w: key %q names missing lease %d", ErrBadSnapshot, rec.key, rec.lease)
			}
			rs.counts[li]++
		}
		rs.recs = append(grow(rs.recs, n), rec)
		rs.s.valueBytes += rec.size()
		kv.add(rs.recs)
	}
	kv.finish(rs.recs)
	return nil
}

// readIdempotency reads the idempotency cache, which comes by age.
func (rs *restorer) readIdempotency(src snapshotSource) error {
	s, n := rs.s, rs.h.Idempotency
	var si snapshotIdem
	for i := 0; i < n; i++ {
		if err := src.idem(&si); err != nil {
			return fmt.Errorf("%w: idempotency entry %d of %d: %v", ErrBadSnapshot, i+1, n, err)
		}
		e := &idemEntry{key: si.Key, hash: si.hash, revision: si.Revision, seq: si.Seq, reply: si.Reply}
		if !si.hashOK || e.key == "" || len(e.reply) == 0 || e.seq == 0 || e.seq > s.idemSeq {
			return fmt.Errorf("%w: idempotency entry %d of %d is malformed", ErrBadSnapshot, i+1, n)
		}
		if _, dup := s.idemByKey.ReplaceOrInsert(e); dup {
			return fmt.Errorf("%w: idempotency key %q appears twice", ErrBadSnapshot, e.key)
		}
		if _, dup := s.idemBySeq.ReplaceOrInsert(e); dup {
			return fmt.Errorf("%w: idempotency sequence %d appears twice", ErrBadSnapshot, e.seq)
		}
	}
	return nil
}

// buildLeases gives each lease its key count, checks that an anonymous
// lease holds exactly its one key (or, in a space being imported, at most
// one: its key may come in a later chunk), and builds the lease, deadline
// and attachment trees.
func (rs *restorer) buildLeases() error {
	s := rs.s
	for i, l := range rs.leases {
		l.keyCount = rs.counts[i]
		if l.anonymous {
			if l.keyCount != 1 && (l.keyCount != 0 || rs.h.Status != tenantImporting) {
				return fmt.Errorf("%w: anonymous lease %d has %d keys, not 1", ErrBadSnapshot, l.id, l.keyCount)
			}
			s.anonymous++
		}
	}
	// Attachments by (lease, key): each lease's keys are in key order
	// already, so place them at their lease's offset.
	offsets := make([]int64, len(rs.leases)+1)
	for i, c := range rs.counts {
		offsets[i+1] = offsets[i] + c
	}
	attached := make([]attachment, offsets[len(rs.leases)])
	li := -1
	for _, r := range rs.recs {
		if r.lease == 0 {
			continue
		}
		if li < 0 || rs.leases[li].id != r.lease {
			li = rs.leaseIndex(r.lease)
		}
		attached[offsets[li]] = attachment{r.lease, r.key}
		offsets[li]++
	}
	deadlines := make([]deadlineEntry, len(rs.leases))
	for i, l := range rs.leases {
		deadlines[i] = deadlineEntry{l.deadline, l.id}
	}
	slices.SortFunc(deadlines, func(a, b deadlineEntry) int {
		if lessDeadline(a, b) {
			return -1
		}
		return 1 // ids are unique: never equal
	})
	for _, l := range rs.leases {
		s.leases.ReplaceOrInsert(l)
	}
	for _, d := range deadlines {
		s.expiry.ReplaceOrInsert(d)
	}
	for _, a := range attached {
		s.attached.ReplaceOrInsert(a)
	}
	return nil
}

// liveRecord returns the live record of key, or nil. The history asks in
// key order, so the search goes forward from the last answer; a key behind
// it (a history out of order, which readHistory refuses) is searched for.
func (rs *restorer) liveRecord(key string) *record {
	recs := rs.recs
	if rs.cur > 0 && recs[rs.cur-1].key >= key {
		i, ok := slices.BinarySearchFunc(recs[:rs.cur], key, func(r *record, k string) int { return strings.Compare(r.key, k) })
		if !ok {
			return nil
		}
		return recs[i]
	}
	for rs.cur < len(recs) && recs[rs.cur].key < key {
		rs.cur++
	}
	if rs.cur < len(recs) && recs[rs.cur].key == key {
		rs.cur++
		return recs[rs.cur-1]
	}
	return nil
}

// readHistory reads n versions, in key order, and checks that they are what
// Apply leaves: every revision above the floor, each numbered from op_index
// 0 without gaps, times never going back or past the state's clock; at or
// below the floor only puts that a later version of their key still needs;
// a version marked live is the key's live record, and its last. A hole
// would let a reader skip changes without ever being told the history was
// compacted. The key index is built from the versions not marked live (the
// live tree answers for those), the change log from all above the floor.
func (rs *restorer) readHistory(src snapshotSource, n int) error {
	s := rs.s
	floor := s.hist.floor
	byKey := startTree(rs, s.hist.byKey.runs)
	var prev *version
	prevLive := false
	var sv snapshotVersion
	for i := 0; i < n; i++ {
		if err := src.version(&sv); err != nil {
			return fmt.Errorf("%w: history version %d of %d: %v", ErrBadSnapshot, i+1, n, err)
		}
		if sv.keyRef != 0 {
			if sv.keyRef > len(rs.recs) {
				return fmt.Errorf("%w: history version %d of %d refers to key %d of %d", ErrBadSnapshot, i+1, n, sv.keyRef, len(rs.recs))
			}
			sv.Key = rs.recs[sv.keyRef-1].key
			if sv.Record != nil {
				sv.Record.Key = sv.Key
			}
		}
		v := rs.newVersion()
		*v = version{rev: sv.Revision, op: sv.OpIndex, cause: sv.cause, now: sv.Now}
		bad := func(why string) error {
			return fmt.Errorf("%w: history version %d of %d (key %q, revision %d, op %d): %s", ErrBadSnapshot, i+1, n, sv.Key, v.rev, v.op, why)
		}
		// A delete, or a put of a key that existed, follows a put of its
		// key: above the floor, or as the key's version at the floor. A
		// delete points at the record it removed, that put's.
		samePut := prev != nil && prev.key() == sv.Key && !prev.isDelete()
		switch {
		case sv.Live:
			r := rs.liveRecord(sv.Key)
			if r == nil || r.modRevision != sv.Revision || sv.Record != nil {
				return bad("marked live, but it is not the key's live record")
			}
			v.rec = r
		case sv.Record != nil:
			sk := sv.Record
			if sk.Key != sv.Key || len(sk.Value) == 0 || sk.ModRevision != sv.Revision {
				return bad("its record does not match it")
			}
			v.rec = rs.newRecord(sk)
		}
		switch {
		case sv.Key == "" || v.cause == 0 || int(v.cause) >= len(causeNames) || v.rev < 1 || v.rev > s.revision || v.op < 0 || v.now > s.now:
			return bad("out of range")
		case (v.rec == nil) != (v.cause != causePut):
			return bad("a put without a record, or a delete with one")
		case v.isDelete() && !samePut:
			return bad("a delete with no version of the key before it")
		case v.isDelete() && prev.rec.lease != sv.Lease:
			return bad("a delete whose lease is not the deleted record's")
		}
		if v.isDelete() {
			v.rec = prev.rec
		}
		v.k = v.rec.key
		switch {
		case prev != nil && !lessByKey(prev, v):
			return bad("out of order")
		case prevLive && prev.key() == sv.Key:
			return bad("a version after its key's live one")
		case prev != nil && prev.key() == sv.Key && prev.rev <= floor && v.rev <= floor:
			return bad("two versions of one key at or below the floor")
		case v.rev <= floor && v.isDelete():
			return bad("a delete at or below the floor")
		case v.rev > floor && !v.isDelete() && v.rec.version > 1 && !samePut:
			return bad("no version of the key before it")
		}
		if prev != nil && prev.key() != sv.Key && prev.rev <= floor {
			return fmt.Errorf("%w: history: key %q keeps a version at the floor but no change after it", ErrBadSnapshot, prev.key())
		}
		rs.vers = append(grow(rs.vers, n), v)
		// The key index's item of this key, if it has one yet; not handed
		// to the tree builder before the next key's.
		var last *runRef
		if len(rs.runs) > 0 && rs.runs[len(rs.runs)-1].k == v.k {
			last = &rs.runs[len(rs.runs)-1]
		}
		if !sv.Live {
			s.hist.byKey.n++
		}
		switch {
		case sv.Live && last != nil && last.r != nil:
			// A live version is in the change log only: the live tree
			// answers for it. Its key's run remembers it.
			last.r.live = v
		case sv.Live:
		case last != nil && last.r != nil:
			last.r.vs = append(last.r.vs, v)
		case last != nil:
			// A second version: the key's item becomes a run.
			last.r = &keyRun{vs: []*version{last.one, v}, owner: s.hist.byKey.owner}
			last.one = nil
		default:
			// A new key: the items before it are complete.
			rs.runs = append(byKey.handOver(rs.runs), runRef{k: v.k, one: v})
		}
		if v.rev > floor {
			rs.above++
		}
		prev, prevLive = v, sv.Live
	}
	if prev != nil && prev.rev <= floor {
		return fmt.Errorf("%w: history: key %q keeps a version at the floor but no change after it", ErrBadSnapshot, prev.key())
	}
	byKey.finish(rs.runs)
	byRev, err := rs.changeLog()
	if err != nil {
		return err
	}
	// The tree, not the state: the state's current space is set again
	// while the tree is built (State.leave), and that is a write.
	tree := s.hist.byRev
	rs.goBuild(func() {
		for _, v := range byRev {
			tree.ReplaceOrInsert(v)
		}
	})
	return rs.checkHistoryAgreesWithKeys()
}

// changeLog sorts the versions above the floor by (revision, op_index)
// and checks that they are the change log Apply leaves: each revision's
// changes numbered from 0 without gaps, times never going back. A
// revision belongs to one tenant's space, so a space's log may skip the
// revisions of others; the revisions it holds are noted (rs.owned) for
// checkRevisionsOwned, which checks the spaces together leave no hole.
// The sort is a count per revision: each change has exactly one place.
func (rs *restorer) changeLog() ([]*version, error) {
	s := rs.s
	floor := s.hist.floor
	span := s.revision - floor
	if span == 0 {
		// Every version is at or below the floor: checked above.
		rs.owned = append(rs.owned, spaceRevisions{floor: floor})
		return nil, nil
	}
	// start[i] is where the changes of revision floor+1+i begin.
	start := make([]int, span+1)
	for _, v := range rs.vers {
		if v.rev > floor {
			start[v.rev-floor]++
		}
	}
	owned := spaceRevisions{floor: floor}
	for i := int64(1); i <= span; i++ {
		if start[i] > 0 {
			owned.revs = append(owned.revs, floor+i)
		}
		start[i] += start[i-1]
	}
	rs.owned = append(rs.owned, owned)
	s.hist.revs = int64(len(owned.revs))
	byRev := make([]*version, rs.above)
	for _, v := range rs.vers {
		if v.rev <= floor {
			continue
		}
		i := start[v.rev-floor-1] + int(v.op)
		if i >= start[v.rev-floor] || byRev[i] != nil {
			return nil, fmt.Errorf("%w: history change at revision %d, op %d breaks the log's order", ErrBadSnapshot, v.rev, v.op)
		}
		byRev[i] = v
	}
	for i := 1; i < len(byRev); i++ {
		if v := byRev[i]; v.now < byRev[i-1].now {
			return nil, fmt.Errorf("%w: history change at revision %d, op %d (time %d) breaks the log's order", ErrBadSnapshot, v.rev, v.op, v.now)
		}
	}
	return byRev, nil
}

// spaceRevisions are the revisions one space's change log holds above its
// floor, in order.
type spaceRevisions struct {
	floor int64
	revs  []int64
}

// checkRevisionsOwned checks that, above the highest floor of any space
// (where every space still holds its changes), each revision up to the
// state's is in the change log of exactly one space: a hole would let a
// reader skip changes without being told the history was compacted.
func (rs *restorer) checkRevisionsOwned(s *State) error {
	var top int64
	for _, o := range rs.owned {
		top = max(top, o.floor)
	}
	span := s.revision - top
	if span <= 0 {
		return nil
	}
	seen := make([]bool, span)
	for _, o := range rs.owned {
		for _, r := range o.revs {
			if r <= top {
				continue
			}
			if seen[r-top-1] {
				return fmt.Errorf("%w: the history of two spaces holds changes at revision %d", ErrBadSnapshot, r)
			}
			seen[r-top-1] = true
		}
	}
	for i, ok := range seen {
		if !ok {
			return fmt.Errorf("%w: the history has no change at revision %d: the log has a hole", ErrBadSnapshot, top+int64(i)+1)
		}
	}
	return nil
}

// checkHistoryAgreesWithKeys checks that the history and the live keys
// tell one story, walking both in key order: a key's newest version is a
// put exactly when the key is live, and then it is the live record itself;
// and a live key changed above the floor has versions, so one unchanged
// since the floor has none (Apply relies on that when it records a key's
// first change above the floor).
func (rs *restorer) checkHistoryAgreesWithKeys() error {
	floor, vers, recs := rs.s.hist.floor, rs.vers, rs.recs
	unrecorded := func(r *record) error {
		return fmt.Errorf("%w: key %q changed at revision %d, above the floor, but its history does not say so", ErrBadSnapshot, r.key, r.modRevision)
	}
	j := 0 // the next live key
	for i := 0; i < len(vers); {
		key := vers[i].key()
		for i+1 < len(vers) && vers[i+1].key() == key {
			i++
		}
		newest := vers[i]
		i++
		for ; j < len(recs) && recs[j].key < key; j++ {
			if recs[j].modRevision > floor {
				return unrecorded(recs[j])
			}
		}
		var live *record
		if j < len(recs) && recs[j].key == key {
			live = recs[j]
			j++
		}
		switch {
		case newest.isDelete() && live != nil:
			return fmt.Errorf("%w: key %q is live, but its history ends with its delete at revision %d", ErrBadSnapshot, key, newest.rev)
		case !newest.isDelete() && newest.rec != live:
			if live != nil && live.modRevision > newest.rev {
				return unrecorded(live)
			}
			return fmt.Errorf("%w: key %q: its newest version, at revision %d, is not its live record", ErrBadSnapshot, key, newest.rev)
		}
	}
	for ; j < len(recs); j++ {
		if recs[j].modRevision > floor {
			return unrecorded(recs[j])
		}
	}
	return nil
}

// checkChangeLogV3 reads a version 3 change log and checks it is what Apply
// left: every revision above the floor, each numbered from op_index 0
// without gaps, times never going back or past the state's clock. The
// events are then dropped (see restorer.read), but a snapshot whose log is
// broken is refused as it always was.
func (s *State) checkChangeLogV3(src snapshotSource, n int) error {
	var prev *snapshotChange
	for i := 0; i < n; i++ {
		var c snapshotChange
		if err := src.change(&c); err != nil {
			return fmt.Errorf("%w: change %d of %d: %v", ErrBadSnapshot, i+1, n, err)
		}
		next := c.Event.Revision == s.hist.floor+1 && c.Event.OpIndex == 0
		if prev != nil {
			next = (c.Event.Revision == prev.Event.Revision && c.Event.OpIndex == prev.Event.OpIndex+1) ||
				(c.Event.Revision == prev.Event.Revision+1 && c.Event.OpIndex == 0)
		}
		if !next || c.Event.Revision > s.revision || c.Event.Key == "" || c.Now > s.now || (prev != nil && c.Now < prev.Now) {
			return fmt.Errorf("%w: change %d of %d (revision %d, op %d, time %d) breaks the log's order or range", ErrBadSnapshot, i+1, n, c.Event.Revision, c.Event.OpIndex, c.Now)
		}
		prev = &c
	}
	if last := int64(0); s.hist.floor < s.revision {
		if prev != nil {
			last = prev.Event.Revision
		}
		if last != s.revision {
			return fmt.Errorf("%w: the change log ends at revision %d, not at the state's %d", ErrBadSnapshot, last, s.revision)
		}
	}
	return nil
}

// Records and versions are allocated a slab at a time, values (in
// binarySource) an arena at a time: for a million keys, a few thousand
// allocations instead of millions, which the benchmarks show makes the
// restore a tenth faster. A slab lives as long as any record in it, so a
// restored state that later replaces most of its records keeps holding
// at most the memory the restore allocated: no more than it held just
// after the restore.
//
// 511 versions, not 512: the runtime adds an 8-byte header to an object of
// this size with pointers, and 512 of them and the header would take the
// next size class up (TestVersionSlabFillsItsSizeClass). A slab of
// records is a large object, which has no header.
const (
	recordSlab          = 512      // records
	restoredVersionSlab = 511      // versions
	arenaSize           = 32 << 10 // bytes of values
	arenaMaxItem        = 1 << 10  // a larger value gets its own allocation
)

// newRecord returns a new record made from sk.
func (rs *restorer) newRecord(sk *snapshotKV) *record {
	r := fromSlab(&rs.records, recordSlab)
	*r = record{key: sk.Key, value: sk.Value, createRevision: sk.CreateRevision, modRevision: sk.ModRevision, version: sk.Version, lease: sk.Lease,
		extra: newExtra(sk.ContentType, sk.Metadata)}
	return r
}

// newVersion returns a new zero version.
func (rs *restorer) newVersion() *version { return fromSlab(&rs.versions, restoredVersionSlab) }
