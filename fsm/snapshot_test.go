package fsm

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/concord-io/concord/schema"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// The golden files: v1 was written by the first release of the format and
// must restore in every later version; v2 adds the idempotency cache; v3
// adds the change log and its floor.
const (
	goldenV1 = "testdata/snapshot-v1.golden"
	goldenV2 = "testdata/snapshot-v2.golden"
	goldenV3 = "testdata/snapshot-v3.golden"
	goldenV4 = "testdata/snapshot-v4.golden"
	goldenV5 = "testdata/snapshot-v5.golden"
)

// goldenSteps is the fixed command sequence behind snapshot-v1.golden. Its
// end state is spelled out by hand in TestSnapshotGoldenRestore.
func goldenSteps() []step {
	return []step{
		{t0, &Limits{MaxLeases: 1000, MaxKeysPerLease: 100}},
		{t0, &Grant{TTL: 10, Metadata: val(`{"owner":"svc <api> & co"}`)}},                                // lease 1, deadline t0+10_000
		{t0 + 100, &Grant{ID: 7, TTL: 30}},                                                                // lease 7; counter -> 8
		{t0 + 200, &Grant{TTL: 5}},                                                                        // lease 8, revoked below
		{t0 + 300, &Put{Key: "svc.api.n1", Value: val(`{"addr":"10.0.0.5"}`), Lease: 1}},                  // rev 1
		{t0 + 400, &Put{Key: "svc.api.n2", Value: val(`{"addr":"10.0.0.6","tags":["a","b"]}`), Lease: 1}}, // rev 2
		{t0 + 500, &Put{Key: "cfg.a", Value: val(`1`)}},                                                   // rev 3
		{t0 + 600, &Put{Key: "cfg.a", Value: val(`"two"`)}},                                               // rev 4
		{t0 + 700, &Put{Key: "tmp.x", Value: val(`{"note":"<&>"}`), TTL: 20}},                             // rev 5, anonymous lease 9
		{t0 + 800, &Put{Key: "svc.db", Value: val(`"primary"`), Lease: 7}},                                // rev 6
		{t0 + 900, &Delete{Key: "cfg.b"}},                                                                 // nothing
		{t0 + 1_000, &Put{Key: "cfg.b", Value: val(`null`)}},                                              // rev 7
		{t0 + 1_100, &Delete{Key: "cfg.b"}},                                                               // rev 8
		{t0 + 1_200, &Revoke{ID: 8}},                                                                      // no keys: no revision
		{t0 + 2_000, &KeepAlive{ID: 7, TTL: 60}},                                                          // deadline t0+62_000
		{t0 + 2_100, &Put{Key: "gone.k", Value: val(`1`), TTL: 1}},                                        // rev 9, anonymous lease 10
		{t0 + 4_000, &Expire{IDs: []int64{10}}},                                                           // rev 10
		{t0 + 5_000, &Expire{}},                                                                           // tick
	}
}

// goldenStepsV2 extends the v1 sequence with commands that fill the
// idempotency cache.
func goldenStepsV2() []step {
	return append(goldenSteps(),
		step{t0 + 5_100, Command{Op: OpPut, IdempotencyKey: "client-1:req-1", Body: &Put{Key: "idem.a", Value: val(`{"n":1}`)}}}, // rev 11
		step{t0 + 5_200, Command{Op: OpTxn, IdempotencyKey: "client-1:req-2", Body: &Txn{
			Compare: []Compare{{Key: "idem.b", Target: TargetCreateRevision, Op: CmpEq, Int: 0}},
			Success: []TxnOp{{Put: &Put{Key: "idem.b", Value: val(`"<b>"`)}}, {Get: &GetQuery{Key: "idem.a", Limit: 10}}},
		}}}, // rev 12
	)
}

// goldenStepsV3 extends the v2 sequence with a keyed KeepAliveMany and
// writes under limits small enough that the change log drops its oldest
// revisions by age and by count. The end state is spelled out by hand in
// TestSnapshotGoldenV3Restore.
func goldenStepsV3() []step {
	return append(goldenStepsV2(),
		// Renews 7 and 1; 42 was never granted, 9 is anonymous.
		step{t0 + 5_300, Command{Op: OpKeepAliveMany, IdempotencyKey: "client-1:req-3", Body: &KeepAliveMany{IDs: []int64{7, 42, 1, 9}}}},
		step{t0 + 5_400, &Limits{MaxLeases: 1000, MaxKeysPerLease: 100, HistoryRevisions: 6, HistoryAgeMS: 4_000}},
		// rev 13: revisions 1..8 (stamped before t0+1_500) are too old.
		step{t0 + 5_500, &Put{Key: "v3.a", Value: val(`{"n":3,"s":"<&>"}`)}},
		// rev 14, two events: 7 events, so revision 9 goes.
		step{t0 + 5_600, &Revoke{ID: 1}},
		// rev 15, two events: 8 events, so revisions 10 and 11 go.
		step{t0 + 5_700, &Delete{Key: "idem.", IsPrefix: true}},
	)
}

// goldenStepsV4 are the v3 steps with the history's limits as version 4
// counts them, in revisions: the last four, none older than 4 s.
func goldenStepsV4() []step {
	steps := goldenStepsV3()
	n := len(goldenStepsV2())
	steps = append(steps[:n+1:n+1],
		step{t0 + 5_400, &Limits{MaxLeases: 1000, MaxKeysPerLease: 100, HistoryRevisions: 4, HistoryAgeMS: 4_000}},
		// rev 13: revisions 1..8 (stamped before t0+1_500) are too old.
		step{t0 + 5_500, &Put{Key: "v3.a", Value: val(`{"n":3,"s":"<&>"}`)}},
		// rev 14: the last four are 11..14, so revisions 9 and 10 go.
		step{t0 + 5_600, &Revoke{ID: 1}},
		// rev 15: revision 11 goes.
		step{t0 + 5_700, &Delete{Key: "idem.", IsPrefix: true}},
	)
	return steps
}

// dropChangeHistory makes s what restoring a snapshot of it without a
// change log (versions 1 and 2) gives: no events, the floor at the
// revision.
func dropChangeHistory(s *State) *State {
	s.hist = newHistory()
	s.hist.floor = s.Revision()
	return s
}

func goldenState(t testing.TB) *State {
	s := New()
	run(t, s, goldenSteps()...)
	return s
}

func readGolden(t testing.TB) []byte { return readGoldenFile(t, goldenV1) }

func readGoldenFile(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./fsm -run TestSnapshotGoldenWrite -update to create it)", err)
	}
	return data
}

