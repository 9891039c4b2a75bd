package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/concord-io/concord/schema"
)

// pastKVs is a record as a read at a past revision returns it: no
// remaining time.
func pastKVs(kvs []schema.KeyValue) []schema.KeyValue {
	out := make([]schema.KeyValue, len(kvs))
	for i, kv := range kvs {
		kv.RemainingMS = nil
		out[i] = kv
	}
	return out
}

// readAllAt reads every key at rev, page by page of three, as a client
// continuing a listing with after would.
func readAllAt(t testing.TB, s *State, prefix string, rev int64) []schema.KeyValue {
	t.Helper()
	out := []schema.KeyValue{}
	q := GetQuery{Key: prefix, IsPrefix: true, Limit: 3}
	for {
		r, err := s.GetAt(q, rev, s.Now())
		if err != nil {
			t.Fatalf("read %q at %d: %v", prefix, rev, err)
		}
		if r.Revision != rev {
			t.Fatalf("read at %d answered for revision %d", rev, r.Revision)
		}
		out = append(out, r.KVs...)
		if !r.More {
			return out
		}
		q.After = r.KVs[len(r.KVs)-1].Key
	}
}

// The history against a model: after every command of a random log, with
// retention small enough that the floor moves all the time, a read at any
// revision from the floor to the present (every key, a prefix, one key,
// paged) gives exactly what a read at the present gave when that revision
// was current; below the floor it is compacted, above the present refused.
// A snapshot restored mid-way answers the same and writes the same bytes.
func TestHistoryReadsMatchTheirTime(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			g := newCmdGen(seed)
			s := New()
			mustApply(t, s, g.now, &Limits{MaxLeases: 50, MaxKeysPerLease: 50, HistoryRevisions: 25, HistoryAgeMS: 60_000})
			// past[rev] is every key as a present read saw it at rev.
			past := map[int64][]schema.KeyValue{s.Revision(): pastKVs(getAll(s, s.Now()))}
			// The model follows the events, revision by revision; an
			// expiry of several leases makes several revisions at once.
			model := map[string]schema.KeyValue{}
			var events []schema.Event
			for i := 0; i < 600; i++ {
				var res Result
				if i%50 == 49 {
					// An operator compacts half of what retention keeps.
					target := s.CompactRevision() + (s.Revision()-s.CompactRevision())/2
					res = mustApply(t, s, g.now, &Compact{Revision: target})
					eq(t, "compacted to", res.Reply.(*schema.KVCompactReply).CompactRevision, max(target, s.CompactRevision()))
				} else {
					res = s.Apply(g.next(s))
				}
				events = append(events, res.Events...)
				for j, e := range res.Events {
					if e.Type == schema.EventPut {
						model[e.Key] = schema.KeyValue{Key: e.Key, Value: e.Value, CreateRevision: e.CreateRevision, ModRevision: e.ModRevision, Version: e.Version, Lease: e.Lease,
							ContentType: e.ContentType, Metadata: e.Metadata}
					} else {
						delete(model, e.Key)
					}
					if j == len(res.Events)-1 || res.Events[j+1].Revision != e.Revision {
						past[e.Revision] = sortedKVs(model)
					}
				}
				eq(t, fmt.Sprintf("step %d: the model at the present", i), past[s.Revision()], pastKVs(getAll(s, s.Now())))
				floor := s.CompactRevision()
				if floor > s.Revision() {
					t.Fatalf("floor %d above the revision %d", floor, s.Revision())
				}
				// Revision 0 asks for the present; the first readable
				// revision is 1.
				for rev := max(floor, 1); rev <= s.Revision(); rev++ {
					want, ok := past[rev]
					if !ok {
						t.Fatalf("no model state at revision %d (floor %d, now %d)", rev, floor, s.Revision())
					}
					if i%20 == 0 || rev >= s.Revision()-2 {
						eq(t, fmt.Sprintf("step %d: all keys at %d", i, rev), readAllAt(t, s, "", rev), want)
					}
					for _, k := range []string{"a", "svc.b", "x-1.a.na"} {
						r, err := s.GetAt(GetQuery{Key: k}, rev, s.Now())
						if err != nil {
							t.Fatal(err)
						}
						var w []schema.KeyValue
						for _, kv := range want {
							if kv.Key == k {
								w = append(w, kv)
							}
						}
						eq(t, fmt.Sprintf("step %d: %s at %d", i, k, rev), r.KVs, append([]schema.KeyValue{}, w...))
					}
				}
				if floor > 1 {
					if _, err := s.GetAt(GetQuery{Key: "a"}, floor-1, s.Now()); !errors.Is(err, ErrCompacted) {
						t.Fatalf("read below the floor %d: %v", floor, err)
					}
				}
				if _, err := s.GetAt(GetQuery{Key: "a"}, s.Revision()+1, s.Now()); !errors.Is(err, ErrFutureRevision) {
					t.Fatalf("read above the revision: %v", err)
				}
				for _, k := range []string{"a", "svc.b", "x-1.a.na"} {
					var want []schema.Event
					for _, e := range events {
						if e.Key == k && e.Revision > floor {
							want = append(want, e)
						}
					}
					eq(t, fmt.Sprintf("step %d: history of %s", i, k), readHistory(t, s, HistoryQuery{Key: k}), want)
					slices.Reverse(want)
					eq(t, fmt.Sprintf("step %d: history of %s, newest first", i, k), readHistory(t, s, HistoryQuery{Key: k, NewestFirst: true}), want)
				}
				if i%100 == 99 {
					data := snap(t, s)
					r := restored(t, data)
					if !bytes.Equal(snap(t, r), data) {
						t.Fatal("a restored snapshot writes other bytes")
					}
					eq(t, "restored: all keys at the floor", readAllAt(t, r, "", max(floor, 1)), past[max(floor, 1)])
					s = r
				}
				if err := checkHistory(s); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
			}
		})
	}
}

