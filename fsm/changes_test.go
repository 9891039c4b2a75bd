package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/concord-io/concord/schema"
)

// loggedEvent is one change-log entry as the state holds it.
type loggedEvent struct {
	event schema.Event
	now   int64
}

// loggedEvents returns the change log, oldest first.
func loggedEvents(s *State) []loggedEvent {
	var out []loggedEvent
	s.hist.byRev.Ascend(func(v *version) bool {
		out = append(out, loggedEvent{v.event(), v.now})
		return true
	})
	return out
}

// logEvents returns the events of the change log, oldest first.
func logEvents(s *State) []schema.Event {
	var out []schema.Event
	s.hist.byRev.Ascend(func(v *version) bool {
		out = append(out, v.event())
		return true
	})
	return out
}

// changesFrom reads the events of every key after a position.
func changesFrom(t testing.TB, s *State, rev int64, op, limit int) *schema.KVChangesReply {
	t.Helper()
	r, err := s.Changes(ChangesQuery{IsPrefix: true, AfterRevision: rev, AfterOpIndex: op, Limit: limit})
	if err != nil {
		t.Fatalf("Changes after (%d, %d): %v", rev, op, err)
	}
	return r
}

// mustCompacted checks that a read after the position fails with
// ErrCompacted and names the floor.
func mustCompacted(t testing.TB, s *State, rev int64, op int) {
	t.Helper()
	if err := compactedErr(s, rev, op); err != nil {
		t.Fatal(err)
	}
}

func compactedErr(s *State, rev int64, op int) error {
	for _, q := range []ChangesQuery{
		{IsPrefix: true, AfterRevision: rev, AfterOpIndex: op, Limit: 10},
		{Key: "some.key", AfterRevision: rev, AfterOpIndex: op, Limit: 1},
	} {
		r, err := s.Changes(q)
		if !errors.Is(err, ErrCompacted) || r != nil {
			return fmt.Errorf("Changes after (%d, %d) with the floor at %d = %+v, %v; want ErrCompacted", rev, op, s.CompactRevision(), r, err)
		}
		if floor := fmt.Sprint(s.CompactRevision()); !strings.Contains(err.Error(), "up to "+floor) || !strings.Contains(err.Error(), "from "+floor) {
			return fmt.Errorf("ErrCompacted does not name the floor %s: %v", floor, err)
		}
	}
	return nil
}

// checkChangeLog checks that the change log holds exactly want, in order.
func checkChangeLog(t testing.TB, s *State, want []schema.Event) {
	t.Helper()
	if err := changeLogIs(s, want); err != nil {
		t.Fatal(err)
	}
}

// changeLogIs checks that the change log holds exactly want, every event
// above the floor, and that Changes from the floor returns all of it, while
// a read from inside or below the floor is refused.
func changeLogIs(s *State, want []schema.Event) error {
	floor := s.CompactRevision()
	if floor < 0 || floor > s.Revision() {
		return fmt.Errorf("floor %d outside 0..%d", floor, s.Revision())
	}
	got := logEvents(s)
	if err := sameEvents(got, want); err != nil {
		return fmt.Errorf("change log: %v", err)
	}
	for i, e := range got {
		if e.Revision <= floor || e.Revision > s.Revision() {
			return fmt.Errorf("logged event %d at revision %d; floor %d, revision %d", i, e.Revision, floor, s.Revision())
		}
	}
	r, err := s.Changes(ChangesQuery{IsPrefix: true, AfterRevision: floor, AfterOpIndex: -1, Limit: math.MaxInt})
	if err != nil {
		return fmt.Errorf("Changes from the floor %d: %v", floor, err)
	}
	if err := sameEvents(r.Events, want); err != nil {
		return fmt.Errorf("Changes from the floor: %v", err)
	}
	if r.Events == nil || r.More || r.NextRevision != s.Revision() || r.NextOpIndex != -1 || r.CompactRevision != floor {
		return fmt.Errorf("Changes from the floor: more %v next (%d, %d) floor %d (nil events %v); state at %d, floor %d",
			r.More, r.NextRevision, r.NextOpIndex, r.CompactRevision, r.Events == nil, s.Revision(), floor)
	}
	if floor > 0 {
		if err := compactedErr(s, floor, 0); err != nil {
			return err
		}
		if err := compactedErr(s, floor-1, -1); err != nil {
			return err
		}
	}
	return nil
}

// sameEvents compares events field by field (cheaper than reflection, for
// the property test).
func sameEvents(got, want []schema.Event) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d events, want %d:\n got %v\nwant %v", len(got), len(want), positions(got), positions(want))
	}
	for i := range got {
		a, b := &got[i], &want[i]
		if a.Type != b.Type || a.Key != b.Key || !bytes.Equal(a.Value, b.Value) || (a.Value == nil) != (b.Value == nil) ||
			a.Revision != b.Revision || a.OpIndex != b.OpIndex || a.CreateRevision != b.CreateRevision ||
			a.ModRevision != b.ModRevision || a.Version != b.Version || a.Lease != b.Lease || a.Cause != b.Cause {
			return fmt.Errorf("event %d = %+v, want %+v", i, *a, *b)
		}
	}
	return nil
}

func positions(evs []schema.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = fmt.Sprintf("%d/%d:%s", e.Revision, e.OpIndex, e.Key)
	}
	return out
}

// after reports whether event e is after the position (rev, op); op -1
// means after the whole revision.
func after(e schema.Event, rev int64, op int) bool {
	if op < 0 {
		return e.Revision > rev
	}
	return e.Revision > rev || (e.Revision == rev && e.OpIndex > op)
}

func queryMatches(q ChangesQuery, key string) bool {
	return key == q.Key || (q.IsPrefix && strings.HasPrefix(key, q.Key))
}

func eventSize(e schema.Event) int { return len(e.Key) + len(e.Value) + recordOverhead }