// The snapshot of the v4 golden sequence is byte for byte the v5 golden
// file: the current encoding has not changed. If it must change, bump
// SnapshotVersion, add a new golden file, and keep the old ones and their
// restore tests. -update rewrites only the current version's file.
func TestSnapshotGoldenWrite(t *testing.T) {
	s := New()
	run(t, s, goldenStepsV4()...)
	got := snap(t, s)
	if *update {
		if err := os.MkdirAll(filepath.Dir(goldenV5), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(goldenV5, got, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", goldenV5)
	}
	if want := readGoldenFile(t, goldenV5); !bytes.Equal(got, want) {
		t.Fatalf("snapshot differs from %s:\ngot:  %q\nwant: %q", goldenV5, got, want)
	}
	eq(t, "golden file of the current version", SnapshotVersion, 5)
}

// Version 4 is still written on request, byte for byte as before: the
// same steps give the v4 golden file.
func TestSnapshotGoldenWriteV4(t *testing.T) {
	s := New()
	run(t, s, goldenStepsV4()...)
	var buf bytes.Buffer
	n, err := s.Snapshot().WriteVersion(&buf, 4)
	if err != nil || n != int64(buf.Len()) {
		t.Fatalf("WriteVersion(4): %d bytes of %d, %v", n, buf.Len(), err)
	}
	if want := readGoldenFile(t, goldenV4); !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("version 4 differs from %s:\ngot:\n%s\nwant:\n%s", goldenV4, buf.Bytes(), want)
	}
	for _, v := range []int{0, 1, 2, 3, 6} {
		if _, err := s.Snapshot().WriteVersion(io.Discard, v); !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("WriteVersion(%d): %v, want ErrBadSnapshot", v, err)
		}
	}
}

// The v2 golden restores with its idempotency cache: a retry gets the
// remembered reply and changes nothing, a reused key with another request
// is refused, and the file writes back as the current version of the state
// the v2 steps build, less the change history it did not carry.
func TestSnapshotGoldenV2Restore(t *testing.T) {
	data := readGoldenFile(t, goldenV2)
	s := restored(t, data)
	eq(t, "revision", s.Revision(), int64(12))
	eq(t, "idempotency entries", s.IdempotencyCount(), 2)
	eq(t, "limits", s.Limits(), Limits{MaxLeases: 1000, MaxKeysPerLease: 100, IdempotencyEntries: 100_000, IdempotencyRevisions: 10_000,
		HistoryRevisions: 1_000_000, HistoryAgeMS: 86_400_000})
	built := New()
	run(t, built, goldenStepsV2()...)
	eq(t, "rewritten", string(snap(t, s)), string(snap(t, dropChangeHistory(built))))
	eq(t, "digest", stateDigest(s), stateDigest(built))
	// No change log: the history before the snapshot is unknown.
	eq(t, "floor", s.CompactRevision(), int64(12))
	checkChangeLog(t, s, nil)
	for _, pos := range [][2]int64{{0, -1}, {11, -1}, {11, 0}, {12, 0}} {
		mustCompacted(t, s, pos[0], int(pos[1]))
	}

	steps := goldenStepsV2()
	retry := steps[len(steps)-1].body.(Command)
	retry.Now = t0 + 6_000
	r := s.ApplyCommand(retry)
	if r.Err != nil || !r.Cached || len(r.Events) != 0 {
		t.Fatalf("retry after restore: %+v", r)
	}
	eq(t, "cached reply", string(r.Reply.(json.RawMessage)),
		`{"succeeded":true,"revision":12,"responses":[{"put":{"revision":12}},{"get":{"revision":12,"kvs":[{"key":"idem.a","value":{"n":1},"create_revision":11,"mod_revision":11,"version":1}],"count":1,"more":false}}]}`)
	eq(t, "revision after retry", s.Revision(), int64(12))
	other := Command{Op: OpPut, Now: t0 + 6_000, IdempotencyKey: "client-1:req-1", Body: &Put{Key: "idem.a", Value: val(`2`)}}
	if r := s.ApplyCommand(other); !errors.Is(r.Err, ErrIdempotencyConflict) {
		t.Fatalf("reused key with another request: %+v", r)
	}
	checkChangeLog(t, s, nil)
	// The log starts at the floor.
	r = mustApply(t, s, t0+6_100, &Put{Key: "after", Value: val(`1`)})
	checkChangeLog(t, s, r.Events)
	eq(t, "read from the floor", changesFrom(t, s, 12, -1, 10).Events, r.Events)
}

// The v3 golden restores: its change log is checked and dropped, since it
// lacks the versions keys had at its floor that reads at a past revision
// need; the history starts at the snapshot's revision. It remembers the
// KeepAliveMany reply, and writes back as the v4 snapshot of the same
// state without history.
func TestSnapshotGoldenV3Restore(t *testing.T) {
	data := readGoldenFile(t, goldenV3)
	s := restored(t, data)
	eq(t, "revision", s.Revision(), int64(15))
	eq(t, "now", s.Now(), int64(t0+5_700))
	built := New()
	run(t, built, goldenStepsV3()...)
	eq(t, "rewritten", string(snap(t, s)), string(snap(t, dropChangeHistory(built))))
	eq(t, "digest", stateDigest(s), stateDigest(built))
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
	eq(t, "floor", s.CompactRevision(), int64(15))
	checkChangeLog(t, s, nil)
	for _, pos := range [][2]int64{{0, -1}, {11, -1}, {14, 0}, {15, 0}} {
		mustCompacted(t, s, pos[0], int(pos[1]))
	}
	retry := goldenStepsV3()[len(goldenStepsV2())].body.(Command)
	retry.Now = t0 + 6_000
	mustCached(t, s, t0+6_000, retry, []byte(`{"leases":[{"id":7,"ttl":60,"remaining_ttl":60,"remaining_ms":60000},{"id":1,"ttl":10,"remaining_ttl":10,"remaining_ms":10000}],"not_found":[42,9]}`))
	r := mustApply(t, s, t0+6_100, &Put{Key: "after", Value: val(`1`)})
	checkChangeLog(t, s, r.Events)
	eq(t, "read from the floor", changesFrom(t, s, 15, -1, 10).Events, r.Events)
}

// The v4 golden restores with its history and its floor, exactly as
// written down here, answers Changes from it, remembers the KeepAliveMany
// reply, and writes back to the same bytes, and to the v5 golden file in
// the current version.
func TestSnapshotGoldenV4Restore(t *testing.T) {
	testSnapshotGoldenV4State(t, goldenV4)
}

// The v5 golden file is the same state as the v4 one, and restores to it.
func TestSnapshotGoldenV5Restore(t *testing.T) {
	testSnapshotGoldenV4State(t, goldenV5)
}