// checkHistory checks the history's own shape: the change log is exactly
// the versions above the floor; the key index holds those that are not
// live and, at or below the floor, only puts that a later version of their
// key needs (one per key); a live version (a put whose record is its key's
// live record) is in the change log only, and each live record changed
// above the floor has one there; a key whose only version would be its
// live record keeps none in the key index.
func checkHistory(s *State) error {
	h := s.hist
	isLive := func(v *version) bool { return !v.isDelete() && s.getRecord(v.key()) == v.rec }
	above := 0
	var prev *version
	var err error
	h.byKey.Ascend(func(v *version) bool {
		if v.k != v.rec.key {
			err = fmt.Errorf("version %q@%d/%d in the key index holds key %q", v.rec.key, v.rev, v.op, v.k)
			return false
		}
		if isLive(v) {
			err = fmt.Errorf("the key index holds %s@%d/%d, the live record of its key", v.key(), v.rev, v.op)
		}
		if v.rev > h.floor {
			above++
			if got, ok := h.byRev.Get(v); !ok || got != v {
				err = fmt.Errorf("version %s@%d/%d above the floor is not in the change log", v.key(), v.rev, v.op)
			}
		} else {
			if v.isDelete() {
				err = fmt.Errorf("tombstone %s@%d at or below the floor %d", v.key(), v.rev, h.floor)
			}
			if prev != nil && prev.key() == v.key() && prev.rev <= h.floor {
				err = fmt.Errorf("two versions of %s at or below the floor", v.key())
			}
			later := false
			h.byKey.AscendGreaterOrEqual(keyPivot(v.key(), v.rev, v.op+1), func(n *version) bool {
				later = n.key() == v.key()
				return false
			})
			if r := s.getRecord(v.key()); r != nil && r.modRevision > v.rev {
				later = true
			}
			if !later {
				err = fmt.Errorf("version %s@%d at or below the floor has no later version", v.key(), v.rev)
			}
		}
		prev = v
		return err == nil
	})
	if err != nil {
		return err
	}
	// The items: one a key, each either one version or a run of two or
	// more, never both, each run in (revision, op_index) order, holding
	// the index's count of versions between them.
	runs, versions := 0, 0
	h.byKey.ascendItems("", func(ref runRef) bool {
		runs++
		versions += ref.len()
		r := ref.r
		switch {
		case (ref.one == nil) == (r == nil):
			err = fmt.Errorf("the key index's item of %q holds one version %v and a run %v", ref.k, ref.one, r)
		case r == nil && ref.one.k != ref.k:
			err = fmt.Errorf("the item of %q holds %q@%d", ref.k, ref.one.k, ref.one.rev)
		case r == nil:
		case len(r.vs) < 2:
			// A lone version is kept in the item, without a run.
			err = fmt.Errorf("the key index keeps a run of %d versions for %q", len(r.vs), ref.k)
		case r.live != nil && r.live.k != ref.k:
			err = fmt.Errorf("the run of %q remembers a live version of %q", ref.k, r.live.k)
		}
		for i := 0; r != nil && i < len(r.vs) && err == nil; i++ {
			if v := r.vs[i]; v.k != ref.k {
				err = fmt.Errorf("the run of %q holds %q@%d", ref.k, v.k, v.rev)
			} else if i > 0 && !lessByRev(r.vs[i-1], v) {
				err = fmt.Errorf("the run of %q is out of order at %d/%d", ref.k, v.rev, v.op)
			}
		}
		return err == nil
	})
	if err != nil {
		return err
	}
	if runs != h.byKey.runs.Len() || versions != h.byKey.Len() {
		return fmt.Errorf("the key index counts %d versions and %d runs; it holds %d in %d", h.byKey.Len(), h.byKey.runs.Len(), versions, runs)
	}
	live := 0
	h.byRev.Ascend(func(v *version) bool {
		switch {
		case v.k != v.rec.key:
			err = fmt.Errorf("version %q@%d/%d in the change log holds key %q", v.rec.key, v.rev, v.op, v.k)
		case v.rev <= h.floor:
			err = fmt.Errorf("change %s@%d/%d at or below the floor %d", v.key(), v.rev, v.op, h.floor)
		case isLive(v):
			live++
		case !h.byKey.Has(v):
			err = fmt.Errorf("change %s@%d/%d, no longer live, is not in the key index", v.key(), v.rev, v.op)
		}
		return err == nil
	})
	if err != nil {
		return err
	}
	if above+live != h.byRev.Len() {
		return fmt.Errorf("the change log holds %d versions; the key index %d above the floor, and %d are live", h.byRev.Len(), above, live)
	}
	s.kv.Ascend(func(r *record) bool {
		if r.modRevision > h.floor && h.changeOf(r, nil) == nil {
			err = fmt.Errorf("live key %q changed at %d, above the floor %d, has no change in the log", r.key, r.modRevision, h.floor)
		}
		if r.modRevision > h.floor && r.version > 1 && h.latest(r.key, r.modRevision) == nil {
			err = fmt.Errorf("live key %q changed at %d, above the floor %d, keeps no version before it", r.key, r.modRevision, h.floor)
		}
		return err == nil
	})
	return err
}

