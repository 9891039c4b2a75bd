package fsm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"testing"

	"github.com/concord-io/concord/schema"
)

// Shared test helpers. The tests are internal (package fsm) only so that the
// invariant checker can cross-check the derived indexes (attachments, the
// deadline index, the anonymous-lease counter) against the exported views;
// everything else goes through the exported API and encoded log entries.

// encode builds a log entry, failing the test if the body cannot be encoded.
// A Command body contributes its idempotency key and body.
func encode(t testing.TB, now int64, body any) []byte {
	t.Helper()
	key := ""
	if c, ok := body.(Command); ok {
		key, body = c.IdempotencyKey, c.Body
	}
	data, err := EncodeKeyed(now, key, body)
	if err != nil {
		t.Fatalf("Encode(%d, %#v): %v", now, body, err)
	}
	return data
}

// apply encodes body stamped with now and applies it through Apply, as a
// replica applying its Raft log does.
func apply(t testing.TB, s *State, now int64, body any) Result {
	t.Helper()
	return s.Apply(encode(t, now, body))
}

// mustApply applies a command that must succeed.
func mustApply(t testing.TB, s *State, now int64, body any) Result {
	t.Helper()
	r := apply(t, s, now, body)
	if r.Err != nil {
		t.Fatalf("apply %T %+v at %d: unexpected error: %v", body, body, now, r.Err)
	}
	return r
}

// snap returns the snapshot bytes of the state.
func snap(t testing.TB, s *State) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := s.Snapshot().WriteTo(&buf)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo returned %d, wrote %d bytes", n, buf.Len())
	}
	return buf.Bytes()
}

// restored returns a fresh State restored from snapshot bytes.
func restored(t testing.TB, data []byte) *State {
	t.Helper()
	s := New()
	if err := s.Restore(bytes.NewReader(data)); err != nil {
		t.Fatalf("restore: %v", err)
	}
	return s
}

// mustFail applies a command stamped at the state's current clock, checks
// that it fails with the sentinel, carries no reply and no events, and that
// the state is byte-identical afterwards.
func mustFail(t testing.TB, s *State, body any, sentinel error) Result {
	t.Helper()
	before := snap(t, s)
	rev := s.Revision()
	r := apply(t, s, s.Now(), body)
	if !errors.Is(r.Err, sentinel) {
		t.Fatalf("apply %T %+v: err = %v, want %v", body, body, r.Err, sentinel)
	}
	if r.Reply != nil || len(r.Events) != 0 || len(r.Expired) != 0 {
		t.Fatalf("failed %T carries output: reply %#v events %v expired %v", body, r.Reply, r.Events, r.Expired)
	}
	if s.Revision() != rev {
		t.Fatalf("failed %T moved the revision %d -> %d", body, rev, s.Revision())
	}
	if after := snap(t, s); !bytes.Equal(before, after) {
		t.Fatalf("failed %T changed the state:\nbefore %s\nafter  %s", body, before, after)
	}
	return r
}

// getAll returns every record, by key.
func getAll(s *State, now int64) []schema.KeyValue {
	return s.Get(GetQuery{IsPrefix: true, Limit: math.MaxInt}, now).KVs
}

// getKey returns one record, or nil.
func getKey(t testing.TB, s *State, key string) *schema.KeyValue {
	t.Helper()
	rep := s.Get(GetQuery{Key: key}, s.Now())
	switch len(rep.KVs) {
	case 0:
		return nil
	case 1:
		kv := rep.KVs[0]
		return &kv
	}
	t.Fatalf("Get(%q) returned %d records", key, len(rep.KVs))
	return nil
}

// info returns a lease's description with keys, failing if it is missing.
func info(t testing.TB, s *State, id int64) *schema.LeaseInfo {
	t.Helper()
	li, err := s.LeaseInfo(id, true, s.Now())
	if err != nil {
		t.Fatalf("LeaseInfo(%d): %v", id, err)
	}
	return li
}

// leaseGone checks that a lease no longer exists.
func leaseGone(t testing.TB, s *State, id int64) {
	t.Helper()
	if li, err := s.LeaseInfo(id, false, s.Now()); !errors.Is(err, ErrLeaseNotFound) {
		t.Fatalf("LeaseInfo(%d) = %+v, %v; want ErrLeaseNotFound", id, li, err)
	}
}

// keysOf lists the keys of all records.
func keysOf(kvs []schema.KeyValue) []string {
	out := make([]string, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, kv.Key)
	}
	return out
}

func val(s string) json.RawMessage { return json.RawMessage(s) }

func eq[T any](t testing.TB, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s = %#v, want %#v", what, got, want)
	}
}

