package fsm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/concord-io/concord/schema"
)

// After every command of random sequences the invariants hold: keys and
// leases point at each other, key counts match, anonymous leases hold one
// key, Expired/NextDeadline agree with the deadlines, the revision and the
// clock never go back, events are numbered as the contract says, a failed
// command changes nothing but the clock, a transaction takes the branch its
// compares choose and changes only the keys its events name, a
// KeepAliveMany renews exactly the explicit leases it lists, the
// idempotency cache answers, refuses and evicts exactly as an independent
// model of it says, and the change log holds exactly the events applied so
// far above its floor, which moves forward only, and only as far as the
// limits require.
func TestPropertyInvariants(t *testing.T) {
	for _, seed := range []int64{101, 202, 303, 404} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			g := newCmdGen(seed)
			s := New()
			cov := newCoverage()
			m := newIdemModel()
			cm := &changeModel{}
			for i := 0; i < 3000; i++ {
				entry := g.next(s)
				if err := checkStep(s, entry, cov, m, cm); err != nil {
					t.Fatalf("seed %d entry %d: %v", seed, i, err)
				}
			}
			cov.check(t)
			t.Logf("model: evicted %d reapplied %d; change log: %d events, floor %d, moved by count %d, by age %d",
				m.evicted, m.reapplied, len(cm.events), cm.floor, cm.byCount, cm.byAge)
			if m.evicted < 5 || m.reapplied < 5 {
				t.Errorf("idempotency entries evicted %d, keys applied again after eviction %d: too few", m.evicted, m.reapplied)
			}
			if cm.manual < 5 {
				t.Errorf("only %d compactions", cm.manual)
			}
			if cm.byCount < 5 || cm.byAge < 5 {
				t.Errorf("the change-log floor moved by count %d times, by age %d times: too few", cm.byCount, cm.byAge)
			}
		})
	}
}

// changeModel is the test's account of the change log: the events of every
// result applied so far whose revision is above the floor, with the lease
// clock each was applied at.
type changeModel struct {
	events []loggedEvent
	floor  int64
	// Floor moves that the count limit, or the age limit, required, and
	// compactions.
	byCount, byAge, manual int
}

// step takes the result of one command and checks the state's change log
// against the model: exactly the model's events, in order, with their
// times; the floor never back, never past the revision, and moved only as
// far as a limit required; after a write, both limits hold; and Changes from
// the floor returns the whole log.
func (cm *changeModel) step(s *State, r Result) error {
	wrote := r.Err == nil && !r.Cached && len(r.Events) > 0
	if wrote {
		for _, e := range r.Events {
			cm.events = append(cm.events, loggedEvent{e, s.Now()})
		}
	}
	floor, l := s.CompactRevision(), s.Limits()
	if floor < cm.floor || floor > s.Revision() {
		return fmt.Errorf("change-log floor %d after %d, revision %d", floor, cm.floor, s.Revision())
	}
	i := 0
	for i < len(cm.events) && cm.events[i].event.Revision <= floor {
		i++
	}
	if r.Op == OpCompact && r.Err == nil && !r.Cached {
		// An operator's compaction moves the floor to where it says, or
		// nowhere when it is below; the limits have no say.
		if want := max(cm.floor, r.Reply.(*schema.KVCompactReply).CompactRevision); floor != want {
			return fmt.Errorf("compaction left the floor at %d, its reply says %d", floor, want)
		}
		cm.events, cm.floor = cm.events[i:], floor
		cm.manual++
		return nil
	}
	if floor > cm.floor {
		// Every revision has events, so the floor is the revision of the
		// last events dropped; keeping that revision would have broken a
		// limit.
		if i == 0 || cm.events[i-1].event.Revision != floor {
			return fmt.Errorf("change-log floor moved %d -> %d, not to the revision of an event", cm.floor, floor)
		}
		j := i
		for j > 0 && cm.events[j-1].event.Revision == floor {
			j--
		}
		// Keeping revision floor would have kept more revisions than the
		// limit, or one too old.
		overCount := s.Revision()-floor+1 > l.HistoryRevisions
		overAge := cm.events[j].now < s.Now()-l.HistoryAgeMS
		if !overCount && !overAge {
			return fmt.Errorf("change-log floor moved %d -> %d, though revision %d (%d events, recorded at %d) fits in the limits %d revisions / %d ms at revision %d, time %d",
				cm.floor, floor, floor, i-j, cm.events[j].now, l.HistoryRevisions, l.HistoryAgeMS, s.Revision(), s.Now())
		}
		if overCount {
			cm.byCount++
		}
		if overAge {
			cm.byAge++
		}
	}
	cm.events, cm.floor = cm.events[i:], floor
	if wrote && len(cm.events) > 0 && (s.Revision()-floor > l.HistoryRevisions || cm.events[0].now < s.Now()-l.HistoryAgeMS) {
		return fmt.Errorf("after a write the history holds revisions %d..%d, the oldest recorded at %d; limits %d revisions / %d ms at %d",
			floor+1, s.Revision(), cm.events[0].now, l.HistoryRevisions, l.HistoryAgeMS, s.Now())
	}
	if s.hist.byRev.Len() != len(cm.events) {
		return fmt.Errorf("change log holds %d events, the model %d", s.hist.byRev.Len(), len(cm.events))
	}
	var err error
	k := 0
	want := make([]schema.Event, len(cm.events))
	s.hist.byRev.Ascend(func(v *version) bool {
		w := cm.events[k]
		want[k] = w.event
		if v.now != w.now {
			err = fmt.Errorf("logged event %d (%d/%d) recorded at %d, applied at %d", k, v.rev, v.op, v.now, w.now)
		}
		k++
		return err == nil
	})
	if err != nil {
		return err
	}
	return changeLogIs(s, want)
}