func testSnapshotGoldenV4State(t *testing.T, path string) {
	data := readGoldenFile(t, path)
	s := restored(t, data)
	const now = t0 + 5_700
	eq(t, "revision", s.Revision(), int64(15))
	eq(t, "now", s.Now(), int64(now))
	eq(t, "limits", s.Limits(), Limits{MaxLeases: 1000, MaxKeysPerLease: 100, IdempotencyEntries: 100_000, IdempotencyRevisions: 10_000,
		HistoryRevisions: 4, HistoryAgeMS: 4_000})
	var v4 bytes.Buffer
	if _, err := s.Snapshot().WriteVersion(&v4, 4); err != nil {
		t.Fatal(err)
	}
	eq(t, "rewritten in version 4", v4.String(), string(readGoldenFile(t, goldenV4)))
	eq(t, "rewritten", string(snap(t, s)), string(readGoldenFile(t, goldenV5)))
	built := New()
	run(t, built, goldenStepsV4()...)
	eq(t, "digest", stateDigest(s), stateDigest(built))
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}

	// The change log: revisions 12..15, six events; 1..11 are compacted.
	eq(t, "floor", s.CompactRevision(), int64(11))
	put := func(key, value string, rev, create, version int64, ms int64) loggedEvent {
		return loggedEvent{schema.Event{Type: schema.EventPut, Key: key, Value: val(value), Revision: rev, CreateRevision: create,
			ModRevision: rev, Version: version, Cause: schema.CausePut}, t0 + ms}
	}
	del := func(key string, rev int64, op int, lease int64, cause string, ms int64) loggedEvent {
		return loggedEvent{deleteEvent(key, rev, op, lease, cause), t0 + ms}
	}
	want := []loggedEvent{
		put("idem.b", `"<b>"`, 12, 12, 1, 5_200),
		put("v3.a", `{"n":3,"s":"<&>"}`, 13, 13, 1, 5_500),
		del("svc.api.n1", 14, 0, 1, schema.CauseLeaseRevoked, 5_600),
		del("svc.api.n2", 14, 1, 1, schema.CauseLeaseRevoked, 5_600),
		del("idem.a", 15, 0, 0, schema.CauseDelete, 5_700),
		del("idem.b", 15, 1, 0, schema.CauseDelete, 5_700),
	}
	eq(t, "change log", loggedEvents(s), want)
	var wantEvents []schema.Event
	for _, w := range want {
		wantEvents = append(wantEvents, w.event)
	}
	checkChangeLog(t, s, wantEvents)

	// Changes answers from it.
	r := changesFrom(t, s, 11, -1, 100)
	eq(t, "all", r.Events, wantEvents)
	eq(t, "all: next", [3]any{r.NextRevision, r.NextOpIndex, r.More}, [3]any{int64(15), -1, false})
	eq(t, "all: floor", r.CompactRevision, int64(11))
	r = changesFrom(t, s, 14, 0, 2)
	eq(t, "after (14, 0), two", r.Events, wantEvents[3:5])
	eq(t, "after (14, 0), two: next", [3]any{r.NextRevision, r.NextOpIndex, r.More}, [3]any{int64(15), 0, true})
	r = changesFrom(t, s, 13, -1, 2)
	eq(t, "after 13, two: the whole of revision 14", r.Events, wantEvents[2:4])
	eq(t, "after 13, two: next", [3]any{r.NextRevision, r.NextOpIndex, r.More}, [3]any{int64(14), -1, true})
	r, err := s.Changes(ChangesQuery{Key: "idem.b", AfterRevision: 11, AfterOpIndex: -1, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "idem.b", r.Events, []schema.Event{wantEvents[0], wantEvents[5]})
	r, err = s.Changes(ChangesQuery{Key: "svc.", IsPrefix: true, AfterRevision: 11, AfterOpIndex: -1, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "svc.", r.Events, wantEvents[2:4])
	for _, pos := range [][2]int64{{0, -1}, {10, -1}, {10, 5}, {11, 0}} {
		mustCompacted(t, s, pos[0], int(pos[1]))
	}

	// The leases the KeepAliveMany renewed, and its remembered reply.
	eq(t, "lease 7 deadline", s.getLease(7).deadline, int64(t0+5_300+60_000))
	leaseGone(t, s, 1)
	retry := goldenStepsV4()[len(goldenStepsV2())].body.(Command)
	retry.Now = t0 + 6_000
	cr := mustCached(t, s, t0+6_000, retry, []byte(`{"leases":[{"id":7,"ttl":60,"remaining_ttl":60,"remaining_ms":60000},{"id":1,"ttl":10,"remaining_ttl":10,"remaining_ms":10000}],"not_found":[42,9]}`))
	eq(t, "cached: no events", len(cr.Events), 0)
	eq(t, "lease 7 not renewed again", s.getLease(7).deadline, int64(t0+5_300+60_000))
	eq(t, "log after the retry", loggedEvents(s), want)

	// The restored state keeps the log going under its limits: one more
	// event, and revision 12 goes.
	r2 := mustApply(t, s, t0+6_100, &Put{Key: "v3.b", Value: val(`2`)})
	checkChangeLog(t, s, append(wantEvents[1:], r2.Events...))
	eq(t, "floor after one more", s.CompactRevision(), int64(12))
}

// Restoring the golden file gives exactly the state written down here.
func TestSnapshotGoldenRestore(t *testing.T) {
	data := readGolden(t)
	s := restored(t, data)
	const now = t0 + 5_000

	eq(t, "revision", s.Revision(), int64(10))
	eq(t, "now", s.Now(), int64(now))
	// v1 had no idempotency or change-log limits: the defaults apply.
	eq(t, "limits", s.Limits(), Limits{MaxLeases: 1000, MaxKeysPerLease: 100, IdempotencyEntries: 100_000, IdempotencyRevisions: 10_000,
		HistoryRevisions: 1_000_000, HistoryAgeMS: 86_400_000})
	e, a := s.LeaseCount()
	eq(t, "lease count", [2]int64{e, a}, [2]int64{2, 1})

	eq(t, "records", getAll(s, now), []schema.KeyValue{
		{Key: "cfg.a", Value: val(`"two"`), CreateRevision: 3, ModRevision: 4, Version: 2},
		{Key: "svc.api.n1", Value: val(`{"addr":"10.0.0.5"}`), CreateRevision: 1, ModRevision: 1, Version: 1, Lease: 1, RemainingMS: i64(5_000)},
		{Key: "svc.api.n2", Value: val(`{"addr":"10.0.0.6","tags":["a","b"]}`), CreateRevision: 2, ModRevision: 2, Version: 1, Lease: 1, RemainingMS: i64(5_000)},
		{Key: "svc.db", Value: val(`"primary"`), CreateRevision: 6, ModRevision: 6, Version: 1, Lease: 7, RemainingMS: i64(57_000)},
		{Key: "tmp.x", Value: val(`{"note":"<&>"}`), CreateRevision: 5, ModRevision: 5, Version: 1, Lease: 9, RemainingMS: i64(15_700)},
	})

	// Leases, with their remaining time at the stored now.
	type leaseWant struct {
		info     schema.LeaseInfo
		metadata any
	}
	wantLeases := []leaseWant{
		{schema.LeaseInfo{ID: 1, TTL: 10, RemainingTTL: 5, RemainingMS: 5_000, GrantedRevision: 0, KeyCount: 2,
			Keys: []string{"svc.api.n1", "svc.api.n2"}}, map[string]any{"owner": "svc <api> & co"}},
		{schema.LeaseInfo{ID: 7, TTL: 60, RemainingTTL: 57, RemainingMS: 57_000, GrantedRevision: 0, KeyCount: 1,
			Keys: []string{"svc.db"}}, map[string]any{}},
		{schema.LeaseInfo{ID: 9, TTL: 20, RemainingTTL: 15, RemainingMS: 15_700, GrantedRevision: 5, Anonymous: true, KeyCount: 1,
			Keys: []string{"tmp.x"}}, map[string]any{}},
	}
	list := s.LeaseList(true, 0, 100, now).Leases
	eq(t, "lease ids", len(list), len(wantLeases))
	for i, w := range wantLeases {
		li := info(t, s, w.info.ID)
		var md any
		if err := json.Unmarshal(li.Metadata, &md); err != nil {
			t.Fatalf("lease %d metadata %s: %v", w.info.ID, li.Metadata, err)
		}
		eq(t, fmt.Sprintf("lease %d metadata", w.info.ID), md, w.metadata)
		li.Metadata = nil
		eq(t, fmt.Sprintf("lease %d", w.info.ID), *li, w.info)
		eq(t, fmt.Sprintf("listed lease %d", i), list[i].ID, w.info.ID)
	}
	for _, id := range []int64{2, 8, 10} {
		leaseGone(t, s, id)
	}
	d, _ := s.NextDeadline()
	eq(t, "next deadline", d, int64(t0+10_000))
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
	// The restored file writes back as the current version of the same
	// state, less the change history v1 did not carry: the floor is the
	// snapshot's revision.
	eq(t, "rewritten", string(snap(t, s)), string(snap(t, dropChangeHistory(goldenState(t)))))
	eq(t, "floor", s.CompactRevision(), int64(10))
	checkChangeLog(t, s, nil)
	mustCompacted(t, s, 9, -1)
	mustCompacted(t, s, 10, 0)
	eq(t, "read from the floor", changesFrom(t, s, 10, -1, 10), &schema.KVChangesReply{Events: []schema.Event{}, NextRevision: 10, NextOpIndex: -1, CompactRevision: 10})

	// The id counter: the next auto id is 11, above every id ever used.
	r := mustApply(t, s, now, &Grant{TTL: 1})
	eq(t, "next id", r.Reply.(*schema.LeaseGrantReply).ID, int64(11))

	// The restored state is live: lease 1 expires on time, one revision.
	r = mustApply(t, s, t0+10_000, &Expire{IDs: []int64{1}})
	eq(t, "not early", len(r.Expired), 0)
	r = mustApply(t, s, t0+10_001, &Expire{IDs: []int64{1}})
	eq(t, "expired", checkEvents(t, r.Events, 11, schema.EventDelete, schema.CauseLeaseExpired), []string{"svc.api.n1", "svc.api.n2"})
	// The change log starts with the events after the snapshot.
	checkChangeLog(t, s, r.Events)
	eq(t, "floor", s.CompactRevision(), int64(10))
}

// mutateLine applies f to line i (0 = header) of a snapshot.
func mutateLine(data []byte, i int, f func(string) string) []byte {
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	lines[i] = f(lines[i])
	return []byte(strings.Join(lines, "\n") + "\n")
}

func replace(old, new string) func(string) string {
	return func(s string) string {
		if !strings.Contains(s, old) {
			panic(fmt.Sprintf("%q not in %q", old, s))
		}
		return strings.Replace(s, old, new, 1)
	}
}

func goldenLines(t testing.TB) []string { return goldenLinesOf(t, goldenV1) }

func goldenLinesOf(t testing.TB, path string) []string {
	return strings.Split(strings.TrimSuffix(string(readGoldenFile(t, path)), "\n"), "\n")
}

type badSnapshot struct {
	name string
	data []byte
}

// badV3Snapshots are broken versions of the v3 golden file: its change
// lines out of order, duplicated, at or below the floor, above the
// revision, miscounted or malformed, the floor out of range, and every
// truncation.
func badV3Snapshots(t testing.TB) []badSnapshot {
	golden := readGoldenFile(t, goldenV3)
	lines := goldenLinesOf(t, goldenV3)
	// Lines: 0 header, 1..2 leases 7, 9, 3..6 keys, 7..9 idempotency
	// entries, 10..15 changes at (12,0) (13,0) (14,0) (14,1) (15,0) (15,1).
	if len(lines) != 16 || !strings.Contains(lines[10], `"revision":12,"op_index":0`) || !strings.Contains(lines[15], `"revision":15,"op_index":1`) {
		t.Fatalf("unexpected v3 golden layout:\n%s", golden)
	}
	join := func(ls ...string) []byte { return []byte(strings.Join(ls, "\n") + "\n") }
	with := func(changes ...string) []byte { return join(append(append([]string{}, lines[:10]...), changes...)...) }
	hdr := func(f func(string) string) []byte {
		return join(append([]string{f(lines[0])}, lines[1:]...)...)
	}
	c := lines[10:]
	cases := []badSnapshot{
		{"v3: version 4", hdr(replace(`"version":3`, `"version":4`))},
		{"v3: two changes swapped", with(c[0], c[2], c[1], c[3], c[4], c[5])},
		{"v3: op_indexes of a revision swapped", with(c[0], c[1], c[3], c[2], c[4], c[5])},
		{"v3: duplicate change", with(c[0], c[1], c[2], c[2], c[4], c[5])},
		{"v3: duplicate change, counted", join(append(append([]string{replace(`"changes":6`, `"changes":7`)(lines[0])}, lines[1:13]...), c[2], c[3], c[4], c[5])...)},
		{"v3: change at the floor", with(replace(`"revision":12,`, `"revision":11,`)(c[0]), c[1], c[2], c[3], c[4], c[5])},
		{"v3: change below the floor", with(replace(`"revision":12,`, `"revision":3,`)(c[0]), c[1], c[2], c[3], c[4], c[5])},
		{"v3: change above the revision", with(c[0], c[1], c[2], c[3], c[4], replace(`"revision":15,`, `"revision":16,`)(c[5]))},
		{"v3: compact_revision above the revision", hdr(replace(`"compact_revision":11`, `"compact_revision":16`))},
		{"v3: compact_revision above the revision, no changes", join(replace(`"changes":6,"compact_revision":11`, `"compact_revision":16`)(lines[0]), lines[1], lines[2], lines[3], lines[4], lines[5], lines[6], lines[7], lines[8], lines[9])},
		{"v3: negative compact_revision", hdr(replace(`"compact_revision":11`, `"compact_revision":-1`))},
		{"v3: compact_revision as string", hdr(replace(`"compact_revision":11`, `"compact_revision":"11"`))},
		{"v3: one change more announced", hdr(replace(`"changes":6`, `"changes":7`))},
		{"v3: one change fewer announced", hdr(replace(`"changes":6`, `"changes":5`))},
		{"v3: negative change count", hdr(replace(`"changes":6`, `"changes":-1`))},
		{"v3: unknown change field", with(c[0], c[1], c[2], c[3], c[4], replace(`{"now"`, `{"term":3,"now"`)(c[5]))},
		{"v3: unknown event field", with(c[0], c[1], c[2], c[3], c[4], replace(`"type":"delete"`, `"type":"delete","prev":1`)(c[5]))},
		{"v3: change without a key", with(c[0], c[1], c[2], c[3], c[4], replace(`"key":"idem.b",`, ``)(c[5]))},
		{"v3: change line null", with(c[0], c[1], c[2], c[3], c[4], "null")},
		{"v3: change line as array", with(c[0], c[1], c[2], c[3], c[4], "[15,1]")},
		{"v3: key line where a change is due", with(c[0], c[1], c[2], c[3], c[4], lines[3])},
		{"v3: change line where an idempotency entry is due", join(append(append([]string{}, lines[:9]...), c[0], lines[9], c[1], c[2], c[3], c[4], c[5])...)},
		{"v3: extra change line", append(append([]byte{}, golden...), c[5]+"\n"...)},
		// A version 2 snapshot has no change log: its floor is its
		// revision, so no change line fits.
		{"v2 header with a change", join(append([]string{replace(`"version":3`, `"version":2`)(lines[0])}, lines[1:]...)...)},
	}
	// Truncations: at every byte of the header and of the change lines
	// (what version 3 added), and around every line end before them (the
	// v1 golden is truncated at every byte in TestRestoreRejectsBadSnapshots).
	header, changesAt := len(lines[0])+1, len(golden)
	for _, l := range c {
		changesAt -= len(l) + 1
	}
	end := 0
	for _, l := range lines[:10] {
		end += len(l) + 1
		cases = append(cases, badSnapshot{fmt.Sprintf("v3 truncated to %d bytes", end-2), golden[:end-2]},
			badSnapshot{fmt.Sprintf("v3 truncated to %d bytes", end-1), golden[:end-1]})
		if end < len(golden)-1 {
			cases = append(cases, badSnapshot{fmt.Sprintf("v3 truncated to %d bytes", end+1), golden[:end+1]})
		}
	}
	for n := 0; n < len(golden)-1; n++ {
		if n < header || n >= changesAt {
			cases = append(cases, badSnapshot{fmt.Sprintf("v3 truncated to %d bytes", n), golden[:n]})
		}
	}
	return cases
}

// Broken snapshots are refused with ErrBadSnapshot and leave the state as
// it was.
func TestRestoreRejectsBadSnapshots(t *testing.T) {
	golden := readGolden(t)
	lines := goldenLines(t)
	// Lines: 0 header, 1..3 leases 1, 7, 9, 4..8 keys cfg.a, svc.api.n1,
	// svc.api.n2, svc.db, tmp.x.
	if len(lines) != 9 || !strings.Contains(lines[4], `"cfg.a"`) || !strings.Contains(lines[8], `"tmp.x"`) {
		t.Fatalf("unexpected golden layout:\n%s", golden)
	}
	join := func(ls ...string) []byte { return []byte(strings.Join(ls, "\n") + "\n") }
	cases := []badSnapshot{
		{"empty", nil},
		{"not JSON", []byte("concord snapshot\n")},
		{"only whitespace", []byte("\n\n")},
		{"JSON array", []byte("[1,2,3]\n")},
		{"header only", []byte(lines[0] + "\n")},
		{"wrong format", mutateLine(golden, 0, replace(`"concord.fsm"`, `"concord.kv"`))},
		{"no format", mutateLine(golden, 0, replace(`"format":"concord.fsm",`, ``))},
		{"version 0", mutateLine(golden, 0, replace(`"version":1`, `"version":0`))},
		{"version 5 in JSON", mutateLine(golden, 0, replace(`"version":1`, `"version":5`))},
		{"version 6", mutateLine(golden, 0, replace(`"version":1`, `"version":6`))},
		{"no version", mutateLine(golden, 0, replace(`"version":1,`, ``))},
		{"negative version", mutateLine(golden, 0, replace(`"version":1`, `"version":-1`))},
		{"version as string", mutateLine(golden, 0, replace(`"version":1`, `"version":"1"`))},
		{"unknown header field", mutateLine(golden, 0, replace(`{"format"`, `{"compressed":true,"format"`))},
		{"unknown lease field", mutateLine(golden, 1, replace(`{"id"`, `{"holder":"x","id"`))},
		{"unknown key field", mutateLine(golden, 5, replace(`{"key"`, `{"watch":true,"key"`))},
		{"revision as string", mutateLine(golden, 0, replace(`"revision":10`, `"revision":"10"`))},
		{"lease as array", mutateLine(golden, 2, func(string) string { return `[7,60]` })},
		{"key names a missing lease", mutateLine(golden, 7, replace(`"lease":7`, `"lease":8`))},
		{"one lease more announced", mutateLine(golden, 0, replace(`"leases":3`, `"leases":4`))},
		{"one lease fewer announced", mutateLine(golden, 0, replace(`"leases":3`, `"leases":2`))},
		{"one key more announced", mutateLine(golden, 0, replace(`"keys":5`, `"keys":6`))},
		{"one key fewer announced", mutateLine(golden, 0, replace(`"keys":5`, `"keys":4`))},
		{"negative key count", mutateLine(golden, 0, replace(`"keys":5`, `"keys":-1`))},
		{"duplicate key", join(lines[0], lines[1], lines[2], lines[3], lines[4], lines[5], lines[5], lines[7], lines[8])},
		{"duplicate lease", join(lines[0], lines[1], lines[1], lines[3], lines[4], lines[5], lines[6], lines[7], lines[8])},
		{"duplicate lease, counted", join(replace(`"leases":3`, `"leases":4`)(lines[0]), lines[1], lines[2], lines[2], lines[3], lines[4], lines[5], lines[6], lines[7], lines[8])},
		{"duplicate key, counted", join(replace(`"keys":5`, `"keys":6`)(lines[0]), lines[1], lines[2], lines[3], lines[4], lines[4], lines[5], lines[6], lines[7], lines[8])},
		{"lease with ttl 0", mutateLine(golden, 2, replace(`"ttl":60`, `"ttl":0`))},
		{"key without value", mutateLine(golden, 4, replace(`"value":"two",`, ``))},
		{"extra key line", append(append([]byte{}, golden...), lines[4]+"\n"...)},
		{"trailing garbage", append(append([]byte{}, golden...), "x"...)},
		{"trailing JSON", append(append([]byte{}, golden...), "{}\n"...)},
		{"lease line where a key is due", join(lines[0], lines[1], lines[2], lines[3], lines[1], lines[5], lines[6], lines[7], lines[8])},
	}
	// Every truncation but the final newline's.
	for n := 0; n < len(golden)-1; n++ {
		cases = append(cases, badSnapshot{fmt.Sprintf("truncated to %d bytes", n), golden[:n]})
	}

	cases = append(cases, badV3Snapshots(t)...)
	cases = append(cases, badV4Snapshots(t)...)
	cases = append(cases, badV5Snapshots(t)...)

	s := goldenState(t)
	mustApply(t, s, s.Now(), &Put{Key: "after.golden", Value: val(`1`), TTL: 3})
	before := snap(t, s)
	digest := stateDigest(s)
	log := loggedEvents(s)
	for _, c := range cases {
		err := s.Restore(bytes.NewReader(c.data))
		if !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("%s: Restore = %v, want ErrBadSnapshot", c.name, err)
		}
		if !bytes.Equal(before, snap(t, s)) || stateDigest(s) != digest {
			t.Fatalf("%s: a failed restore changed the state", c.name)
		}
	}
	eq(t, "change log after the failed restores", loggedEvents(s), log)
	// The state is still usable.
	mustApply(t, s, s.Now(), &Revoke{ID: 1})
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
}