// checkEvents checks that events are numbered 0..n-1 at one revision and
// returns their keys.
func checkEvents(t testing.TB, evs []schema.Event, rev int64, typ, cause string) []string {
	t.Helper()
	keys := make([]string, 0, len(evs))
	for i, e := range evs {
		if e.Revision != rev || e.OpIndex != i || e.Type != typ || e.Cause != cause {
			t.Fatalf("event %d = %+v, want revision %d op_index %d type %s cause %s", i, e, rev, i, typ, cause)
		}
		if typ == schema.EventDelete && (e.ModRevision != rev || e.CreateRevision != 0 || e.Version != 0 || e.Value != nil) {
			t.Fatalf("delete event %d = %+v: want mod_revision %d, no create_revision/version/value", i, e, rev)
		}
		keys = append(keys, e.Key)
	}
	return keys
}

// checkInvariants checks the state's internal consistency through the
// exported views and against the derived indexes. It returns the first
// violation found.
func checkInvariants(all *State) error {
	var total int64
	var next int64
	hasNext := false
	for _, t := range all.Tenants() {
		s := all.In(t)
		if err := checkSpaceInvariants(s); err != nil {
			if t != DefaultTenant {
				err = fmt.Errorf("tenant %q: %w", t, err)
			}
			return err
		}
		total += int64(s.leases.Len())
		// A moving space's leases are frozen: they have no deadline.
		if e, ok := s.expiry.Min(); ok && s.status == tenantActive && (!hasNext || e.deadline < next) {
			next, hasNext = e.deadline, true
		}
	}
	if total != all.leaseTotal {
		return fmt.Errorf("the spaces hold %d leases, leaseTotal says %d", total, all.leaseTotal)
	}
	if nd, ok := all.NextDeadline(); ok != hasNext || nd != next {
		return fmt.Errorf("NextDeadline = %d, %v; the spaces' first deadline %d, %v", nd, ok, next, hasNext)
	}
	return nil
}