// A transaction that writes one key twice keeps both versions; the later
// one shares the live record.
func TestHistoryTxnWritesAKeyTwice(t *testing.T) {
	s := New()
	mustApply(t, s, t0, &Put{Key: "k", Value: val(`1`)})
	mustApply(t, s, t0, &Txn{Success: []TxnOp{{Put: &Put{Key: "k", Value: val(`2`)}}, {Put: &Put{Key: "k", Value: val(`3`)}}}})
	eq(t, "revision", s.Revision(), int64(2))
	first := s.hist.latest("k", 1)
	if first == nil || string(first.rec.value) != `1` {
		t.Fatalf("version at 1: %+v", first)
	}
	// The first write of the transaction is no longer live: the key
	// index holds a copy of it. The second is the live record, in the
	// change log only.
	mid := s.hist.latest("k", 2)
	if mid == nil || mid.op != 0 || string(mid.rec.value) != `2` || mid.rec == s.getRecord("k") {
		t.Fatalf("the key index's newest version of k is not the transaction's first write: %+v", mid)
	}
	last := s.hist.changeOf(s.getRecord("k"), nil)
	if last == nil || last.rev != 2 || last.op != 1 || s.hist.byKey.Has(last) {
		t.Fatalf("the live version is not the transaction's second write, in the change log only: %+v", last)
	}
	eq(t, "history of k", len(readHistory(t, s, HistoryQuery{Key: "k"})), 3)
	if err := checkHistory(s); err != nil {
		t.Fatal(err)
	}
	r, err := s.GetAt(GetQuery{Key: "k"}, 1, s.Now())
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "k at 1", string(r.KVs[0].Value), `1`)
}