// A read error part-way is reported as a bad snapshot, state unchanged.
func TestRestoreReadError(t *testing.T) {
	v3 := New()
	run(t, v3, goldenStepsV3()...)
	for _, g := range []struct {
		path string
		want *State // what the file restores to
	}{
		{goldenV1, dropChangeHistory(goldenState(t))},
		{goldenV3, dropChangeHistory(goldenStateV3(t))},
		{goldenV4, goldenStateV4(t)},
		{goldenV5, goldenStateV4(t)},
	} {
		golden := readGoldenFile(t, g.path)
		s := New()
		run(t, s, step{t0, &Put{Key: "keep", Value: val(`1`)}})
		before := snap(t, s)
		// The v3 file's change lines come last: 200 bytes before the end
		// is inside them.
		for _, n := range []int{0, 50, len(golden) / 2, len(golden) - 200, len(golden) - 2} {
			r := io.MultiReader(bytes.NewReader(golden[:n]), iotest.ErrReader(errors.New("disk on fire")))
			if err := s.Restore(r); !errors.Is(err, ErrBadSnapshot) || !strings.Contains(err.Error(), "disk on fire") {
				t.Fatalf("%s after %d bytes: %v", g.path, n, err)
			}
			eq(t, "state", string(snap(t, s)), string(before))
		}
		// One byte at a time is fine.
		if err := s.Restore(iotest.OneByteReader(bytes.NewReader(golden))); err != nil {
			t.Fatal(err)
		}
		eq(t, "restored "+g.path, string(snap(t, s)), string(snap(t, g.want)))
	}
}