// checkSpaceInvariants checks the invariants of the current space of s.
func checkSpaceInvariants(s *State) error {
	now := s.Now()
	u := s.Usage()
	all := s.Get(GetQuery{IsPrefix: true, Limit: math.MaxInt}, now)
	if all.Revision != s.Revision() {
		return fmt.Errorf("Get revision %d != Revision() %d", all.Revision, s.Revision())
	}
	if all.Count != u.Keys || int64(len(all.KVs)) != u.Keys || all.More {
		return fmt.Errorf("Get all: count %d, %d records, more %v; KeyCount %d", all.Count, len(all.KVs), all.More, u.Keys)
	}
	recs := map[string]schema.KeyValue{}
	leased := 0
	for i, kv := range all.KVs {
		if i > 0 && all.KVs[i-1].Key >= kv.Key {
			return fmt.Errorf("keys out of order: %q then %q", all.KVs[i-1].Key, kv.Key)
		}
		recs[kv.Key] = kv
		if kv.CreateRevision < 1 || kv.CreateRevision > kv.ModRevision || kv.ModRevision > s.Revision() || kv.Version < 1 {
			return fmt.Errorf("key %q: create %d mod %d version %d at revision %d", kv.Key, kv.CreateRevision, kv.ModRevision, kv.Version, s.Revision())
		}
		// The version is not bounded by the revisions since the key's
		// creation: a transaction may write a key more than once at its one
		// revision, and each write counts (TestTxnTwoPutsOfOneKey).
		if kv.Lease == 0 {
			if kv.RemainingMS != nil {
				return fmt.Errorf("unleased key %q has remaining_ms", kv.Key)
			}
			continue
		}
		leased++
		if kv.RemainingMS == nil {
			return fmt.Errorf("leased key %q has no remaining_ms", kv.Key)
		}
		li, err := s.LeaseInfo(kv.Lease, true, now)
		if err != nil {
			return fmt.Errorf("key %q points to lease %d: %v", kv.Key, kv.Lease, err)
		}
		if i := sort.SearchStrings(li.Keys, kv.Key); i == len(li.Keys) || li.Keys[i] != kv.Key {
			return fmt.Errorf("key %q points to lease %d, whose keys %v do not hold it", kv.Key, kv.Lease, li.Keys)
		}
		if *kv.RemainingMS != li.RemainingMS {
			return fmt.Errorf("key %q remaining_ms %d, lease %d remaining_ms %d", kv.Key, *kv.RemainingMS, kv.Lease, li.RemainingMS)
		}
	}

	list := s.LeaseList(true, 0, math.MaxInt, now)
	if list.More {
		return fmt.Errorf("LeaseList with no limit says more")
	}
	var explicit, anon int64
	var attachedKeys int
	var deadlines []deadlineEntry
	for i, sum := range list.Leases {
		if i > 0 && list.Leases[i-1].ID >= sum.ID {
			return fmt.Errorf("leases out of order: %d then %d", list.Leases[i-1].ID, sum.ID)
		}
		if sum.ID <= 0 || sum.ID >= s.nextLeaseID {
			return fmt.Errorf("lease %d outside 1..next id %d", sum.ID, s.nextLeaseID)
		}
		li, err := s.LeaseInfo(sum.ID, true, now)
		if err != nil {
			return fmt.Errorf("listed lease %d: %v", sum.ID, err)
		}
		if int64(len(li.Keys)) != li.KeyCount || li.KeyCount != sum.KeyCount {
			return fmt.Errorf("lease %d: key_count %d (list %d) but %d keys %v", sum.ID, li.KeyCount, sum.KeyCount, len(li.Keys), li.Keys)
		}
		if !sort.StringsAreSorted(li.Keys) {
			return fmt.Errorf("lease %d keys not sorted: %v", sum.ID, li.Keys)
		}
		for _, k := range li.Keys {
			rec, ok := recs[k]
			if !ok {
				return fmt.Errorf("lease %d holds missing key %q", sum.ID, k)
			}
			if rec.Lease != sum.ID {
				return fmt.Errorf("lease %d holds key %q, which points to lease %d", sum.ID, k, rec.Lease)
			}
		}
		attachedKeys += len(li.Keys)
		if li.Anonymous {
			anon++
			// An import may bring an anonymous lease's key in a later chunk.
			if li.KeyCount != 1 && (li.KeyCount != 0 || s.status != tenantImporting) {
				return fmt.Errorf("anonymous lease %d has %d keys", sum.ID, li.KeyCount)
			}
		} else {
			explicit++
		}
		if li.RemainingTTL != li.RemainingMS/1000 || li.RemainingMS < 0 {
			return fmt.Errorf("lease %d: remaining_ttl %d remaining_ms %d", sum.ID, li.RemainingTTL, li.RemainingMS)
		}
		l := s.getLease(sum.ID)
		if want := max(l.deadline-now, 0); li.RemainingMS != want {
			return fmt.Errorf("lease %d: remaining_ms %d, deadline %d at now %d", sum.ID, li.RemainingMS, l.deadline, now)
		}
		if !s.expiry.Has(deadlineEntry{l.deadline, l.id}) {
			return fmt.Errorf("lease %d deadline %d missing from the expiry index", l.id, l.deadline)
		}
		deadlines = append(deadlines, deadlineEntry{l.deadline, l.id})
	}
	if attachedKeys != leased || s.attached.Len() != leased {
		return fmt.Errorf("%d leased keys, leases hold %d, attachment index %d", leased, attachedKeys, s.attached.Len())
	}
	if e, a := u.Leases, u.AnonymousLeases; e != explicit || a != anon {
		return fmt.Errorf("LeaseCount = %d, %d; listed %d explicit, %d anonymous", e, a, explicit, anon)
	}
	if pub := s.LeaseList(false, 0, math.MaxInt, now); int64(len(pub.Leases)) != explicit {
		return fmt.Errorf("LeaseList without anonymous shows %d leases, want %d", len(pub.Leases), explicit)
	}
	if s.expiry.Len() != len(deadlines) {
		return fmt.Errorf("expiry index has %d entries for %d leases", s.expiry.Len(), len(deadlines))
	}

	// Expired and NextDeadline must agree with the leases' deadlines.
	sort.Slice(deadlines, func(i, j int) bool { return lessDeadline(deadlines[i], deadlines[j]) })
	var wantExpired []int64
	for _, d := range deadlines {
		if d.deadline < now {
			wantExpired = append(wantExpired, d.id)
		}
	}
	if got := s.Expired(now, 0); !reflect.DeepEqual(got, wantExpired) {
		return fmt.Errorf("Expired(%d, 0) = %v, want %v", now, got, wantExpired)
	}
	revs, last := int64(0), int64(-1)
	s.hist.byRev.Ascend(func(v *version) bool {
		if v.rev != last {
			revs, last = revs+1, v.rev
		}
		return true
	})
	if revs != s.hist.revs {
		return fmt.Errorf("the change log holds %d revisions, its count says %d", revs, s.hist.revs)
	}
	first, ok := s.expiry.Min()
	if ok != (len(deadlines) > 0) || (ok && first.deadline != deadlines[0].deadline) {
		return fmt.Errorf("first deadline = %d, %v; deadlines %v", first.deadline, ok, deadlines)
	}
	return checkHistory(s)
}

// resultJSON renders everything a Result carries, for comparing the output
// of two replicas.
func resultJSON(r Result) string {
	errText := ""
	if r.Err != nil {
		errText = r.Err.Error()
	}
	b, err := json.Marshal(struct {
		Op      Op
		Reply   any
		Err     string
		Events  []schema.Event
		Expired []ExpiredLease
		Tenant  string `json:",omitempty"`
	}{r.Op, r.Reply, errText, r.Events, r.Expired, r.Tenant})
	if err != nil {
		panic(err)
	}
	return string(b)
}