// A transaction that puts a key, deletes it and puts it again writes two
// records of the same version at one revision: only the last is live, and
// the history keeps the first as it was written.
func TestHistoryTxnPutsDeletesAndPutsAKey(t *testing.T) {
	s := New()
	mustApply(t, s, t0, &Txn{Success: []TxnOp{{Put: &Put{Key: "k", Value: val(`1`)}}, {Delete: &Delete{Key: "k"}}, {Put: &Put{Key: "k", Value: val(`2`)}}}})
	var got []string
	for _, e := range readHistory(t, s, HistoryQuery{Key: "k"}) {
		got = append(got, fmt.Sprintf("%s %d/%d %s", e.Type, e.Revision, e.OpIndex, e.Value))
	}
	eq(t, "history", got, []string{"put 1/0 1", "delete 1/1 ", "put 1/2 2"})
	c, err := s.Changes(ChangesQuery{Key: "k", AfterRevision: 0, AfterOpIndex: -1, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "first change's value", string(c.Events[0].Value), `1`)
	if err := checkHistory(s); err != nil {
		t.Fatal(err)
	}
	data := snap(t, s)
	r := restored(t, data)
	eq(t, "restored history", readHistory(t, r, HistoryQuery{Key: "k"}), readHistory(t, s, HistoryQuery{Key: "k"}))
	eq(t, "written again", string(snap(t, r)), string(data))
}

// A key's history ends with its live version, which the change log holds
// and the key index does not: pages of one record, either way, and windows
// that end before it or start at it, find it where it belongs.
func TestHistoryEndsWithTheLiveVersion(t *testing.T) {
	s := New()
	for i := 1; i <= 3; i++ {
		mustApply(t, s, t0, &Put{Key: "k", Value: val(fmt.Sprint(i))})
	}
	mustApply(t, s, t0, &Txn{Success: []TxnOp{{Put: &Put{Key: "k", Value: val(`4`)}}, {Put: &Put{Key: "k", Value: val(`5`)}}}})
	mustApply(t, s, t0, &Put{Key: "other", Value: val(`1`)})
	if s.hist.byKey.Has(s.hist.changeOf(s.getRecord("k"), nil)) {
		t.Fatal("the key index holds the live version")
	}
	values := func(q HistoryQuery) []string {
		var out []string
		for {
			r, err := s.History(q)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range r.Records {
				out = append(out, string(e.Value))
			}
			if !r.More {
				return out
			}
			q.After = r.NextRevision
		}
	}
	eq(t, "oldest first", values(HistoryQuery{Key: "k", Limit: 1}), []string{"1", "2", "3", "4", "5"})
	eq(t, "newest first", values(HistoryQuery{Key: "k", Limit: 1, NewestFirst: true}), []string{"5", "4", "3", "2", "1"})
	eq(t, "to before it", values(HistoryQuery{Key: "k", Limit: 10, To: 3}), []string{"1", "2", "3"})
	eq(t, "from it", values(HistoryQuery{Key: "k", Limit: 10, From: 4}), []string{"4", "5"})
	eq(t, "from it, newest first", values(HistoryQuery{Key: "k", Limit: 10, From: 4, NewestFirst: true}), []string{"5", "4"})
	eq(t, "after it", values(HistoryQuery{Key: "k", Limit: 10, From: 5}), []string(nil))
	eq(t, "written once", values(HistoryQuery{Key: "other", Limit: 10}), []string{"1"})

	// Compacted past it, the key has no history, and the key index
	// nothing of it.
	mustApply(t, s, t0, &Compact{Revision: 4})
	eq(t, "compacted", values(HistoryQuery{Key: "k", Limit: 10}), []string(nil))
	eq(t, "key index", s.hist.byKey.Len(), 0)
	if err := checkHistory(s); err != nil {
		t.Fatal(err)
	}
}

// A live version is in the change log only, and once the floor passes a
// key written once the history holds nothing of it: the live record
// answers, so a million keys written once cost the key index nothing,
// and the history nothing once the floor passed them.
func TestHistoryKeepsNothingOfUnchangedKeys(t *testing.T) {
	s := New()
	mustApply(t, s, t0, &Limits{MaxLeases: 10, MaxKeysPerLease: 10, HistoryRevisions: 5, HistoryAgeMS: 60_000})
	for i := 0; i < 100; i++ {
		mustApply(t, s, t0, &Put{Key: fmt.Sprintf("k%03d", i), Value: val(`1`)})
	}
	eq(t, "change log", s.hist.byRev.Len(), 5)
	eq(t, "key index", s.hist.byKey.Len(), 0)
	r, err := s.GetAt(GetQuery{Key: "k000"}, s.CompactRevision(), s.Now())
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "an old key at the floor", len(r.KVs), 1)
}