// expectPage is the test's reading of a Changes reply over a log (the
// events above the floor, in order) at a revision: the matching events
// after the position, as many as the limit and MaxBytes allow (the first
// always); more when a matching event is left; the next position at the end
// of the log is the revision, else the event just before the first
// matching event left out, or its whole revision when it was the last of
// its revision.
func expectPage(log []schema.Event, revision, floor int64, q ChangesQuery) *schema.KVChangesReply {
	rep := &schema.KVChangesReply{Events: []schema.Event{}, CompactRevision: floor}
	size := 0
	for i, e := range log {
		if !after(e, q.AfterRevision, q.AfterOpIndex) || !queryMatches(q, e.Key) {
			continue
		}
		n := eventSize(e)
		if len(rep.Events) >= q.Limit || (q.MaxBytes > 0 && len(rep.Events) > 0 && size+n > q.MaxBytes) {
			prev := log[i-1] // the first matching event is always taken, so i > 0
			rep.More, rep.NextRevision, rep.NextOpIndex = true, prev.Revision, prev.OpIndex
			if e.Revision != prev.Revision {
				rep.NextOpIndex = -1
			}
			return rep
		}
		size += n
		rep.Events = append(rep.Events, e)
	}
	rep.NextRevision, rep.NextOpIndex = max(revision, q.AfterRevision), -1
	return rep
}

// checkPage reads one page and compares it with expectPage over want, the
// events the log must hold.
func checkPage(s *State, want []schema.Event, q ChangesQuery) (*schema.KVChangesReply, error) {
	got, err := s.Changes(q)
	if err != nil {
		return nil, fmt.Errorf("Changes(%+v): %v", q, err)
	}
	exp := expectPage(want, s.Revision(), s.CompactRevision(), q)
	if err := sameEvents(got.Events, exp.Events); err != nil {
		return nil, fmt.Errorf("Changes(%+v): %v", q, err)
	}
	if got.Events == nil || got.More != exp.More || got.NextRevision != exp.NextRevision || got.NextOpIndex != exp.NextOpIndex || got.CompactRevision != exp.CompactRevision {
		return nil, fmt.Errorf("Changes(%+v): more %v next (%d, %d) floor %d; want more %v next (%d, %d) floor %d",
			q, got.More, got.NextRevision, got.NextOpIndex, got.CompactRevision, exp.More, exp.NextRevision, exp.NextOpIndex, exp.CompactRevision)
	}
	return got, nil
}

