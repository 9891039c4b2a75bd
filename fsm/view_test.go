package fsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"reflect"
	"sort"
	"sync"
	"testing"

	"github.com/concord-io/concord/schema"
)

// reader is what the service's read handlers ask; *State and *View both
// answer it, so one function can read either and compare.
type reader interface {
	Revision() int64
	Now() int64
	CompactRevision() int64
	KeyCount() int
	Get(q GetQuery, now int64) *schema.KVGetReply
	GetAt(q GetQuery, rev int64, now int64) (*schema.KVGetReply, error)
	History(q HistoryQuery) (*schema.KVHistoryReply, error)
	Changes(q ChangesQuery) (*schema.KVChangesReply, error)
	LeaseInfo(id int64, withKeys bool, now int64) (*schema.LeaseInfo, error)
	LeaseList(includeAnonymous bool, after int64, limit int, now int64) *schema.LeaseListReply
}

var _, _ reader = (*State)(nil), (*View)(nil)

// readEverything asks r every kind of read the service serves and renders
// the answers, errors included, as one string: the keyspace now and at a
// spread of past revisions, keys, prefixes and pages, the history of each
// key, the change log, and every lease. keys and leases name what to ask
// about, so that two readers are asked the same questions.
func readEverything(r reader, keys []string, maxLease int64) string {
	var out []any
	add := func(what string, v any, err error) {
		if err != nil {
			out = append(out, what+": "+err.Error())
			return
		}
		out = append(out, map[string]any{what: v})
	}
	now := r.Now()
	out = append(out, r.Revision(), now, r.CompactRevision(), r.KeyCount())
	all := GetQuery{IsPrefix: true, Limit: math.MaxInt}
	for _, later := range []int64{0, 1500, 1 << 40} {
		add("get all", r.Get(all, now+later), nil)
	}
	add("page", r.Get(GetQuery{IsRange: true, Key: "a", RangeEnd: "x", After: "a.a", Limit: 3}, now), nil)
	add("count", r.Get(GetQuery{IsPrefix: true, Key: "svc.", CountOnly: true}, now), nil)
	for _, k := range keys {
		add("get "+k, r.Get(GetQuery{Key: k}, now), nil)
		h, err := r.History(HistoryQuery{Key: k, Limit: math.MaxInt})
		add("history "+k, h, err)
		h, err = r.History(HistoryQuery{Key: k, NewestFirst: true, Limit: 2})
		add("history newest "+k, h, err)
	}
	// Past revisions: every one near the floor and the present, a spread
	// between, and a few the history cannot answer.
	floor, rev := r.CompactRevision(), r.Revision()
	for at := floor - 1; at <= rev+1; at++ {
		if at > floor+3 && at < rev-3 && at%7 != 0 {
			continue
		}
		g, err := r.GetAt(all, at, now)
		add(fmt.Sprintf("get all at %d", at), g, err)
		if len(keys) > 0 {
			k := keys[int(max(at, 0))%len(keys)]
			g, err = r.GetAt(GetQuery{Key: k}, at, now)
			add(fmt.Sprintf("get %s at %d", k, at), g, err)
		}
	}
	for _, after := range []int64{floor - 1, floor, floor + 1, rev} {
		c, err := r.Changes(ChangesQuery{IsPrefix: true, AfterRevision: after, AfterOpIndex: -1, Limit: math.MaxInt})
		add(fmt.Sprintf("changes after %d", after), c, err)
	}
	c, err := r.Changes(ChangesQuery{Key: "svc.", IsPrefix: true, AfterRevision: floor, AfterOpIndex: -1, Limit: 2})
	add("changes svc. page", c, err)
	for id := int64(0); id <= maxLease+1; id++ {
		li, err := r.LeaseInfo(id, true, now)
		add(fmt.Sprintf("lease %d", id), li, err)
	}
	add("leases", r.LeaseList(true, 0, math.MaxInt, now), nil)
	add("leases page", r.LeaseList(false, 1, 2, now+500), nil)
	b, err := json.Marshal(out)
	if err != nil {
		panic(err) // every answer is a schema type that marshals
	}
	return string(b)
}