func sortedKVs(m map[string]schema.KeyValue) []schema.KeyValue {
	out := make([]schema.KeyValue, 0, len(m))
	for _, kv := range m {
		out = append(out, kv)
	}
	slices.SortFunc(out, func(a, b schema.KeyValue) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// readHistory reads a key's whole history page by page of two records.
func readHistory(t testing.TB, s *State, q HistoryQuery) []schema.Event {
	t.Helper()
	var out []schema.Event
	q.Limit = 2
	for {
		r, err := s.History(q)
		if err != nil {
			t.Fatalf("history of %q: %v", q.Key, err)
		}
		out = append(out, r.Records...)
		if !r.More {
			return out
		}
		q.After = r.NextRevision
	}
}

// A key's history in a window, both ends included, oldest or newest
// first; a page never splits a revision; windows the history cannot answer
// are refused.
func TestHistoryWindow(t *testing.T) {
	s := New()
	for i := 1; i <= 5; i++ {
		mustApply(t, s, t0, &Put{Key: "k", Value: val(fmt.Sprint(i))}) // revisions 1..5
	}
	mustApply(t, s, t0, &Delete{Key: "k"})                                                                                      // 6
	mustApply(t, s, t0, &Put{Key: "other", Value: val(`0`)})                                                                    // 7
	mustApply(t, s, t0, &Txn{Success: []TxnOp{{Put: &Put{Key: "k", Value: val(`7`)}}, {Put: &Put{Key: "k", Value: val(`8`)}}}}) // 8
	revs := func(evs []schema.Event) (out []string) {
		for _, e := range evs {
			out = append(out, fmt.Sprintf("%s@%d/%d v%d", e.Type, e.Revision, e.OpIndex, e.Version))
		}
		return out
	}
	r, err := s.History(HistoryQuery{Key: "k", From: 2, To: 6, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "2..6", revs(r.Records), []string{"put@2/0 v2", "put@3/0 v3", "put@4/0 v4", "put@5/0 v5", "delete@6/0 v0"})
	eq(t, "the delete's cause", r.Records[4].Cause, schema.CauseDelete)
	r, _ = s.History(HistoryQuery{Key: "k", From: 5, Limit: 100, NewestFirst: true})
	eq(t, "5.., newest first", revs(r.Records), []string{"put@8/1 v2", "put@8/0 v1", "delete@6/0 v0", "put@5/0 v5"})
	// Limit 1 still returns both changes of revision 8.
	r, _ = s.History(HistoryQuery{Key: "k", From: 7, Limit: 1})
	eq(t, "one revision whole", revs(r.Records), []string{"put@8/0 v1", "put@8/1 v2"})
	eq(t, "no more", r.More, false)
	r, _ = s.History(HistoryQuery{Key: "k", Limit: 2})
	eq(t, "first page", [3]any{revs(r.Records), r.More, r.NextRevision}, [3]any{[]string{"put@1/0 v1", "put@2/0 v2"}, true, int64(2)})
	r, _ = s.History(HistoryQuery{Key: "nothing", Limit: 2})
	eq(t, "a key never written", len(r.Records), 0)

	mustApply(t, s, t0, &Compact{Revision: 3})
	if _, err := s.History(HistoryQuery{Key: "k", From: 3, Limit: 10}); !errors.Is(err, ErrCompacted) {
		t.Fatalf("a window starting at the floor: %v", err)
	}
	if _, err := s.History(HistoryQuery{Key: "k", To: 9, Limit: 10}); !errors.Is(err, ErrFutureRevision) {
		t.Fatalf("a window ending in the future: %v", err)
	}
	r, _ = s.History(HistoryQuery{Key: "k", Limit: 100})
	eq(t, "from the floor", revs(r.Records), []string{"put@4/0 v4", "put@5/0 v5", "delete@6/0 v0", "put@8/0 v1", "put@8/1 v2"})
	// A listing continued from before the floor: its next records are gone.
	if _, err := s.History(HistoryQuery{Key: "k", After: 2, Limit: 10}); !errors.Is(err, ErrCompacted) {
		t.Fatalf("continued from below the floor: %v", err)
	}
	r, err = s.History(HistoryQuery{Key: "k", After: 3, Limit: 10})
	if err != nil || len(r.Records) != 5 {
		t.Fatalf("continued from the floor: %v, %v", r, err)
	}
	if _, err := s.History(HistoryQuery{Key: "k", After: 4, NewestFirst: true, Limit: 10}); !errors.Is(err, ErrCompacted) {
		t.Fatalf("newest first, continued down to the floor: %v", err)
	}
	eq(t, "the floor", r.CompactRevision, int64(3))
}

// Compaction is idempotent and never goes back; compacting the future is
// refused and changes nothing.
func TestCompact(t *testing.T) {
	s := New()
	for i := 1; i <= 4; i++ {
		mustApply(t, s, t0, &Put{Key: fmt.Sprintf("k%d", i%2), Value: val(fmt.Sprint(i))})
	}
	r := mustApply(t, s, t0, &Compact{Revision: 2})
	eq(t, "reply", *r.Reply.(*schema.KVCompactReply), schema.KVCompactReply{Revision: 4, CompactRevision: 2})
	eq(t, "no events", len(r.Events), 0)
	r = mustApply(t, s, t0, &Compact{Revision: 1})
	eq(t, "lower: no-op", *r.Reply.(*schema.KVCompactReply), schema.KVCompactReply{Revision: 4, CompactRevision: 2})
	before := snap(t, s)
	mustFail(t, s, &Compact{Revision: 5}, ErrFutureRevision)
	eq(t, "refused: unchanged", string(snap(t, s)), string(before))
	got, err := s.GetAt(GetQuery{Key: "k", IsPrefix: true, Limit: 10}, 2, s.Now())
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "read at the floor", keysOf(got.KVs), []string{"k0", "k1"})
	if _, err := s.GetAt(GetQuery{Key: "k1"}, 1, s.Now()); !errors.Is(err, ErrCompacted) {
		t.Fatalf("read below the floor: %v", err)
	}
	mustApply(t, s, t0, &Compact{Revision: 4})
	eq(t, "everything compacted", [2]int{s.hist.byRev.Len(), s.hist.byKey.Len()}, [2]int{0, 0})
}

// Ranges are byte-wise and half-open: [start, end), no end meaning the end
// of the keyspace; a prefix is the range it spans. Reads (now and at a
// revision), deletes and the change log agree on what a range holds.
func TestRanges(t *testing.T) {
	s := New()
	keys := []string{"a", "a.b", "b", "svc", "svc.a", "svc.z", "svcx.a", "z", "z.z"}
	for _, k := range keys {
		mustApply(t, s, t0, &Put{Key: k, Value: val(`1`)})
	}
	rev := s.Revision()
	for _, c := range []struct {
		start, end string
		want       []string
	}{
		{"a.b", "svc.a", []string{"a.b", "b", "svc"}},
		{"svc", "svcx", []string{"svc", "svc.a", "svc.z"}},
		{"svc.", "svc/", []string{"svc.a", "svc.z"}}, // the token-aware spelling of prefix svc.
		{"svcx", "", []string{"svcx.a", "z", "z.z"}},
		{"", "b", []string{"a", "a.b"}},
		{"", "", keys},
		{"c", "d", []string{}},
	} {
		q := GetQuery{Key: c.start, IsRange: true, RangeEnd: c.end, Limit: 100}
		eq(t, fmt.Sprintf("[%q, %q) now", c.start, c.end), keysOf(s.Get(q, s.Now()).KVs), c.want)
		r, err := s.GetAt(q, rev, s.Now())
		if err != nil {
			t.Fatal(err)
		}
		eq(t, fmt.Sprintf("[%q, %q) at %d", c.start, c.end, rev), keysOf(r.KVs), c.want)
		q.Limit, q.After = 1, c.start
		if len(c.want) > 1 {
			q.After = c.want[0]
			eq(t, fmt.Sprintf("[%q, %q) after %q", c.start, c.end, c.want[0]), keysOf(s.Get(q, s.Now()).KVs), c.want[1:2])
		}
		ch, err := s.Changes(ChangesQuery{Key: c.start, IsRange: true, RangeEnd: c.end, AfterOpIndex: -1, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		changed := []string{}
		for _, e := range ch.Events {
			changed = append(changed, e.Key)
		}
		eq(t, fmt.Sprintf("[%q, %q) changes", c.start, c.end), changed, c.want)
	}
	r := mustApply(t, s, t0, &Delete{Key: "a.b", IsRange: true, RangeEnd: "svc.a", PrevKV: true})
	eq(t, "deleted", keysOf(r.Reply.(*schema.KVDeleteReply).PrevKVs), []string{"a.b", "b", "svc"})
	eq(t, "left", keysOf(getAll(s, s.Now())), []string{"a", "svc.a", "svc.z", "svcx.a", "z", "z.z"})
	mustApply(t, s, t0, &Delete{Key: "svcx", IsRange: true})
	eq(t, "left after a range to the end", keysOf(getAll(s, s.Now())), []string{"a", "svc.a", "svc.z"})
	old, err := s.GetAt(GetQuery{Key: "", IsRange: true, Limit: 100}, rev, s.Now())
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "everything, as it was", keysOf(old.KVs), keys)
}

// A put's content type and metadata are stored and returned unchanged, in
// reads now and at a revision, history and events; a put without them
// clears them, since a put replaces the record.
func TestPutContentTypeAndMetadata(t *testing.T) {
	s := New()
	r := mustApply(t, s, t0, &Put{Key: "cfg", Value: val(`{"v":1}`), ContentType: "application/json", Metadata: val(`{"owner":"ops"}`)})
	eq(t, "event", [2]any{r.Events[0].ContentType, string(r.Events[0].Metadata)}, [2]any{"application/json", `{"owner":"ops"}`})
	kv := getKey(t, s, "cfg")
	eq(t, "read", [2]any{kv.ContentType, string(kv.Metadata)}, [2]any{"application/json", `{"owner":"ops"}`})
	mustApply(t, s, t0, &Put{Key: "cfg", Value: val(`{"v":2}`)})
	kv = getKey(t, s, "cfg")
	eq(t, "cleared by a plain put", [2]any{kv.ContentType, len(kv.Metadata)}, [2]any{"", 0})
	old, err := s.GetAt(GetQuery{Key: "cfg"}, 1, s.Now())
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "at revision 1", [2]any{old.KVs[0].ContentType, string(old.KVs[0].Metadata)}, [2]any{"application/json", `{"owner":"ops"}`})
	mustApply(t, s, t0, &Put{Key: "cfg", Value: val(`3`), ContentType: "text/plain"})
	keysOnly := s.Get(GetQuery{Key: "cfg", KeysOnly: true}, s.Now())
	eq(t, "keys only leaves them out with the value", [2]any{keysOnly.KVs[0].ContentType, len(keysOnly.KVs[0].Value)}, [2]any{"", 0})
	h, err := s.History(HistoryQuery{Key: "cfg", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var cts []string
	for _, e := range h.Records {
		cts = append(cts, e.ContentType+"|"+string(e.Metadata))
	}
	eq(t, "history", cts, []string{`application/json|{"owner":"ops"}`, "|", "text/plain|"})
	data := snap(t, s)
	if !bytes.Equal(snap(t, restored(t, data)), data) {
		t.Fatal("snapshot round trip")
	}
	eq(t, "restored", getKey(t, restored(t, data), "cfg").ContentType, "text/plain")
}

// A snapshot finds each live key's version in the change log either by a
// search per key or, when many keys ask, from one pass over the log: both
// find the same versions, transactions of many writes included.
func TestSnapshotFindsLiveVersionsBothWays(t *testing.T) {
	s := New()
	for i := 0; i < 50; i++ {
		mustApply(t, s, t0, &Put{Key: fmt.Sprintf("k%02d", i%20), Value: val(fmt.Sprint(i))})
	}
	mustApply(t, s, t0, &Txn{Success: []TxnOp{
		{Put: &Put{Key: "t1", Value: val(`1`)}}, {Put: &Put{Key: "k03", Value: val(`2`)}},
		{Put: &Put{Key: "t1", Value: val(`3`)}}, {Put: &Put{Key: "t2", Value: val(`4`)}},
	}})
	mustApply(t, s, t0, &Delete{Key: "k04"})
	mustApply(t, s, t0, &Compact{Revision: 30})
	sn := s.Snapshot()
	recs, above := sn.liveRecords()
	searched, passed := sn.liveVersions(0), sn.liveVersions(len(recs))
	found := 0
	for _, r := range recs {
		if r.modRevision <= sn.hist.floor {
			continue
		}
		want := sn.hist.changeOf(r, nil)
		if want == nil || want.rec != r {
			t.Fatalf("%s: no change in the log", r.key)
		}
		if got := searched(r); got != want {
			t.Fatalf("%s: searched %+v, want %+v", r.key, got, want)
		}
		if got := passed(r); got != want {
			t.Fatalf("%s: from the pass %+v, want %+v", r.key, got, want)
		}
		found++
	}
	eq(t, "live versions above the floor", found, above)
	if above < 10 {
		t.Fatalf("only %d live versions above the floor: the test lost its point", above)
	}
}

// ascendAt stops when its callback says so, wherever that falls: on a key
// the live tree answers, or on one only the history holds (deleted since),
// and walks nothing after.
func TestAscendAtStops(t *testing.T) {
	s := New()
	for i := 0; i < 12; i++ {
		mustApply(t, s, t0, &Put{Key: fmt.Sprintf("k%02d", i), Value: val(`1`)})
	}
	rev := s.Revision()
	for i := 0; i < 12; i += 3 {
		mustApply(t, s, t0, &Delete{Key: fmt.Sprintf("k%02d", i)})
		mustApply(t, s, t0, &Put{Key: fmt.Sprintf("k%02d", i+1), Value: val(`2`)})
	}
	var all []string
	s.ascendAt("", "", rev, func(r *record) bool { all = append(all, r.key); return true })
	eq(t, "keys at the revision", len(all), 12)
	for n := 1; n <= len(all); n++ {
		var got []string
		s.ascendAt("", "", rev, func(r *record) bool {
			if len(got) == n {
				t.Fatalf("called again after stopping at %d keys", n)
			}
			got = append(got, r.key)
			return len(got) < n
		})
		eq(t, fmt.Sprintf("stopped after %d", n), got, all[:n])
	}
}

// The version slabs are sized to fill a size class of the runtime's
// allocator: a slab one version larger takes the next class up. A change
// to version's size must change them too. The size classes named are the
// runtime's (runtime/sizeclasses.go); the header is the 8 bytes it adds
// to a small object with pointers larger than 512 bytes.
func TestVersionSlabFillsItsSizeClass(t *testing.T) {
	const header = 8
	size := int(unsafe.Sizeof(version{}))
	for _, c := range []struct {
		name     string
		n, class int
	}{
		{"versionSlab", versionSlab, 2048},
		{"restoredVersionSlab", restoredVersionSlab, 24576},
	} {
		if got := c.n*size + header; got > c.class {
			t.Errorf("%s: %d versions of %d bytes and the header are %d bytes, more than the %d-byte class", c.name, c.n, size, got, c.class)
		}
		if got := (c.n+1)*size + header; got <= c.class {
			t.Errorf("%s: %d versions of %d bytes would fit the %d-byte class too", c.name, c.n+1, size, c.class)
		}
	}
}

// A key's versions in the key index are one version in the tree's item
// or a run: a put that moves a second version in makes a run, a
// compaction that leaves one folds it back. Across both, under a view
// taken in between, every revision from the floor on reads what it wrote.
func TestKeyIndexItemBecomesRunAndBack(t *testing.T) {
	s := New()
	mustApply(t, s, t0, &Limits{MaxLeases: 100, MaxKeysPerLease: 100, HistoryRevisions: 6})
	wrote := map[int64]string{} // revision -> value of k
	shapes := map[string]bool{}
	var view *View
	var viewWrote map[int64]string
	for i := range 12 {
		v := fmt.Sprintf(`"v%d"`, i)
		r := mustApply(t, s, t0, &Put{Key: "k", Value: val(v)})
		wrote[r.Events[0].Revision] = v
		// Another key between k's puts, so that k's versions are not all
		// within the retained revisions.
		mustApply(t, s, t0, &Put{Key: "other", Value: val(v)})
		if err := checkHistory(s); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		if ref, ok := s.hist.byKey.item("k"); ok {
			shapes[map[bool]string{true: "run", false: "one"}[ref.r != nil]] = true
		}
		if i == 6 {
			view, viewWrote = s.View(), maps.Clone(wrote)
		}
		for rev := s.CompactRevision(); rev <= s.Revision(); rev++ {
			want := valueAt(wrote, rev)
			if got := s.recordAt("k", rev); (got == nil) != (want == "") || got != nil && string(got.value) != want {
				t.Fatalf("put %d: k at revision %d reads %v, want %q", i, rev, got, want)
			}
		}
	}
	// k's last put is at the revision before the present (another key's
	// is the present): compacting to the one before that leaves k its
	// version at the floor alone in the key index.
	mustApply(t, s, t0, &Compact{Revision: s.Revision() - 2})
	if err := checkHistory(s); err != nil {
		t.Fatalf("after the compaction: %v", err)
	}
	if ref, ok := s.hist.byKey.item("k"); ok {
		shapes[map[bool]string{true: "run", false: "one"}[ref.r != nil]] = true
	}
	for rev := s.CompactRevision(); rev <= s.Revision(); rev++ {
		want := valueAt(wrote, rev)
		if got := s.recordAt("k", rev); got == nil || string(got.value) != want {
			t.Fatalf("after the compaction: k at revision %d reads %v, want %q", rev, got, want)
		}
	}
	if !shapes["run"] || !shapes["one"] {
		t.Fatalf("test premise: k's item took the shapes %v, want both", shapes)
	}
	// The view still reads what it read when it was taken.
	for rev := view.s.CompactRevision(); rev <= view.s.Revision(); rev++ {
		want := valueAt(viewWrote, rev)
		if got := view.s.recordAt("k", rev); (got == nil) != (want == "") || got != nil && string(got.value) != want {
			t.Fatalf("the view: k at revision %d reads %v, want %q", rev, got, want)
		}
	}
}

// valueAt returns the value of the newest write in wrote (revision ->
// value) at or below rev.
func valueAt(wrote map[int64]string, rev int64) string {
	var at int64
	var v string
	for w, wv := range wrote {
		if w <= rev && w > at {
			at, v = w, wv
		}
	}
	return v
}