// A read names one key, or a prefix of keys; it returns their events in
// (revision, op_index) order, puts and deletes, whatever caused them.
func TestChangesKeyAndPrefix(t *testing.T) {
	s := New()
	var all []schema.Event
	do := func(now int64, body any) {
		t.Helper()
		all = append(all, mustApply(t, s, now, body).Events...)
	}
	do(t0, &Grant{TTL: 10})                                                                                                    // lease 1
	do(t0, &Put{Key: "a", Value: val(`1`)})                                                                                    // rev 1
	do(t0, &Put{Key: "ab", Value: val(`2`)})                                                                                   // rev 2
	do(t0, &Put{Key: "a.x", Value: val(`3`), Lease: 1})                                                                        // rev 3
	do(t0, &Put{Key: "b", Value: val(`{"v":"<&>"}`)})                                                                          // rev 4
	do(t0, &Delete{Key: "a"})                                                                                                  // rev 5
	do(t0, &Txn{Success: []TxnOp{putOp("a.y", `4`), putLeaseOp("a.z", `5`, 1), {Delete: &Delete{Key: "b"}}, putOp("a", `6`)}}) // rev 6, ops 0..3
	do(t0, &Put{Key: "a.t", Value: val(`7`), TTL: 1})                                                                          // rev 7
	do(t0, &Revoke{ID: 1})                                                                                                     // rev 8: a.x, a.z
	do(t0+5_000, &Expire{IDs: s.Expired(t0+5_000, 0)})                                                                         // rev 9: a.t
	do(t0+5_000, &Delete{Key: "a.", IsPrefix: true})                                                                           // rev 10: a.y
	eq(t, "revision", s.Revision(), int64(10))
	eq(t, "events", len(all), 14)
	checkChangeLog(t, s, all)

	pick := func(idx ...int) []schema.Event {
		out := []schema.Event{}
		for _, i := range idx {
			out = append(out, all[i])
		}
		return out
	}
	// all: 0 a@1, 1 ab@2, 2 a.x@3, 3 b@4, 4 del a@5, 5 a.y@6/0, 6 a.z@6/1,
	// 7 del b@6/2, 8 a@6/3, 9 a.t@7, 10 del a.x@8/0, 11 del a.z@8/1,
	// 12 expired a.t@9, 13 del a.y@10.
	eq(t, "event keys", positions(all), []string{"1/0:a", "2/0:ab", "3/0:a.x", "4/0:b", "5/0:a", "6/0:a.y", "6/1:a.z", "6/2:b", "6/3:a",
		"7/0:a.t", "8/0:a.x", "8/1:a.z", "9/0:a.t", "10/0:a.y"})
	cases := []struct {
		key    string
		prefix bool
		want   []schema.Event
	}{
		{"a", false, pick(0, 4, 8)},
		{"b", false, pick(3, 7)},
		{"a.z", false, pick(6, 11)},
		{"a.", false, pick()},
		{"zzz", false, pick()},
		{"", false, pick()},
		{"a", true, pick(0, 1, 2, 4, 5, 6, 8, 9, 10, 11, 12, 13)},
		{"a.", true, pick(2, 5, 6, 9, 10, 11, 12, 13)},
		{"a.t", true, pick(9, 12)},
		{"ab", true, pick(1)},
		{"b", true, pick(3, 7)},
		{"c", true, pick()},
		{"", true, all},
	}
	for _, c := range cases {
		r, err := s.Changes(ChangesQuery{Key: c.key, IsPrefix: c.prefix, AfterRevision: 0, AfterOpIndex: -1, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("key %q prefix %v", c.key, c.prefix)
		if err := sameEvents(r.Events, c.want); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// Not a nil slice: the reply encodes "events":[].
		eq(t, name+": reply", [5]any{r.Events != nil, r.More, r.NextRevision, r.NextOpIndex, r.CompactRevision}, [5]any{true, false, int64(10), -1, int64(0)})
	}
	// Events carry what the write did: values, leases and causes.
	eq(t, "put event", all[3], schema.Event{Type: schema.EventPut, Key: "b", Value: val(`{"v":"<&>"}`), Revision: 4, CreateRevision: 4, ModRevision: 4, Version: 1, Cause: schema.CausePut})
	eq(t, "revoked", all[11], deleteEvent("a.z", 8, 1, 1, schema.CauseLeaseRevoked))
	eq(t, "expired", all[12].Cause, schema.CauseLeaseExpired)
	// From a position inside a revision.
	r, err := s.Changes(ChangesQuery{Key: "a", IsPrefix: true, AfterRevision: 6, AfterOpIndex: 0, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if err := sameEvents(r.Events, pick(6, 8, 9, 10, 11, 12, 13)); err != nil {
		t.Fatal(err)
	}
	// A position past the last op of a revision, or past the revision.
	eq(t, "after (6, 3)", positions(changesFrom(t, s, 6, 3, 100).Events), positions(all[9:]))
	eq(t, "after (6, 99)", positions(changesFrom(t, s, 6, 99, 100).Events), positions(all[9:]))
	r = changesFrom(t, s, 10, -1, 100)
	eq(t, "at the end", [4]any{len(r.Events), r.More, r.NextRevision, r.NextOpIndex}, [4]any{0, false, int64(10), -1})
	r = changesFrom(t, s, 10, 0, 100)
	eq(t, "after the last event", [4]any{len(r.Events), r.More, r.NextRevision, r.NextOpIndex}, [4]any{0, false, int64(10), -1})
}

// A revision with many events (the revoke of a lease with 50 keys) is read
// with limit 1 one event at a time: the next position stays inside the
// revision until its last event, then moves past the whole revision; with
// other limits, filters and positions the pages join up exactly.
func TestChangesPositionsInsideARevision(t *testing.T) {
	s := New()
	mustApply(t, s, t0, &Grant{TTL: 10})
	for i := 0; i < 50; i++ {
		mustApply(t, s, t0, &Put{Key: fmt.Sprintf("k.%02d", i), Value: val(fmt.Sprint(i)), Lease: 1})
	}
	mustApply(t, s, t0, &Put{Key: "other", Value: val(`1`)}) // rev 51
	revoke := mustApply(t, s, t0, &Revoke{ID: 1}).Events     // rev 52, ops 0..49
	eq(t, "revoke events", len(checkEvents(t, revoke, 52, schema.EventDelete, schema.CauseLeaseRevoked)), 50)
	tail := mustApply(t, s, t0, &Put{Key: "tail", Value: val(`1`)}).Events // rev 53
	all := logEvents(s)
	eq(t, "log", len(all), 53+49)

	// Limit 1 through the revoke, every key.
	rev, op := int64(51), -1
	for i := 0; i < 50; i++ {
		r := changesFrom(t, s, rev, op, 1)
		eq(t, fmt.Sprint("read ", i), r.Events, revoke[i:i+1])
		wantOp := i
		if i == 49 {
			wantOp = -1 // the last event of its revision: after the whole revision
		}
		eq(t, fmt.Sprint("next after read ", i), [3]any{r.NextRevision, r.NextOpIndex, r.More}, [3]any{int64(52), wantOp, true})
		rev, op = r.NextRevision, r.NextOpIndex
	}
	r := changesFrom(t, s, rev, op, 1)
	eq(t, "tail", r.Events, tail)
	eq(t, "next after the tail", [3]any{r.NextRevision, r.NextOpIndex, r.More}, [3]any{int64(53), -1, false})

	// Limit 1 with a prefix filter that the tail does not match: the last
	// delete ends the log for this reader.
	q := ChangesQuery{Key: "k.", IsPrefix: true, AfterRevision: 51, AfterOpIndex: -1, Limit: 1}
	for i := 0; i < 50; i++ {
		r, err := checkPage(s, all, q)
		if err != nil {
			t.Fatal(err)
		}
		eq(t, fmt.Sprint("filtered read ", i), r.Events, revoke[i:i+1])
		if i < 49 {
			eq(t, fmt.Sprint("filtered next ", i), [3]any{r.NextRevision, r.NextOpIndex, r.More}, [3]any{int64(52), i, true})
		} else {
			eq(t, "filtered end", [3]any{r.NextRevision, r.NextOpIndex, r.More}, [3]any{int64(53), -1, false})
		}
		q.AfterRevision, q.AfterOpIndex = r.NextRevision, r.NextOpIndex
	}

	// Every limit, every filter, from every position: the pages join up to
	// exactly the matching events, and each page is what expectPage says.
	filters := []ChangesQuery{{IsPrefix: true}, {Key: "k.", IsPrefix: true}, {Key: "k.3", IsPrefix: true}, {Key: "k.07"}, {Key: "other"}, {Key: "tail"}, {Key: "t", IsPrefix: true}}
	for _, f := range filters {
		var want []schema.Event
		for _, e := range all {
			if queryMatches(f, e.Key) {
				want = append(want, e)
			}
		}
		for _, limit := range []int{1, 2, 3, 7, 49, 50, 51, 1000} {
			for _, maxBytes := range []int{0, 1, 2 * (4 + 1 + recordOverhead)} {
				q := f
				q.AfterRevision, q.AfterOpIndex, q.Limit, q.MaxBytes = 0, -1, limit, maxBytes
				var got []schema.Event
				for pages := 0; ; pages++ {
					if pages > len(all)+1 {
						t.Fatalf("%+v: no end in sight", q)
					}
					r, err := checkPage(s, all, q)
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, r.Events...)
					if !r.More {
						break
					}
					q.AfterRevision, q.AfterOpIndex = r.NextRevision, r.NextOpIndex
				}
				if err := sameEvents(got, want); err != nil {
					t.Fatalf("filter %+v limit %d max bytes %d: %v", f, limit, maxBytes, err)
				}
			}
		}
		// From every position of the log, as a client that stored it.
		for i, e := range all {
			for _, op := range []int{e.OpIndex, -1} {
				q := f
				q.AfterRevision, q.AfterOpIndex, q.Limit = e.Revision, op, 3
				if _, err := checkPage(s, all, q); err != nil {
					t.Fatalf("from event %d: %v", i, err)
				}
			}
		}
	}
}

// A client that keeps reading from the next position it was given, while
// random commands apply and the log is trimmed, gets every matching event
// once, in order, except those a compaction took from under it: it is told
// so with ErrCompacted, and they are exactly the events between its
// position and the floor. Every page is exactly what expectPage says.
func TestChangesPositionsRandom(t *testing.T) {
	for _, seed := range []int64{5, 6, 7, 8} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rnd := rand.New(rand.NewSource(seed))
			g := newCmdGen(seed)
			s := New()
			var all []schema.Event // every event applied
			type gap struct {
				rev  int64
				op   int
				upTo int64
			}
			type reader struct {
				q    ChangesQuery
				got  []schema.Event
				gaps []gap
			}
			var readers []*reader
			for i := 0; i < 12; i++ {
				q := ChangesQuery{AfterOpIndex: -1, Limit: 1 + rnd.Intn(6)}
				switch rnd.Intn(3) {
				case 0:
					q.IsPrefix = true
					q.Key = genPrefixes[rnd.Intn(len(genPrefixes))]
				case 1:
					q.Key = g.key()
				default:
					q.IsPrefix = true // everything
				}
				if i < 3 {
					q.Limit = 1
				}
				if rnd.Intn(3) == 0 {
					q.MaxBytes = 1 + rnd.Intn(600)
				}
				readers = append(readers, &reader{q: q})
			}
			live := func() []schema.Event {
				// The events above the floor.
				floor := s.CompactRevision()
				i := len(all)
				for i > 0 && all[i-1].Revision > floor {
					i--
				}
				return all[i:]
			}
			read := func(rd *reader) bool {
				r, err := s.Changes(rd.q)
				if errors.Is(err, ErrCompacted) {
					floor := s.CompactRevision()
					if !(rd.q.AfterRevision < floor || (rd.q.AfterRevision == floor && rd.q.AfterOpIndex >= 0)) {
						t.Fatalf("ErrCompacted at (%d, %d) with the floor at %d", rd.q.AfterRevision, rd.q.AfterOpIndex, floor)
					}
					rd.gaps = append(rd.gaps, gap{rd.q.AfterRevision, rd.q.AfterOpIndex, floor})
					rd.q.AfterRevision, rd.q.AfterOpIndex = floor, -1
					return true
				}
				if err != nil {
					t.Fatal(err)
				}
				if _, err := checkPage(s, live(), rd.q); err != nil {
					t.Fatal(err)
				}
				rd.got = append(rd.got, r.Events...)
				rd.q.AfterRevision, rd.q.AfterOpIndex = r.NextRevision, r.NextOpIndex
				return r.More
			}
			bulk := 0
			for i := 0; i < 1500; i++ {
				all = append(all, s.Apply(g.next(s)).Events...)
				if i%250 == 100 {
					// A revision of many events: a lease with 30 keys, revoked.
					l := s.Limits()
					l.MaxLeases, l.MaxKeysPerLease = 10_000, 100
					mustApply(t, s, s.Now(), &l)
					id := mustApply(t, s, s.Now(), &Grant{TTL: 60}).Reply.(*schema.LeaseGrantReply).ID
					var ops []TxnOp
					for k := 0; k < 30; k++ {
						ops = append(ops, putLeaseOp(fmt.Sprintf("svc.bulk%d.%02d", bulk, k), `1`, id))
					}
					bulk++
					all = append(all, mustApply(t, s, s.Now(), &Txn{Success: ops}).Events...)
					all = append(all, mustApply(t, s, s.Now(), &Revoke{ID: id}).Events...)
				}
				if err := changeLogIs(s, live()); err != nil {
					t.Fatalf("entry %d: %v", i, err)
				}
				for _, rd := range readers {
					switch x := rnd.Intn(10); {
					case x < 3:
						read(rd)
					case x == 3:
						for read(rd) {
						}
					}
				}
			}
			compactions := 0
			for ri, rd := range readers {
				for read(rd) {
				}
				var want []schema.Event
			events:
				for _, e := range all {
					if !queryMatches(rd.q, e.Key) {
						continue
					}
					for _, gp := range rd.gaps {
						if after(e, gp.rev, gp.op) && e.Revision <= gp.upTo {
							continue events
						}
					}
					want = append(want, e)
				}
				if err := sameEvents(rd.got, want); err != nil {
					t.Fatalf("reader %d %+v (gaps %v): %v", ri, rd.q, rd.gaps, err)
				}
				compactions += len(rd.gaps)
			}
			t.Logf("%d events, floor %d, %d compacted reads", len(all), s.CompactRevision(), compactions)
			if s.CompactRevision() == 0 || compactions == 0 {
				t.Errorf("floor %d, %d compacted reads: the log was never trimmed under a reader", s.CompactRevision(), compactions)
			}
		})
	}
}