type failingWriter struct {
	n   int // bytes accepted before failing
	err error
}

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) <= w.n {
		w.n -= len(p)
		return len(p), nil
	}
	n := w.n
	w.n = 0
	return n, w.err
}

// A write error is returned, wrapped.
func TestSnapshotWriteError(t *testing.T) {
	writeErr := errors.New("no space left")
	// Small and large states: the error may come from a flush or from the
	// encoder part-way.
	small := goldenState(t)
	large := New()
	mustApply(t, large, t0, &Limits{MaxLeases: 10, MaxKeysPerLease: 100_000})
	mustApply(t, large, t0, &Grant{TTL: 10})
	for i := 0; i < 5000; i++ {
		large.ApplyCommand(Command{Op: OpPut, Now: t0, Body: &Put{Key: fmt.Sprintf("k.%05d", i), Value: val(`{"v":"` + strings.Repeat("x", 40) + `"}`), Lease: 1}})
	}
	for _, s := range []*State{small, large} {
		size := len(snap(t, s))
		for _, limit := range []int{0, 10, size / 2, size - 1} {
			_, err := s.Snapshot().WriteTo(&failingWriter{n: limit, err: writeErr})
			if !errors.Is(err, writeErr) {
				t.Fatalf("WriteTo with a writer failing after %d bytes: %v", limit, err)
			}
		}
	}
}