// checkStep applies one entry and checks everything that must hold about
// the step and the state after it.
func checkStep(s *State, entry []byte, cov *coverage, m *idemModel, cm *changeModel) error {
	prevRev, prevNow := s.Revision(), s.Now()
	// Taking a snapshot is O(1); it is written only if the step must have
	// changed nothing.
	before := s.Snapshot()
	cmd, decErr := Decode(entry)
	cmdNow := prevNow
	if decErr == nil && cmd.Now > prevNow {
		cmdNow = cmd.Now
	}
	// What the idempotency model expects of a keyed mutating command.
	keyedMut := decErr == nil && cmd.IdempotencyKey != "" && mutates(cmd.Op)
	var hit *modelEntry
	var conflict bool
	if keyedMut {
		if e := m.find(cmd.IdempotencyKey); e != nil {
			hit, conflict = e, !bytes.Equal(e.request, requestBytes(cmd))
			if conflict {
				hit = nil
			}
		}
	}
	// For a transaction: the branch its compares choose, evaluated by the
	// test against the state before it, and the records before it.
	var wantSucceeded bool
	var beforeKVs map[string]schema.KeyValue
	if txn, ok := cmd.Body.(*Txn); decErr == nil && ok {
		wantSucceeded = true
		for _, c := range txn.Compare {
			wantSucceeded = wantSucceeded && modelCompare(s, cmdNow, c)
		}
		beforeKVs = map[string]schema.KeyValue{}
		for _, kv := range getAll(s, cmdNow) {
			beforeKVs[kv.Key] = kv
		}
	}
	// For expires: which listed leases existed, with which deadline.
	deadlines := map[int64]int64{}
	if e, ok := cmd.Body.(*Expire); decErr == nil && ok {
		for _, id := range e.IDs {
			if l := s.getLease(id); l != nil {
				deadlines[id] = l.deadline
			}
		}
	}
	// For a KeepAliveMany: which listed ids were explicit leases, with
	// which ttl.
	type kamLease struct {
		found bool
		ttl   int64
	}
	var kam []kamLease
	if k, ok := cmd.Body.(*KeepAliveMany); decErr == nil && ok {
		for _, id := range k.IDs {
			li, err := s.LeaseInfo(id, false, cmdNow)
			kam = append(kam, kamLease{err == nil && !li.Anonymous, func() int64 {
				if err != nil {
					return 0
				}
				return li.TTL
			}()})
		}
	}
	if decErr == nil && cmd.Now < prevNow {
		cov.rewound++
	}

	r := s.Apply(entry)
	cov.add(r)
	now := s.Now()

	switch {
	case hit != nil:
		raw, _ := r.Reply.(json.RawMessage)
		if r.Err != nil || !r.Cached || !bytes.Equal(raw, hit.reply) {
			return fmt.Errorf("retry of %q: err %v cached %v reply %s; want the cached %s", cmd.IdempotencyKey, r.Err, r.Cached, raw, hit.reply)
		}
	case conflict:
		if !errors.Is(r.Err, ErrIdempotencyConflict) {
			return fmt.Errorf("reuse of %q for another request: err %v cached %v", cmd.IdempotencyKey, r.Err, r.Cached)
		}
	case r.Cached || errors.Is(r.Err, ErrIdempotencyConflict):
		return fmt.Errorf("%v %q: cached %v, err %v, though the model holds no entry for it", cmd.Op, cmd.IdempotencyKey, r.Cached, r.Err)
	}
	if keyedMut && hit == nil && !conflict && r.Err == nil {
		reply, err := replyJSON(r.Reply)
		if err != nil {
			return err
		}
		m.record(cmd.IdempotencyKey, requestBytes(cmd), s.Revision(), reply)
	}
	m.prune(s.Revision(), s.Limits())
	if err := m.matches(s); err != nil {
		return err
	}
	if err := cm.step(s, r); err != nil {
		return err
	}
	if decErr == nil && cmd.Op == OpKeepAliveMany && r.Err != nil && !errors.Is(r.Err, ErrIdempotencyConflict) {
		return fmt.Errorf("keepalive_many failed: %v", r.Err)
	}

	// The clock: max(stamp, previous); untouched by undecodable entries.
	wantNow := prevNow
	if decErr == nil && cmd.Now > prevNow {
		wantNow = cmd.Now
	}
	if now != wantNow {
		return fmt.Errorf("now %d after %d with stamp %d (decode err %v)", now, prevNow, cmd.Now, decErr)
	}
	if s.Revision() < prevRev {
		return fmt.Errorf("revision went back %d -> %d", prevRev, s.Revision())
	}

	if r.Err != nil || r.Cached {
		if r.Events != nil || r.Expired != nil || s.Revision() != prevRev || (r.Err != nil && r.Reply != nil) {
			return fmt.Errorf("%v (err %v, cached %v) produced output or moved the revision: %+v", cmd.Op, r.Err, r.Cached, r)
		}
		// Nothing but the clock changed: the state equals the previous one
		// after a tick at the same stamp. The change log is left out of the
		// comparison (writing it out at every failed step made this test
		// quadratic in the log's length): cm.step above has checked its
		// events against the model, which adds nothing for this step, and
		// its floor and length are compared below.
		var buf bytes.Buffer
		if _, err := withoutChangeLog(before).WriteTo(&buf); err != nil {
			return err
		}
		want := New()
		if err := want.Restore(&buf); err != nil {
			return err
		}
		if decErr == nil {
			want.ApplyCommand(Command{Op: OpExpire, Now: cmd.Now, Body: &Expire{}})
		}
		var got bytes.Buffer
		if _, err := withoutChangeLog(s.Snapshot()).WriteTo(&got); err != nil {
			return err
		}
		if !bytes.Equal(got.Bytes(), snapBytes(want)) {
			return fmt.Errorf("%v (err %v, cached %v) changed the state", cmd.Op, r.Err, r.Cached)
		}
		// Nor trimmed the log (a tick does not either).
		if s.CompactRevision() != before.hist.floor || s.hist.byKey.Len() != before.hist.byKey.Len() {
			return fmt.Errorf("%v (err %v, cached %v) changed the history: floor %d -> %d, %d -> %d versions",
				cmd.Op, r.Err, r.Cached, before.hist.floor, s.CompactRevision(), before.hist.byKey.Len(), s.hist.byKey.Len())
		}
		return checkInvariants(s)
	}

	// Events: consecutive new revisions, op_index from 0 at each.
	rev, idx := prevRev, 0
	for i, e := range r.Events {
		switch {
		case e.Revision == rev && i > 0:
			idx++
		case e.Revision == rev+1:
			rev, idx = rev+1, 0
		default:
			return fmt.Errorf("event %d at revision %d after revision %d", i, e.Revision, rev)
		}
		if e.OpIndex != idx || e.ModRevision != e.Revision {
			return fmt.Errorf("event %d: op_index %d (want %d), mod_revision %d at revision %d", i, e.OpIndex, idx, e.ModRevision, e.Revision)
		}
	}
	if s.Revision() != rev {
		return fmt.Errorf("%v: events reach revision %d, state is at %d", cmd.Op, rev, s.Revision())
	}

	switch b := cmd.Body.(type) {
	case *Put:
		if len(r.Events) != 1 || s.Revision() != prevRev+1 {
			return fmt.Errorf("put: %d events, revision %d -> %d", len(r.Events), prevRev, s.Revision())
		}
		kv := s.Get(GetQuery{Key: b.Key}, now).KVs
		if len(kv) != 1 || kv[0].ModRevision != s.Revision() || kv[0].Lease != r.Events[0].Lease {
			return fmt.Errorf("put %q: record %+v, event %+v", b.Key, kv, r.Events[0])
		}
		if b.Lease != 0 && kv[0].Lease != b.Lease {
			return fmt.Errorf("put %q to lease %d attached it to %d", b.Key, b.Lease, kv[0].Lease)
		}
		if b.TTL > 0 {
			li, err := s.LeaseInfo(kv[0].Lease, false, now)
			if err != nil || !li.Anonymous || li.TTL != b.TTL || li.RemainingMS != b.TTL*1000 {
				return fmt.Errorf("ttl put %q: lease %+v, %v", b.Key, li, err)
			}
		}
		if b.Lease == 0 && b.TTL == 0 && kv[0].Lease != 0 {
			return fmt.Errorf("plain put %q left it on lease %d", b.Key, kv[0].Lease)
		}
	case *Delete:
		rep := r.Reply.(*schema.KVDeleteReply)
		if int(rep.Deleted) != len(r.Events) || rep.Revision != s.Revision() {
			return fmt.Errorf("delete: reply %+v with %d events", rep, len(r.Events))
		}
		if b.PrevKV && len(rep.PrevKVs) != len(r.Events) {
			return fmt.Errorf("delete: %d prev_kvs for %d deletes", len(rep.PrevKVs), len(r.Events))
		}
		if len(r.Events) == 0 && s.Revision() != prevRev {
			return fmt.Errorf("a delete of nothing moved the revision")
		}
	case *Expire:
		var keys int64
		gone := map[int64]bool{}
		for _, x := range r.Expired {
			d, existed := deadlines[x.ID]
			if !existed || d != x.Deadline || x.Deadline >= now {
				return fmt.Errorf("expired lease %+v: existed %v deadline %d now %d", x, existed, d, now)
			}
			keys += x.Keys
			gone[x.ID] = true
		}
		if keys != int64(len(r.Events)) {
			return fmt.Errorf("expire: %d keys reported, %d events", keys, len(r.Events))
		}
		for id, d := range deadlines {
			_, err := s.LeaseInfo(id, false, now)
			if gone[id] != (err != nil) {
				return fmt.Errorf("lease %d: reported expired %v, still there %v", id, gone[id], err == nil)
			}
			if !gone[id] && d < now {
				return fmt.Errorf("lease %d with deadline %d survived an expire at %d", id, d, now)
			}
		}
	case *Revoke:
		rep := r.Reply.(*schema.LeaseRevokeReply)
		if int(rep.Deleted) != len(r.Events) || rep.Revision != s.Revision() {
			return fmt.Errorf("revoke: reply %+v with %d events", rep, len(r.Events))
		}
	case *Txn:
		if err := checkTxnStep(s, b, r, prevRev, wantSucceeded, beforeKVs); err != nil {
			return err
		}
	case *KeepAliveMany:
		want := &schema.LeaseKeepAliveManyReply{Leases: []schema.LeaseKeepAliveReply{}, NotFound: []int64{}}
		for i, id := range b.IDs {
			if !kam[i].found {
				want.NotFound = append(want.NotFound, id)
				continue
			}
			ttl := kam[i].ttl
			want.Leases = append(want.Leases, schema.LeaseKeepAliveReply{ID: id, TTL: ttl, RemainingTTL: ttl, RemainingMS: ttl * 1000})
			if li, err := s.LeaseInfo(id, false, now); err != nil || li.RemainingMS != ttl*1000 || li.TTL != ttl {
				return fmt.Errorf("keepalive_many of %d with ttl %d: lease now %+v, %v", id, ttl, li, err)
			}
		}
		if !reflect.DeepEqual(r.Reply, want) {
			return fmt.Errorf("keepalive_many %v: reply %+v, want %+v", b.IDs, r.Reply, want)
		}
		if len(r.Events) != 0 || s.Revision() != prevRev {
			return fmt.Errorf("%v changed keys", cmd.Op)
		}
	case *Grant, *KeepAlive, *Limits:
		if len(r.Events) != 0 || s.Revision() != prevRev {
			return fmt.Errorf("%v changed keys", cmd.Op)
		}
	}
	return checkInvariants(s)
}