// MaxBytes bounds the approximate size of a page (key, value and a fixed
// overhead per event, as Get counts records), but a page always carries at
// least one event.
func TestChangesMaxBytes(t *testing.T) {
	s := New()
	big := `"` + strings.Repeat("x", 100) + `"` // 102 bytes
	for i := 1; i <= 5; i++ {
		mustApply(t, s, t0, &Put{Key: fmt.Sprint("m.", i), Value: val(big)}) // 3 + 102 + overhead each
	}
	mustApply(t, s, t0, &Delete{Key: "m.", IsPrefix: true}) // rev 6: 5 deletes of 3 + overhead each
	one := 3 + 102 + recordOverhead
	all := logEvents(s)
	cases := []struct {
		maxBytes int
		n        int
	}{
		{0, 7}, // no bound: the limit decides
		{1, 1},
		{one - 1, 1},
		{one, 1},
		{2*one - 1, 1},
		{2 * one, 2},
		{5*one + 3 + recordOverhead, 6},
		{5*one + 2*(3+recordOverhead) - 1, 6},
		{5*one + 2*(3+recordOverhead), 7},
		{1 << 30, 10},
	}
	for _, c := range cases {
		q := ChangesQuery{IsPrefix: true, AfterRevision: 0, AfterOpIndex: -1, Limit: 7, MaxBytes: c.maxBytes}
		if c.maxBytes == 1<<30 {
			q.Limit = 100
		}
		r, err := checkPage(s, all, q)
		if err != nil {
			t.Fatal(err)
		}
		eq(t, fmt.Sprint("events within ", c.maxBytes, " bytes"), len(r.Events), c.n)
		eq(t, fmt.Sprint("more within ", c.maxBytes, " bytes"), r.More, c.n < 10)
	}
	// Page by page with MaxBytes of one event: ten pages, the positions
	// join up across the revision of five deletes.
	q := ChangesQuery{IsPrefix: true, AfterRevision: 0, AfterOpIndex: -1, Limit: 100, MaxBytes: 1}
	var got []schema.Event
	var next []string
	for {
		r, err := checkPage(s, all, q)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.Events...)
		next = append(next, fmt.Sprintf("%d/%d", r.NextRevision, r.NextOpIndex))
		if !r.More {
			break
		}
		q.AfterRevision, q.AfterOpIndex = r.NextRevision, r.NextOpIndex
	}
	eq(t, "all", got, all)
	eq(t, "next positions", next, []string{"1/-1", "2/-1", "3/-1", "4/-1", "5/-1", "6/0", "6/1", "6/2", "6/3", "6/-1"})
}