// The header counts and the line order the format promises: header, leases
// by id, keys by key.
func TestSnapshotLayout(t *testing.T) {
	lines := goldenLines(t)
	var h snapshotHeader
	if err := json.Unmarshal([]byte(lines[0]), &h); err != nil {
		t.Fatal(err)
	}
	eq(t, "header", h, snapshotHeader{Format: SnapshotFormat, Version: 1, Revision: 10, NextLeaseID: 11,
		Now: t0 + 5_000, Limits: Limits{MaxLeases: 1000, MaxKeysPerLease: 100}, Leases: 3, Keys: 5})
	eq(t, "format constants", [2]any{SnapshotFormat, SnapshotVersion}, [2]any{"concord.fsm", 5})
	var ids []int64
	for _, l := range lines[1:4] {
		var sl snapshotLease
		if err := json.Unmarshal([]byte(l), &sl); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sl.ID)
	}
	eq(t, "lease order", ids, []int64{1, 7, 9})
	var keys []string
	for _, l := range lines[4:] {
		var sk snapshotKV
		if err := json.Unmarshal([]byte(l), &sk); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, sk.Key)
	}
	eq(t, "key order", keys, []string{"cfg.a", "svc.api.n1", "svc.api.n2", "svc.db", "tmp.x"})
	// Values and metadata are written as given, HTML-sensitive characters
	// not escaped.
	if !strings.HasPrefix(lines[8], `{"key":"tmp.x","value":{"note":"<&>"},`) || !strings.Contains(lines[1], `"metadata":{"owner":"svc <api> & co"}`) {
		t.Fatalf("lines:\n%s\n%s", lines[1], lines[8])
	}
}