// keysEverSeen lists every key the state holds or its history mentions,
// sorted: the keys to ask a view about, present and gone.
func keysEverSeen(s *State) []string {
	seen := map[string]bool{}
	for _, kv := range getAll(s, s.Now()) {
		seen[kv.Key] = true
	}
	s.hist.byKey.Ascend(func(v *version) bool {
		seen[v.key()] = true
		return true
	})
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// A view answers, forever, what the state answered when the view was
// taken: puts, deletes, a transaction, keep-alives, a revoke, expiries and
// a compaction applied afterwards change the state and not the view.
func TestViewStandsStillWhileTheStateGoesOn(t *testing.T) {
	s := New()
	mustApply(t, s, t0, &Limits{MaxLeases: 100, MaxKeysPerLease: 100})
	for i := 0; i < 3; i++ {
		mustApply(t, s, t0, &Grant{TTL: 10 + int64(i)*10})
	}
	for i := 0; i < 30; i++ {
		mustApply(t, s, t0+int64(i), &Put{Key: fmt.Sprintf("svc.n%02d", i), Value: val(fmt.Sprint(i)), Lease: int64(1 + i%3)})
	}
	for i := 0; i < 10; i++ {
		mustApply(t, s, t0+100, &Put{Key: fmt.Sprintf("a.k%d", i), Value: val(`"v1"`), ContentType: "text/plain"})
		mustApply(t, s, t0+100, &Put{Key: fmt.Sprintf("a.k%d", i), Value: val(`"v2"`), TTL: 5})
	}
	mustApply(t, s, t0+200, &Delete{Key: "a.k9"})

	keys := append(keysEverSeen(s), "a.k-new", "svc.n99")
	const maxLease = 40
	v := s.View()
	want := readEverything(s, keys, maxLease)
	if got := readEverything(v, keys, maxLease); got != want {
		t.Fatalf("a fresh view answers differently from its state: %s", firstDifference(got, want))
	}
	rev, kvs := s.Revision(), s.KeyCount()

	// The state goes on.
	mustApply(t, s, t0+300, &Put{Key: "svc.n00", Value: val(`"new"`)})
	mustApply(t, s, t0+300, &Put{Key: "a.k-new", Value: val(`1`), Lease: 2})
	mustApply(t, s, t0+300, &Delete{Key: "svc.n1", IsPrefix: true})
	mustApply(t, s, t0+300, &KeepAlive{ID: 3})
	mustApply(t, s, t0+300, &Txn{Success: []TxnOp{
		{Put: &Put{Key: "svc.n25", Value: val(`"txn"`)}},
		{Delete: &Delete{Key: "a.k0"}},
	}})
	mustApply(t, s, t0+300, &Revoke{ID: 1})
	// The anonymous leases of a.k* (ttl 5 s) and lease 2 (ttl 20 s) expire.
	mustApply(t, s, t0+60_000, &Expire{IDs: s.Expired(t0+60_000, 0)})
	mustApply(t, s, t0+60_000, &Grant{TTL: 60})
	mustApply(t, s, t0+60_000, &Compact{Revision: s.Revision() - 1})

	if s.Revision() == rev || s.KeyCount() == kvs {
		t.Fatalf("test premise: the state did not move (revision %d, %d keys)", s.Revision(), s.KeyCount())
	}
	if s.CompactRevision() <= rev {
		t.Fatalf("test premise: compaction to %d did not pass the view's revision %d", s.CompactRevision(), rev)
	}
	if now := readEverything(s, keys, maxLease); now == want {
		t.Fatal("test premise: the state answers as it did before the writes")
	}
	if got := readEverything(v, keys, maxLease); got != want {
		t.Fatalf("the view changed with the state: %s", firstDifference(got, want))
	}
	// Reads below the state's new floor still work on the view.
	if _, err := s.GetAt(GetQuery{Key: "svc.n00"}, rev, s.Now()); !errors.Is(err, ErrCompacted) {
		t.Fatalf("test premise: the state still reads revision %d: %v", rev, err)
	}
	got, err := v.GetAt(GetQuery{Key: "svc.n00"}, rev, v.Now())
	if err != nil || len(got.KVs) != 1 || string(got.KVs[0].Value) != "0" {
		t.Fatalf("view GetAt(svc.n00, %d) = %+v, %v; want the value 0", rev, got, err)
	}
}

// Over generated logs (every command kind, bad entries, limit changes,
// compactions by count, by age and by command), views taken at many points
// keep answering what the state answered then.
func TestViewsOfGeneratedLogsStandStill(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		log, _ := genLog(seed, 1500)
		s := New()
		type taken struct {
			at     int
			v      *View
			answer string
		}
		var views []taken
		const maxLease = 60
		keys := newCmdGen(seed).keys
		diverged := 0
		r := rand.New(rand.NewSource(seed))
		check := func(upTo int) {
			for _, tk := range views {
				if got := readEverything(tk.v, keys, maxLease); got != tk.answer {
					t.Fatalf("seed %d: the view taken after entry %d changed by entry %d: %s", seed, tk.at, upTo, firstDifference(got, tk.answer))
				}
			}
		}
		for i, e := range log {
			s.Apply(e)
			if r.Intn(100) < 4 {
				v := s.View()
				views = append(views, taken{i, v, readEverything(s, keys, maxLease)})
			}
			if i%300 == 299 {
				check(i)
			}
		}
		check(len(log) - 1)
		final := readEverything(s, keys, maxLease)
		for _, tk := range views {
			if tk.answer != final {
				diverged++
			}
		}
		if len(views) < 10 || diverged == 0 {
			t.Fatalf("seed %d: test premise: %d views, %d of them differ from the final state", seed, len(views), diverged)
		}
	}
}