// One read looks at no more than 100,000 log entries, matching or not: a
// narrow filter over a long log returns more=true with the next position
// advanced past what it looked at, even with no events, and continuing
// from there finds the rest.
func TestChangesScanCap(t *testing.T) {
	if maxChangesScan != 100_000 {
		t.Fatalf("maxChangesScan = %d; this test is written for 100,000", maxChangesScan)
	}
	const n = 60_000
	s := New()
	for i := 0; i < n; i++ {
		if r := s.ApplyCommand(Command{Op: OpPut, Now: t0, Body: &Put{Key: fmt.Sprintf("n.%05d", i), Value: val(`1`)}}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	mustApply(t, s, t0, &Delete{Key: "n.", IsPrefix: true})                // rev 60,001: 60,000 events
	want := mustApply(t, s, t0, &Put{Key: "want", Value: val(`1`)}).Events // rev 60,002
	eq(t, "log", s.hist.byRev.Len(), 2*n+1)

	type reply struct {
		events   int
		rev      int64
		op       int
		more     bool
		lastKey  string
		compacts int64
	}
	read := func(q ChangesQuery) reply {
		t.Helper()
		r, err := s.Changes(q)
		if err != nil {
			t.Fatal(err)
		}
		if r.Events == nil {
			t.Fatal("nil events")
		}
		last := ""
		if len(r.Events) > 0 {
			last = r.Events[len(r.Events)-1].Key
		}
		return reply{len(r.Events), r.NextRevision, r.NextOpIndex, r.More, last, r.CompactRevision}
	}
	wantQ := ChangesQuery{Key: "want", AfterRevision: 0, AfterOpIndex: -1, Limit: 10}
	// 60,000 puts and 40,000 deletes looked at: the position is inside the
	// big revision.
	eq(t, "first read", read(wantQ), reply{0, n + 1, 39_999, true, "", 0})
	wantQ.AfterRevision, wantQ.AfterOpIndex = n+1, 39_999
	r, err := s.Changes(wantQ)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "second read", r.Events, want)
	eq(t, "second read: next", [3]any{r.NextRevision, r.NextOpIndex, r.More}, [3]any{int64(n + 2), -1, false})

	// 40,000 puts and all 60,000 deletes: the cap falls on the last event
	// of the revision, so the position is after the whole revision.
	wantQ.AfterRevision, wantQ.AfterOpIndex = 20_000, -1
	eq(t, "from 20,000", read(wantQ), reply{0, n + 1, -1, true, "", 0})
	wantQ.AfterRevision, wantQ.AfterOpIndex = n+1, -1
	eq(t, "then", read(wantQ), reply{1, n + 2, -1, false, "want", 0})

	// The cap counts matching entries too: a key's two events are found,
	// and the read still stops at the cap.
	keyQ := ChangesQuery{Key: "n.00007", AfterRevision: 0, AfterOpIndex: -1, Limit: 10}
	eq(t, "one key", read(keyQ), reply{2, n + 1, 39_999, true, "n.00007", 0})
	keyQ.AfterRevision, keyQ.AfterOpIndex = n+1, 39_999
	eq(t, "one key, continued", read(keyQ), reply{0, n + 2, -1, false, "", 0})

	// A wide read is bounded by its limit long before the cap.
	eq(t, "prefix", read(ChangesQuery{Key: "n.", IsPrefix: true, AfterRevision: 0, AfterOpIndex: -1, Limit: 1000}), reply{1000, 1000, -1, true, "n.00999", 0})
}

// Below the floor, and inside the floor's revision, the events are gone:
// ErrCompacted, naming the floor. From the floor itself (after its whole
// revision) the read works. With nothing compacted, any position is fine.
func TestChangesCompacted(t *testing.T) {
	s := New()
	mustCompacted := func(rev int64, op int) { t.Helper(); mustCompacted(t, s, rev, op) }
	// Nothing compacted yet.
	for _, pos := range [][2]int64{{0, -1}, {0, 0}, {0, 5}, {3, -1}} {
		r := changesFrom(t, s, pos[0], int(pos[1]), 10)
		eq(t, fmt.Sprint("empty log after ", pos), [4]any{len(r.Events), r.More, r.NextRevision, r.CompactRevision}, [4]any{0, false, max(pos[0], 0), int64(0)})
	}
	mustApply(t, s, t0, &Limits{MaxLeases: 10, MaxKeysPerLease: 10, HistoryRevisions: 3})
	for i, k := range []string{"a", "b", "c", "d"} {
		mustApply(t, s, t0+int64(i), &Put{Key: k, Value: val(`1`)})
	}
	eq(t, "floor", s.CompactRevision(), int64(1))
	eq(t, "log", positions(logEvents(s)), []string{"2/0:b", "3/0:c", "4/0:d"})
	mustCompacted(0, -1)
	mustCompacted(0, 0)
	mustCompacted(0, 7)
	mustCompacted(1, 0) // inside the floor's revision
	mustCompacted(1, 3)
	mustCompacted(-1, -1)
	r := changesFrom(t, s, 1, -1, 10)
	eq(t, "from the floor", positions(r.Events), []string{"2/0:b", "3/0:c", "4/0:d"})
	eq(t, "reply floor", r.CompactRevision, int64(1))
	eq(t, "after (2, 0)", positions(changesFrom(t, s, 2, 0, 10).Events), []string{"3/0:c", "4/0:d"})
	_, err := s.Changes(ChangesQuery{Key: "a", AfterRevision: 0, AfterOpIndex: -1, Limit: 10})
	eq(t, "message", err.Error(), "revisions up to 1 are compacted; read again from 1")

	// A revision of two events counts as one revision.
	mustApply(t, s, t0+10, &Txn{Success: []TxnOp{putOp("e", `1`), putOp("f", `1`)}}) // rev 5
	eq(t, "floor", s.CompactRevision(), int64(2))
	eq(t, "log", positions(logEvents(s)), []string{"3/0:c", "4/0:d", "5/0:e", "5/1:f"})
	mustCompacted(1, -1)
	mustCompacted(2, 0)
	eq(t, "from the new floor", len(changesFrom(t, s, 2, -1, 10).Events), 4)
	checkChangeLog(t, s, logEvents(s))
}

// Retention by count: after a write, the history keeps the last
// HistoryRevisions revisions, however many events each holds; the floor is
// always a revision boundary.
func TestChangesRetentionByCount(t *testing.T) {
	s := New()
	mustApply(t, s, t0, &Limits{MaxLeases: 10, MaxKeysPerLease: 10, HistoryRevisions: 3})
	mustApply(t, s, t0, &Grant{TTL: 60})
	var all []schema.Event
	do := func(body any) []schema.Event {
		t.Helper()
		evs := mustApply(t, s, t0, body).Events
		all = append(all, evs...)
		return evs
	}
	state := func() [2]any { return [2]any{s.CompactRevision(), positions(logEvents(s))} }
	do(&Put{Key: "x1", Value: val(`1`)})           // rev 1
	do(&Put{Key: "x2", Value: val(`1`)})           // rev 2
	do(&Put{Key: "l1", Value: val(`1`), Lease: 1}) // rev 3
	eq(t, "three revisions", state(), [2]any{int64(0), []string{"1/0:x1", "2/0:x2", "3/0:l1"}})
	do(&Put{Key: "l2", Value: val(`1`), Lease: 1}) // rev 4
	eq(t, "four: the first goes", state(), [2]any{int64(1), []string{"2/0:x2", "3/0:l1", "4/0:l2"}})
	do(&Put{Key: "l3", Value: val(`1`), Lease: 1}) // rev 5
	do(&Revoke{ID: 1})                             // rev 6: three events, one revision
	eq(t, "after the revoke", state(), [2]any{int64(3), []string{"4/0:l2", "5/0:l3", "6/0:l1", "6/1:l2", "6/2:l3"}})
	// A revision of many events counts once.
	var ops []TxnOp
	for i := 0; i < 7; i++ {
		ops = append(ops, putOp(fmt.Sprint("t", i), `1`))
	}
	do(&Txn{Success: ops}) // rev 7
	eq(t, "a big revision", state(), [2]any{int64(4), []string{"5/0:l3", "6/0:l1", "6/1:l2", "6/2:l3",
		"7/0:t0", "7/1:t1", "7/2:t2", "7/3:t3", "7/4:t4", "7/5:t5", "7/6:t6"}})
	r := changesFrom(t, s, 4, -1, 100)
	eq(t, "read from the floor", len(r.Events), 11)
	mustCompacted(t, s, 3, -1)
	mustCompacted(t, s, 4, 0)
	// A lower limit applies at the next write.
	mustApply(t, s, t0, &Limits{MaxLeases: 10, MaxKeysPerLease: 10, HistoryRevisions: 1})
	last := do(&Put{Key: "v", Value: val(`1`)}) // rev 8
	eq(t, "exactly the limit", state(), [2]any{int64(7), []string{"8/0:v"}})
	checkChangeLog(t, s, last)
}

// Retention by age: after a write, events recorded more than HistoryAgeMS
// before the write's time are gone, whole revisions at a time. The time is
// the lease clock the commands carry: max(stamp, clock).
func TestChangesRetentionByAge(t *testing.T) {
	s := New()
	mustApply(t, s, t0, &Limits{MaxLeases: 10, MaxKeysPerLease: 10, HistoryAgeMS: 10_000})
	mustApply(t, s, t0, &Grant{TTL: 600})
	stamps := func() []int64 {
		var out []int64
		for _, le := range loggedEvents(s) {
			out = append(out, le.now-t0)
		}
		return out
	}
	mustApply(t, s, t0, &Put{Key: "a", Value: val(`1`)})                 // rev 1 at 0
	mustApply(t, s, t0+4_000, &Put{Key: "b", Value: val(`1`), Lease: 1}) // rev 2 at 4,000
	mustApply(t, s, t0+4_000, &Put{Key: "c", Value: val(`1`), Lease: 1}) // rev 3 at 4,000
	mustApply(t, s, t0+10_000, &Put{Key: "d", Value: val(`1`)})          // rev 4 at 10,000: a is exactly 10 s old, kept
	eq(t, "exactly the age", stamps(), []int64{0, 4_000, 4_000, 10_000})
	eq(t, "floor", s.CompactRevision(), int64(0))
	mustApply(t, s, t0+10_001, &Put{Key: "e", Value: val(`1`)}) // rev 5: a is older than 10 s
	eq(t, "one ms older", stamps(), []int64{4_000, 4_000, 10_000, 10_001})
	eq(t, "floor", s.CompactRevision(), int64(1))
	// A revoke at 14,001 records two events and ages out b and c.
	mustApply(t, s, t0+14_001, &Revoke{ID: 1}) // rev 6
	eq(t, "after the revoke", positions(logEvents(s)), []string{"4/0:d", "5/0:e", "6/0:b", "6/1:c"})
	eq(t, "floor", s.CompactRevision(), int64(3))

	// Commands without events do not trim the log: a tick, a grant, a
	// keep-alive, a failed put, a cached retry.
	before := loggedEvents(s)
	mustApply(t, s, t0+50_000, &Expire{})
	mustApply(t, s, t0+50_000, &Grant{TTL: 1}) // lease 2
	mustApply(t, s, t0+50_000, &KeepAliveMany{IDs: []int64{2}})
	if r := apply(t, s, t0+50_000, &Put{Key: "f", Value: val(`1`), Lease: 99}); !errors.Is(r.Err, ErrLeaseNotFound) {
		t.Fatal(r.Err)
	}
	eq(t, "log after commands without events", loggedEvents(s), before)
	eq(t, "floor", s.CompactRevision(), int64(3))

	// The next write at 50,000 trims everything older than 40,000, and an
	// earlier stamp counts as the clock: the event is recorded at 50,000.
	mustApply(t, s, t0+60_000, &Expire{})
	mustApply(t, s, t0+1, &Put{Key: "g", Value: val(`1`), TTL: 5}) // rev 7 at 60,000
	eq(t, "stamped early", stamps(), []int64{60_000})
	eq(t, "floor", s.CompactRevision(), int64(6))

	// An expiry is a write like any other: it trims by its own time.
	mustApply(t, s, t0+66_000, &Put{Key: "h", Value: val(`1`)})            // rev 8 at 66,000
	r := mustApply(t, s, t0+70_001, &Expire{IDs: s.Expired(t0+70_001, 0)}) // rev 9: g's anonymous lease
	eq(t, "expired", checkEvents(t, r.Events, 9, schema.EventDelete, schema.CauseLeaseExpired), []string{"g"})
	eq(t, "after the expiry", stamps(), []int64{66_000, 70_001})
	eq(t, "floor", s.CompactRevision(), int64(7))

	// Both limits at once: whichever drops more decides.
	mustApply(t, s, t0+70_001, &Limits{MaxLeases: 10, MaxKeysPerLease: 10, HistoryRevisions: 2, HistoryAgeMS: 1_000_000})
	mustApply(t, s, t0+70_002, &Put{Key: "i", Value: val(`1`)}) // rev 10: count drops rev 8
	eq(t, "by count", stamps(), []int64{70_001, 70_002})
	mustApply(t, s, t0+70_003, &Limits{MaxLeases: 10, MaxKeysPerLease: 10, HistoryRevisions: 100, HistoryAgeMS: 1})
	mustApply(t, s, t0+70_003, &Put{Key: "j", Value: val(`1`)}) // rev 11: age drops rev 9
	eq(t, "by age", stamps(), []int64{70_002, 70_003})
	eq(t, "floor", s.CompactRevision(), int64(9))
	checkChangeLog(t, s, logEvents(s))
}

// The floor never moves back: not when the limits are raised, not across a
// snapshot and the writes after it. Positions below it stay compacted.
func TestChangesFloorNeverMovesBack(t *testing.T) {
	s := New()
	mustApply(t, s, t0, &Limits{MaxLeases: 10, MaxKeysPerLease: 10, HistoryRevisions: 2})
	floors := []int64{}
	note := func() {
		t.Helper()
		if n := len(floors); n > 0 && s.CompactRevision() < floors[n-1] {
			t.Fatalf("floor moved back %d -> %d", floors[n-1], s.CompactRevision())
		}
		floors = append(floors, s.CompactRevision())
		if err := changeLogIs(s, logEvents(s)); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 6; i++ {
		mustApply(t, s, t0, &Put{Key: fmt.Sprint("a", i), Value: val(`1`)})
		note()
	}
	eq(t, "floor", s.CompactRevision(), int64(4))
	// Raising the limits keeps what is gone gone.
	mustApply(t, s, t0, &Limits{MaxLeases: 10, MaxKeysPerLease: 10, HistoryRevisions: 1_000, HistoryAgeMS: 1 << 40})
	note()
	for i := 0; i < 3; i++ {
		mustApply(t, s, t0, &Put{Key: fmt.Sprint("b", i), Value: val(`1`)})
		note()
	}
	eq(t, "floor after raising the limits", s.CompactRevision(), int64(4))
	mustCompacted(t, s, 3, -1)
	// Across a snapshot, and after writes on the restored copy.
	c := restored(t, snap(t, s))
	eq(t, "restored floor", c.CompactRevision(), int64(4))
	eq(t, "restored log", loggedEvents(c), loggedEvents(s))
	mustCompacted(t, c, 3, -1)
	mustApply(t, c, t0, &Put{Key: "c", Value: val(`1`)})
	eq(t, "restored floor after a write", c.CompactRevision(), int64(4))
	// Lowering the limit again moves it forward only.
	mustApply(t, s, t0, &Limits{MaxLeases: 10, MaxKeysPerLease: 10, HistoryRevisions: 1})
	mustApply(t, s, t0, &Put{Key: "d", Value: val(`1`)})
	note()
	eq(t, "floor", s.CompactRevision(), int64(9))
	// Restoring a v1 snapshot puts the floor at its revision, which may be
	// below this state's: that is a different state, not this one moving
	// back, and it is consistent with its own (empty) log.
	v1 := restored(t, readGolden(t))
	eq(t, "v1 floor", v1.CompactRevision(), v1.Revision())
}

// A retry answered from the idempotency cache adds no events and trims
// nothing, whatever the command.
func TestChangesIdempotentRetryAddsNothing(t *testing.T) {
	s := New()
	mustApply(t, s, t0, &Limits{MaxLeases: 10, MaxKeysPerLease: 10, HistoryRevisions: 100, HistoryAgeMS: 20_000})
	mustApply(t, s, t0, &Grant{TTL: 60})
	cmds := []Command{
		keyed("r1", &Put{Key: "a", Value: val(`1`), Lease: 1}),
		keyed("r2", &Put{Key: "b", Value: val(`1`), Lease: 1}),
		keyed("r3", &Txn{Success: []TxnOp{putOp("c", `1`), putOp("d", `1`), getOp("a")}}),
		keyed("r4", &Delete{Key: "c"}),
		keyed("r5", &KeepAliveMany{IDs: []int64{1, 5}}),
		keyed("r6", &Revoke{ID: 1}),
		keyed("r7", &Delete{Key: "", IsPrefix: true}),
	}
	var all []schema.Event
	replies := map[string][]byte{}
	for i, c := range cmds {
		r, reply := applyFresh(t, s, t0+int64(i), c)
		all = append(all, r.Events...)
		replies[c.IdempotencyKey] = reply
	}
	eq(t, "events", positions(all), []string{"1/0:a", "2/0:b", "3/0:c", "3/1:d", "4/0:c", "5/0:a", "5/1:b", "6/0:d"})
	checkChangeLog(t, s, all)
	log := loggedEvents(s)
	// Retries, late enough that a write would trim the whole log by age.
	for _, c := range cmds {
		mustCached(t, s, t0+30_000, c, replies[c.IdempotencyKey])
		eq(t, "log after a retry of "+c.IdempotencyKey, loggedEvents(s), log)
		eq(t, "floor", s.CompactRevision(), int64(0))
	}
	checkChangeLog(t, s, all)
	// The next write trims by age.
	last := mustApply(t, s, t0+30_000, &Put{Key: "e", Value: val(`1`)}).Events
	checkChangeLog(t, s, last)
}

// A command that fails adds no events and trims nothing; neither do
// commands that succeed without writing.
func TestChangesFailedCommandsAddNothing(t *testing.T) {
	s := New()
	mustApply(t, s, t0, &Limits{MaxLeases: 2, MaxKeysPerLease: 1, HistoryRevisions: 100, HistoryAgeMS: 5_000})
	mustApply(t, s, t0, &Grant{TTL: 600}) // lease 1
	var all []schema.Event
	all = append(all, mustApply(t, s, t0, &Put{Key: "a", Value: val(`1`), Lease: 1}).Events...)
	all = append(all, mustApply(t, s, t0, &Put{Key: "p.1", Value: val(`1`)}).Events...)
	all = append(all, mustApply(t, s, t0, &Put{Key: "p.2", Value: val(`1`)}).Events...)
	r, _ := applyFresh(t, s, t0, keyed("k", &Put{Key: "b", Value: val(`1`)}))
	all = append(all, r.Events...)
	checkChangeLog(t, s, all)
	log := loggedEvents(s)
	failing := []struct {
		body any
		err  error
	}{
		{&Put{Key: "c", Value: val(`1`), Lease: 9}, ErrLeaseNotFound},
		{&Put{Key: "c", Value: val(`1`), Lease: 1}, ErrLimitExceeded}, // one key per lease
		{&Grant{ID: 1, TTL: 1}, ErrLeaseExists},
		{&Revoke{ID: 9}, ErrLeaseNotFound},
		{&KeepAlive{ID: 9}, ErrLeaseNotFound},
		{&Txn{Success: []TxnOp{putOp("d", `1`), {Delete: &Delete{Key: "p.", IsPrefix: true, Limit: 1}}}}, ErrTooLarge},
		{&Txn{Success: []TxnOp{putOp("d", `1`), putLeaseOp("e", `1`, 9)}}, ErrLeaseNotFound},
		{keyed("k", &Put{Key: "b", Value: val(`2`)}), ErrIdempotencyConflict},
	}
	now := int64(t0)
	for _, f := range failing {
		now += 10_000 // a write this late would trim the whole log by age
		before := snap(t, s)
		r := apply(t, s, now, f.body)
		if !errors.Is(r.Err, f.err) || r.Events != nil {
			t.Fatalf("%+v: %+v, want %v", f.body, r, f.err)
		}
		eq(t, fmt.Sprintf("log after a failed %T", f.body), loggedEvents(s), log)
		eq(t, fmt.Sprintf("state after a failed %T", f.body), string(snap(t, s)), string(tickedSnap(t, before, now)))
	}
	// Undecodable entries.
	for _, bad := range [][]byte{nil, {1, 4}, append(encode(t, now, &Put{Key: "x", Value: val(`1`)}), 0)} {
		if r := s.Apply(bad); !errors.Is(r.Err, ErrBadCommand) {
			t.Fatal(r.Err)
		}
		eq(t, "log after a bad entry", loggedEvents(s), log)
	}
	// Commands that succeed without a write.
	for _, body := range []any{
		&Expire{}, &Grant{TTL: 1}, &KeepAlive{ID: 1}, &KeepAliveMany{IDs: []int64{1, 2, 3}}, &Delete{Key: "nothing"},
		&Delete{Key: "nothing.", IsPrefix: true}, &Txn{Success: []TxnOp{getOp("a")}}, &Expire{IDs: []int64{1}},
		&Limits{MaxLeases: 3, MaxKeysPerLease: 1, HistoryRevisions: 100, HistoryAgeMS: 5_000},
	} {
		now += 10_000
		r := mustApply(t, s, now, body)
		if len(r.Events) != 0 {
			t.Fatalf("%T: events %v", body, r.Events)
		}
		eq(t, fmt.Sprintf("log after %T", body), loggedEvents(s), log)
	}
	checkChangeLog(t, s, all)
	eq(t, "floor", s.CompactRevision(), int64(0))
}