// Version 3 adds the change log: after the idempotency entries, one line
// per event in (revision, op_index) order with the lease-clock time it was
// recorded at, and the floor and the event count in the header.
func TestSnapshotLayoutV3(t *testing.T) {
	lines := goldenLinesOf(t, goldenV3)
	var h snapshotHeader
	if err := json.Unmarshal([]byte(lines[0]), &h); err != nil {
		t.Fatal(err)
	}
	eq(t, "header", h, snapshotHeader{Format: SnapshotFormat, Version: 3, Revision: 15, NextLeaseID: 11, Now: t0 + 5_700,
		Limits: Limits{MaxLeases: 1000, MaxKeysPerLease: 100, IdempotencyEntries: 100_000, IdempotencyRevisions: 10_000, HistoryRevisions: 6, HistoryAgeMS: 4_000},
		Leases: 2, Keys: 4, Idempotency: 3, IdempotencySeq: 3, Changes: 6, CompactRevision: 11})
	eq(t, "lines", len(lines), 1+2+4+3+6)
	var got [][3]int64
	for _, l := range lines[10:] {
		var sc snapshotChange
		dec := json.NewDecoder(strings.NewReader(l))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&sc); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		got = append(got, [3]int64{sc.Event.Revision, int64(sc.Event.OpIndex), sc.Now})
	}
	eq(t, "change lines", got, [][3]int64{{12, 0, t0 + 5_200}, {13, 0, t0 + 5_500}, {14, 0, t0 + 5_600}, {14, 1, t0 + 5_600}, {15, 0, t0 + 5_700}, {15, 1, t0 + 5_700}})
	// Event values are written as given, not HTML-escaped.
	if !strings.HasPrefix(lines[11], `{"now":1005500,"event":{"type":"put","key":"v3.a","value":{"n":3,"s":"<&>"},"revision":13,"op_index":0,`) {
		t.Fatalf("line 11: %s", lines[11])
	}
}

// A snapshot whose id counter lags behind its leases (older writers, hand
// repair) still never hands out a live id: auto ids skip taken ones.
func TestRestoredCounterSkipsTakenIDs(t *testing.T) {
	data := mutateLine(readGolden(t), 0, replace(`"next_lease_id":11`, `"next_lease_id":7`))
	s := restored(t, data)
	// A requested id that is taken fails and leaves the lagging counter
	// alone.
	mustFail(t, s, &Grant{ID: 9, TTL: 1}, ErrLeaseExists)
	var got []int64
	for i := 0; i < 3; i++ {
		got = append(got, mustApply(t, s, s.Now(), &Grant{TTL: 1}).Reply.(*schema.LeaseGrantReply).ID)
	}
	eq(t, "ids", got, []int64{8, 10, 11})
}

// An empty state round-trips too: the magic line, the header frame and
// the end frame.
func TestSnapshotEmptyState(t *testing.T) {
	data := snap(t, New())
	eq(t, "frames", frameKinds(t, data), "HE")
	s := restored(t, data)
	eq(t, "digest", stateDigest(s), stateDigest(New()))
	eq(t, "limits", s.Limits(), DefaultLimits)
	eq(t, "first id", mustApply(t, s, t0, &Grant{TTL: 1}).Reply.(*schema.LeaseGrantReply).ID, int64(1))
}

// Well-formed JSON that describes an impossible state must be refused too:
// Restore's contract is that a snapshot it accepts is a state Apply could
// have produced. Restore checks only that a key's lease exists, so these
// records are restored as they are and the state breaks its invariants.
func TestRestoreRejectsInconsistentRecords(t *testing.T) {
	golden := readGolden(t)
	lines := goldenLines(t)
	join := func(ls ...string) []byte { return []byte(strings.Join(ls, "\n") + "\n") }
	hdr4 := replace(`"leases":3`, `"leases":4`)(lines[0])
	hdr6 := replace(`"keys":5`, `"keys":6`)(lines[0])
	cases := []struct {
		name string
		data []byte
	}{
		{"anonymous lease with two keys", mutateLine(golden, 4, replace(`"version":2}`, `"version":2,"lease":9}`))},
		{"lease line null", join(hdr4, lines[1], lines[2], lines[3], "null", lines[4], lines[5], lines[6], lines[7], lines[8])},
		{"lease id 0", join(hdr4, `{"id":0,"ttl":5,"deadline":1,"granted_revision":0}`, lines[1], lines[2], lines[3], lines[4], lines[5], lines[6], lines[7], lines[8])},
		{"key line null", join(hdr6, lines[1], lines[2], lines[3], "null", lines[4], lines[5], lines[6], lines[7], lines[8])},
		{"empty key", join(hdr6, lines[1], lines[2], lines[3], `{"key":"","value":1,"create_revision":1,"mod_revision":1,"version":1}`, lines[4], lines[5], lines[6], lines[7], lines[8])},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := New()
			err := s.Restore(bytes.NewReader(c.data))
			if !errors.Is(err, ErrBadSnapshot) {
				t.Errorf("Restore accepted it (err %v); invariants after restore: %v", err, checkInvariants(s))
			}
		})
	}
}

// Apply stores values and metadata as compact JSON, so a restored replica
// holds the same bytes as one that applied the log ("a node restarted from
// snapshot + log has identical state") however the client spaced them. The
// byte size of a value decides where a MaxBytes-bounded read pages, so the
// difference would be visible.
func TestRestoreKeepsValuesByteForByte(t *testing.T) {
	spaced := `{ "addr" : "10.0.0.5",` + strings.Repeat(" ", 200) + `"port" : 80 }`
	compact := `{"addr":"10.0.0.5","port":80}`
	meta := `{ "owner" : "billing" }`
	s := New()
	run(t, s,
		step{t0, &Grant{TTL: 10, Metadata: val(meta)}},
		step{t0, &Put{Key: "m.1", Value: val(spaced), Lease: 1}},
		step{t0, &Put{Key: "m.2", Value: val(spaced)}},
	)
	eq(t, "applied value", string(getKey(t, s, "m.1").Value), compact)
	r := restored(t, snap(t, s))
	// The same bounded read at the same revision must page the same way on
	// both replicas.
	q := GetQuery{IsPrefix: true, Key: "m.", Limit: 10, MaxBytes: 2 * (3 + recordOverhead + 100)}
	if a, b := keysOf(s.Get(q, t0).KVs), keysOf(r.Get(q, t0).KVs); !reflect.DeepEqual(a, b) {
		t.Errorf("a MaxBytes read returns %v on the replica that applied the log, %v on the restored one", a, b)
	}
	if got := string(getKey(t, r, "m.1").Value); got != compact {
		t.Errorf("restored value %q, applied %q", got, compact)
	}
	if got := string(info(t, r, 1).Metadata); got != `{"owner":"billing"}` {
		t.Errorf("restored metadata %q", got)
	}
}