// A view is read while Apply goes on, without a lock: run under -race.
// The readers see one revision throughout, and the answer of the moment
// the view was taken.
func TestViewReadConcurrentlyWithApply(t *testing.T) {
	log, _ := genLog(7, 3000)
	s := New()
	for _, e := range log[:1000] {
		s.Apply(e)
	}
	keys := newCmdGen(7).keys
	v := s.View()
	want := readEverything(s, keys, 60)
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				if got := readEverything(v, keys, 60); got != want {
					errs <- got
					return
				}
			}
		}()
	}
	for i, e := range log[1000:] {
		s.Apply(e)
		if i%100 == 0 {
			// Views taken on the applying goroutine, as the service takes
			// them under its lock, beside the views being read.
			_ = s.View().Revision()
		}
	}
	wg.Wait()
	close(errs)
	for got := range errs {
		t.Fatalf("a view read during Apply changed: %s", firstDifference(got, want))
	}
}

// Every field of State is either cloned into a view, carried as a scalar,
// or left out because no read uses it. A field added to State fails here
// until View says which: a tree shared with the live state would race
// with Apply.
func TestViewCoversEveryField(t *testing.T) {
	// The view's space is a copy of the space it reads, whose fields
	// are listed below; spaces and names are replaced by that one space.
	cloned := map[string]bool{"space": true, "spaces": true, "names": true,
		"kv": true, "leases": true, "attached": true, "hist": true}
	leftOut := map[string]bool{"expiry": true, "idemByKey": true, "idemBySeq": true, "prevs": true, "activity": true,
		"applying": true, "pivotRec": true, "pivotLease": true, "versionSlab": true}
	scalars := map[string]bool{"idemSeq": true, "revision": true, "nextLeaseID": true, "now": true, "limits": true,
		"anonymous": true, "leaseTotal": true, "name": true, "valueBytes": true, "quota": true,
		"status": true, "movedTo": true, "fencedAt": true}
	// Shared with the live state because Apply never changes it in place.
	cloned["quotas"] = true
	for _, st := range []reflect.Type{reflect.TypeOf(State{}), reflect.TypeOf(space{})} {
		for i := 0; i < st.NumField(); i++ {
			f := st.Field(i)
			if !cloned[f.Name] && !leftOut[f.Name] && !scalars[f.Name] {
				t.Errorf("%s.%s (%s): View does not say whether it clones it, carries it or leaves it out (fsm/view.go)", st.Name(), f.Name, f.Type)
			}
			if scalars[f.Name] && holdsPointers(f.Type) {
				t.Errorf("%s.%s (%s) is carried into views as a scalar but holds pointers: clone it or leave it out", st.Name(), f.Name, f.Type)
			}
		}
	}
	// The history is cloned by history.clone: its trees must all be in it.
	ht := reflect.TypeOf(history{})
	for i := 0; i < ht.NumField(); i++ {
		f := ht.Field(i)
		if holdsPointers(f.Type) && f.Name != "byRev" && f.Name != "byKey" {
			t.Errorf("history.%s (%s): check that history.clone clones it, then list it here", f.Name, f.Type)
		}
	}

	// What is left out is really out, and what is cloned is not the
	// live tree.
	s := New()
	mustApply(t, s, t0, &Put{Key: "k", Value: val(`1`), TTL: 5})
	v := s.View()
	if v.s.expiry != nil || v.s.idemByKey != nil || v.s.idemBySeq != nil {
		t.Error("a view shares trees no read uses")
	}
	if v.s.kv == s.kv || v.s.leases == s.leases || v.s.attached == s.attached || v.s.hist.byRev == s.hist.byRev || v.s.hist.byKey.runs == s.hist.byKey.runs {
		t.Error("a view shares a live tree instead of a clone")
	}
}

// holdsPointers reports whether values of t can refer to shared mutable
// memory (strings cannot: they are immutable).
func holdsPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Chan, reflect.Func, reflect.Interface:
		return true
	case reflect.Array:
		return holdsPointers(t.Elem())
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if holdsPointers(t.Field(i).Type) {
				return true
			}
		}
	}
	return false
}

// firstDifference shows where got and want part, with some context.
func firstDifference(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	from := max(i-150, 0)
	return fmt.Sprintf("at byte %d\ngot  …%s…\nwant …%s…", i, got[from:min(i+150, len(got))], want[from:min(i+150, len(want))])
}