// withoutChangeLog is a snapshot as it would be with its change history
// dropped: no events, the floor at the revision.
func withoutChangeLog(sn *Snapshot) *Snapshot {
	c := *sn
	c.hist = newHistory()
	c.hist.floor = sn.revision
	return &c
}

func snapBytes(s *State) []byte {
	var buf bytes.Buffer
	if _, err := s.Snapshot().WriteTo(&buf); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// checkTxnStep checks a transaction that applied: the branch its compares
// chose, one response per operation of that branch, all at the resulting
// revision, at most one new revision, and that exactly the keys its events
// name changed, to what its last event for each says.
func checkTxnStep(s *State, b *Txn, r Result, prevRev int64, wantSucceeded bool, beforeKVs map[string]schema.KeyValue) error {
	rep, ok := r.Reply.(*schema.KVTxnReply)
	if !ok {
		return fmt.Errorf("txn reply %T", r.Reply)
	}
	if rep.Succeeded != wantSucceeded {
		return fmt.Errorf("txn %+v: succeeded %v, the compares say %v", b.Compare, rep.Succeeded, wantSucceeded)
	}
	branch := b.Success
	if !rep.Succeeded {
		branch = b.Failure
	}
	if rep.Revision != s.Revision() || len(rep.Responses) != len(branch) {
		return fmt.Errorf("txn reply at %d with %d responses; state at %d, branch of %d", rep.Revision, len(rep.Responses), s.Revision(), len(branch))
	}
	for i, op := range branch {
		resp := rep.Responses[i]
		switch {
		case op.Put != nil && resp.Put != nil && resp.Get == nil && resp.Delete == nil:
			if resp.Put.Revision != rep.Revision {
				return fmt.Errorf("txn put response %d at %d", i, resp.Put.Revision)
			}
		case op.Get != nil && resp.Get != nil && resp.Put == nil && resp.Delete == nil:
			if resp.Get.Revision != rep.Revision || resp.Get.Count < int64(len(resp.Get.KVs)) {
				return fmt.Errorf("txn get response %d: %+v", i, resp.Get)
			}
		case op.Delete != nil && resp.Delete != nil && resp.Put == nil && resp.Get == nil:
			if resp.Delete.Revision != rep.Revision || (op.Delete.Limit > 0 && resp.Delete.Deleted > op.Delete.Limit) {
				return fmt.Errorf("txn delete response %d: %+v (limit %d)", i, resp.Delete, op.Delete.Limit)
			}
		default:
			return fmt.Errorf("txn response %d = %+v for operation %+v", i, resp, op)
		}
	}
	want := prevRev
	if len(r.Events) > 0 {
		want++
	}
	if s.Revision() != want {
		return fmt.Errorf("txn with %d events moved the revision %d -> %d", len(r.Events), prevRev, s.Revision())
	}
	// A delete's tombstone says "txn" when its operation was marked.
	marked, unmarked := false, false
	for _, op := range branch {
		if op.Delete != nil {
			marked, unmarked = marked || op.Delete.ByTxn, unmarked || !op.Delete.ByTxn
		}
	}
	last := map[string]schema.Event{}
	for _, e := range r.Events {
		if e.Revision != want {
			return fmt.Errorf("txn event %+v not at revision %d", e, want)
		}
		if e.Type == schema.EventDelete && ((e.Cause == schema.CauseTxn && !marked) || (e.Cause == schema.CauseDelete && !unmarked) ||
			(e.Cause != schema.CauseTxn && e.Cause != schema.CauseDelete)) {
			return fmt.Errorf("txn delete event %+v: cause %q, with deletes marked %v, unmarked %v", e, e.Cause, marked, unmarked)
		}
		last[e.Key] = e
	}
	after := map[string]schema.KeyValue{}
	for _, kv := range getAll(s, s.Now()) {
		after[kv.Key] = kv
	}
	for k, e := range last {
		kv, exists := after[k]
		switch {
		case e.Type == schema.EventDelete && exists:
			return fmt.Errorf("txn deleted %q last, and it exists: %+v", k, kv)
		case e.Type == schema.EventPut && (!exists || kv.ModRevision != want || kv.Version != e.Version ||
			kv.CreateRevision != e.CreateRevision || kv.Lease != e.Lease || !bytes.Equal(kv.Value, e.Value)):
			return fmt.Errorf("txn put %q last (%+v), the record is %+v (exists %v)", k, e, kv, exists)
		}
	}
	for k, kv := range after {
		if _, touched := last[k]; !touched && !equalKV(kv, beforeKVs[k]) {
			return fmt.Errorf("txn changed %q without an event: %+v -> %+v", k, beforeKVs[k], kv)
		}
	}
	for k := range beforeKVs {
		if _, touched := last[k]; !touched {
			if _, ok := after[k]; !ok {
				return fmt.Errorf("txn removed %q without an event", k)
			}
		}
	}
	return nil
}

func equalKV(a, b schema.KeyValue) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// modelCompare is the test's reading of a compare, through the exported
// views: an absent key reads as exists 0, null, and 0 for every integer;
// ttl is the whole seconds left on the key's lease at now.
func modelCompare(s *State, now int64, c Compare) bool {
	var kv *schema.KeyValue
	if kvs := s.Get(GetQuery{Key: c.Key}, now).KVs; len(kvs) == 1 {
		kv = &kvs[0]
	}
	value := json.RawMessage("null")
	if kv != nil {
		value = kv.Value
	}
	switch c.Target {
	case TargetValue:
		return compareJSON(c.Op, value, c.Value)
	case TargetField:
		return compareJSON(c.Op, jsonPointer(value, c.Path), c.Value)
	}
	n := modelInt(kv, c.Target)
	d := 1
	switch {
	case n < c.Int:
		d = 0
	case n > c.Int:
		d = 2
	}
	return cmpTruth[c.Op][d]
}

// modelInt is the integer a compare target reads from a record seen
// through the exported views (nil: the key is absent).
func modelInt(kv *schema.KeyValue, target Target) int64 {
	if kv == nil {
		return 0
	}
	switch target {
	case TargetExists:
		return 1
	case TargetVersion:
		return kv.Version
	case TargetCreateRevision:
		return kv.CreateRevision
	case TargetModRevision:
		return kv.ModRevision
	case TargetLease:
		return kv.Lease
	case TargetTTL:
		if kv.RemainingMS != nil {
			return *kv.RemainingMS / 1000
		}
	}
	return 0
}

// idemModel is the test's own model of the idempotency cache: the keyed
// requests that applied, oldest first, with the JSON of their replies,
// pruned by the limits after every command.
type idemModel struct {
	entries   []modelEntry
	seen      map[string]bool // keys ever recorded
	evicted   int
	reapplied int // keys recorded again after their entry was evicted
}

type modelEntry struct {
	key      string
	request  []byte
	revision int64
	reply    []byte
}

func newIdemModel() *idemModel { return &idemModel{seen: map[string]bool{}} }

func (m *idemModel) find(key string) *modelEntry {
	for i := range m.entries {
		if m.entries[i].key == key {
			return &m.entries[i]
		}
	}
	return nil
}

func (m *idemModel) record(key string, request []byte, revision int64, reply []byte) {
	if m.seen[key] {
		m.reapplied++
	}
	m.seen[key] = true
	m.entries = append(m.entries, modelEntry{key, request, revision, reply})
}

func (m *idemModel) prune(revision int64, l Limits) {
	for len(m.entries) > 0 && (int64(len(m.entries)) > l.IdempotencyEntries || m.entries[0].revision < revision-l.IdempotencyRevisions) {
		m.entries = m.entries[1:]
		m.evicted++
	}
}

// matches compares the model with the state's cache, entry by entry.
func (m *idemModel) matches(s *State) error {
	if s.IdempotencyCount() != len(m.entries) {
		return fmt.Errorf("idempotency cache holds %d entries, the model %d", s.IdempotencyCount(), len(m.entries))
	}
	i := 0
	var err error
	s.idemBySeq.Ascend(func(e *idemEntry) bool {
		w := m.entries[i]
		if e.key != w.key || e.revision != w.revision || !bytes.Equal(e.reply, w.reply) {
			err = fmt.Errorf("idempotency entry %d: %q at %d %s; the model has %q at %d %s", i, e.key, e.revision, e.reply, w.key, w.revision, w.reply)
		}
		i++
		return err == nil
	})
	if err == nil {
		err = checkIdempotency(s)
	}
	return err
}

// requestBytes identifies a request as the model sees it: the op and the
// encoded body, without stamp or key.
func requestBytes(c Command) []byte {
	data, err := Encode(0, c.Body)
	if err != nil {
		panic(err)
	}
	return append([]byte{byte(c.Op)}, data[headerLen:]...)
}

// replyJSON encodes a reply as the cache must hold it: as the service
// sends it, without HTML escaping.
func replyJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