// The change log of a state Apply produced has no holes: every revision
// above the floor up to the state's revision is there, with op_index 0, 1,
// 2, ... (every revision has at least one event, and retention drops whole
// revisions), and its times never decrease nor pass the state's clock.
// Restore must refuse a log that breaks this, as it refuses other records
// Apply could not have produced: a reader of a restored replica would skip
// the missing events without being told (no ErrCompacted), which is what
// the change log exists to prevent, and retention by age looks only at the
// oldest event's time.
func TestRestoreRejectsInconsistentChangeLog(t *testing.T) {
	lines := goldenLinesOf(t, goldenV3)
	// 10..15 are the changes (12,0) (13,0) (14,0) (14,1) (15,0) (15,1).
	c := lines[10:]
	with := func(n int, changes ...string) []byte {
		hdr := replace(`"changes":6`, fmt.Sprintf(`"changes":%d`, n))(lines[0])
		ls := append(append([]string{hdr}, lines[1:10]...), changes...)
		return []byte(strings.Join(ls, "\n") + "\n")
	}
	cases := []badSnapshot{
		{"the first revision above the floor missing", with(5, c[1], c[2], c[3], c[4], c[5])},
		{"a revision missing", with(5, c[0], c[2], c[3], c[4], c[5])},
		{"the last revisions missing", with(4, c[0], c[1], c[2], c[3])},
		{"every event missing, the floor below the revision", with(0)},
		{"op_index 0 missing", with(5, c[0], c[1], c[3], c[4], c[5])},
		{"op_index 1 of 2 missing", with(5, c[0], c[1], c[2], c[3], c[5])},
		{"op_index gap", with(6, c[0], c[1], c[2], replace(`"op_index":1`, `"op_index":2`)(c[3]), c[4], c[5])},
		{"negative op_index", with(6, c[0], c[1], replace(`"op_index":0`, `"op_index":-1`)(c[2]), c[3], c[4], c[5])},
		{"times going back", with(6, c[0], replace(`{"now":1005500`, `{"now":1005100`)(c[1]), c[2], c[3], c[4], c[5])},
		{"a time after the state's clock", with(6, c[0], c[1], c[2], c[3], c[4], replace(`{"now":1005700`, `{"now":1009999`)(c[5]))},
	}
	for _, bc := range cases {
		t.Run(bc.name, func(t *testing.T) {
			s := New()
			if err := s.Restore(bytes.NewReader(bc.data)); !errors.Is(err, ErrBadSnapshot) {
				t.Errorf("Restore accepted it (err %v): floor %d, revision %d, log %v", err, s.CompactRevision(), s.Revision(), positions(logEvents(s)))
			}
		})
	}
}

func goldenStateV3(t testing.TB) *State {
	s := New()
	run(t, s, goldenStepsV3()...)
	return s
}

// badV4Snapshots are broken versions of the v4 golden file's history: a
// version missing or out of place, a tombstone or a needless version at or
// below the floor, a version claiming to be live that is not, a record that
// does not match its version, times going back or ahead of the clock.
func badV4Snapshots(t testing.TB) []badSnapshot {
	golden := readGoldenFile(t, goldenV4)
	lines := goldenLinesOf(t, goldenV4)
	// Lines: 0 header, 1..2 leases, 3..6 keys, 7..9 idempotency entries,
	// 10..18 history: idem.a@11 idem.a@15(del) idem.b@12 idem.b@15(del)
	// svc.api.n1@1(base) svc.api.n1@14(del) svc.api.n2@2(base)
	// svc.api.n2@14(del) v3.a@13(live); the floor is 11.
	if len(lines) != 19 || !strings.Contains(lines[10], `"key":"idem.a","revision":11`) || !strings.Contains(lines[18], `"live":true`) {
		t.Fatalf("unexpected v4 golden layout:\n%s", golden)
	}
	join := func(ls ...string) []byte { return []byte(strings.Join(ls, "\n") + "\n") }
	h := lines[10:]
	// with writes the history lines given, the header counting them.
	with := func(hist ...string) []byte {
		head := strings.Replace(lines[0], `"history":9`, fmt.Sprintf(`"history":%d`, len(hist)), 1)
		return join(append(append([]string{head}, lines[1:10]...), hist...)...)
	}
	drop := func(i int) []byte {
		return with(append(append([]string{}, h[:i]...), h[i+1:]...)...)
	}
	set := func(i int, f func(string) string) []byte {
		hist := append([]string{}, h...)
		hist[i] = f(hist[i])
		return with(hist...)
	}
	return []badSnapshot{
		{"v4: a base dropped (a delete with nothing before it)", drop(4)},
		{"v4: a change dropped (its base left without a later version)", drop(5)},
		{"v4: the live version dropped", drop(8)},
		{"v4: the last revision's changes dropped", with(h[0], h[2], h[4], h[5], h[6], h[7], h[8])},
		{"v4: two lines swapped", with(h[1], h[0], h[2], h[3], h[4], h[5], h[6], h[7], h[8])},
		{"v4: a line twice", with(h[0], h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7], h[8])},
		{"v4: a tombstone at the floor", with(h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7], h[8],
			`{"key":"w","revision":10,"op_index":0,"cause":"delete","now":1005000}`)},
		{"v4: a version at the floor with no later change", with(h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7], h[8],
			`{"key":"w","revision":3,"op_index":0,"cause":"put","now":0,"record":{"key":"w","value":1,"create_revision":3,"mod_revision":3,"version":1}}`)},
		{"v4: live but not the live record", set(2, func(l string) string { return l[:strings.Index(l, `,"record"`)] + `,"live":true}` })},
		{"v4: a put without a record", set(2, func(l string) string { return l[:strings.Index(l, `,"record"`)] + `}` })},
		{"v4: a delete with a record", set(1, replace(`"now":1005700}`, `"now":1005700,"record":{"key":"idem.a","value":1,"create_revision":15,"mod_revision":15,"version":1}}`))},
		{"v4: a record of another key", set(2, replace(`"record":{"key":"idem.b"`, `"record":{"key":"idem.c"`))},
		{"v4: a record of another revision", set(2, replace(`"mod_revision":12`, `"mod_revision":13`))},
		{"v4: a tombstone naming another lease than its record's", set(5, replace(`"lease":1}`, `"lease":2}`))},
		{"v4: a tombstone naming a lease its record had not", set(1, replace(`"now":1005700}`, `"now":1005700,"lease":1}`))},
		{"v4: an unknown cause", set(1, replace(`"cause":"delete"`, `"cause":"vanished"`))},
		{"v4: a time after the state's clock", set(1, replace(`"now":1005700`, `"now":1005701`))},
		{"v4: times going back", set(8, replace(`"now":1005500`, `"now":1005100`))},
		{"v4: an op index gap", set(3, replace(`"op_index":1`, `"op_index":2`))},
		{"v4: one version more announced", mutateLine(golden, 0, replace(`"history":9`, `"history":10`))},
		{"v4: one version fewer announced", mutateLine(golden, 0, replace(`"history":9`, `"history":8`))},
		{"v4: the floor above the revision", mutateLine(golden, 0, replace(`"compact_revision":11`, `"compact_revision":16`))},
		{"v4: unknown history field", set(0, replace(`{"key"`, `{"ttl":3,"key"`))},
	}
}

func goldenStateV4(t testing.TB) *State {
	s := New()
	run(t, s, goldenStepsV4()...)
	return s
}
