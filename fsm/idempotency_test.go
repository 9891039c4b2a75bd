package fsm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/concord-io/concord/schema"
)

// keyed wraps a body with an idempotency key.
func keyed(key string, body any) Command {
	return Command{Op: opOf(body), IdempotencyKey: key, Body: body}
}

// mustCached applies a retry stamped now and checks that it is answered
// from the cache with exactly want, no events, and changes nothing but the
// clock.
func mustCached(t testing.TB, s *State, now int64, c Command, want []byte) Result {
	t.Helper()
	before := snap(t, s)
	count := s.IdempotencyCount()
	r := apply(t, s, now, c)
	if r.Err != nil || !r.Cached {
		t.Fatalf("retry of %q: err %v, cached %v", c.IdempotencyKey, r.Err, r.Cached)
	}
	raw, ok := r.Reply.(json.RawMessage)
	if !ok {
		t.Fatalf("cached reply is %T, want json.RawMessage", r.Reply)
	}
	if !bytes.Equal(raw, want) {
		t.Fatalf("cached reply\n%s\nwant the first reply\n%s", raw, want)
	}
	if r.Op != c.Op || r.Events != nil || r.Expired != nil {
		t.Fatalf("cached result carries more: %+v", r)
	}
	if got, want := snap(t, s), tickedSnap(t, before, now); !bytes.Equal(got, want) {
		t.Fatalf("a cached retry changed more than the clock:\ngot  %s\nwant %s", got, want)
	}
	eq(t, "idempotency entries", s.IdempotencyCount(), count)
	return r
}

// applyFresh applies a keyed command that must apply (not from the cache)
// and returns its result and the JSON of its reply.
func applyFresh(t testing.TB, s *State, now int64, c Command) (Result, []byte) {
	t.Helper()
	r := mustApply(t, s, now, c)
	if r.Cached {
		t.Fatalf("%q answered from the cache", c.IdempotencyKey)
	}
	if _, raw := r.Reply.(json.RawMessage); raw {
		t.Fatal("a fresh reply is raw JSON")
	}
	return r, mustJSON(t, r.Reply)
}

// A retry of every mutating command with its key gets the first reply,
// byte for byte, even when applying it again would do something else (or
// fail), and changes nothing; the stamp may differ.
func TestIdempotentRetry(t *testing.T) {
	setup := []step{
		{t0, &Grant{TTL: 10, Metadata: val(`{"o":"<&>"}`)}},                                 // lease 1
		{t0, &Grant{TTL: 10}},                                                               // lease 2
		{t0, &Put{Key: "a", Value: val(`"a"`), Lease: 1}},                                   // rev 1
		{t0, &Put{Key: "p.1", Value: val(`{"html":"<b>&amp;</b>","u":"é\u2028"}`), TTL: 5}}, // rev 2, lease 3
		{t0, &Put{Key: "p.2", Value: val(`2`), Lease: 2}},                                   // rev 3
	}
	cases := []struct {
		name string
		body any
		// then runs between the first apply and the retry: what would make
		// a second application differ.
		then []step
		// check looks at the state after the retry.
		check func(t *testing.T, s *State)
	}{
		{"grant with an automatic id", &Grant{TTL: 30}, nil, func(t *testing.T, s *State) {
			e, _ := s.LeaseCount()
			eq(t, "one lease granted", e, int64(3))
		}},
		{"grant with an id", &Grant{ID: 9, TTL: 30}, nil, nil}, // applied again: ErrLeaseExists
		{"keepalive", &KeepAlive{ID: 1, TTL: 20}, nil, func(t *testing.T, s *State) {
			eq(t, "deadline from the first keep-alive", info(t, s, 1).RemainingMS, int64(t0+1_000+20_000)-s.Now())
		}},
		{"keepalive_many", &KeepAliveMany{IDs: []int64{2, 9, 3, 1}}, nil, func(t *testing.T, s *State) {
			eq(t, "deadline from the first keep-alive", info(t, s, 1).RemainingMS, int64(t0+1_000+10_000)-s.Now())
			eq(t, "and for the other", info(t, s, 2).RemainingMS, int64(t0+1_000+10_000)-s.Now())
		}},
		{"revoke", &Revoke{ID: 2}, nil, nil}, // applied again: ErrLeaseNotFound
		{"put", &Put{Key: "a", Value: val(`"a2"`), Lease: 1, PrevKV: true}, []step{{t0 + 1_500, &Put{Key: "a", Value: val(`"other"`), Lease: 1}}}, func(t *testing.T, s *State) {
			eq(t, "the later put stands", getKey(t, s, "a").Value, val(`"other"`))
		}},
		{"ttl put", &Put{Key: "t", Value: val(`1`), TTL: 4}, nil, func(t *testing.T, s *State) {
			_, a := s.LeaseCount()
			eq(t, "one anonymous lease for t (and p.1's)", a, int64(2))
		}},
		{"delete", &Delete{Key: "p.", IsPrefix: true, PrevKV: true}, []step{{t0 + 1_500, &Put{Key: "p.9", Value: val(`9`)}}}, func(t *testing.T, s *State) {
			eq(t, "the key made later is not deleted", getKey(t, s, "p.9") != nil, true)
		}},
		{"transaction", &Txn{
			Compare: []Compare{cmpInt("lock", TargetCreateRevision, CmpEq, 0)},
			Success: []TxnOp{putLeaseOp("lock", `"me"`, 1), getPrefixOp("p.", 10)},
			Failure: []TxnOp{getOp("lock")},
		}, []step{{t0 + 1_500, &Delete{Key: "lock"}}}, func(t *testing.T, s *State) {
			eq(t, "not re-acquired", getKey(t, s, "lock") == nil, true)
		}},
		{"transaction that took the failure branch", &Txn{
			Compare: []Compare{cmpInt("a", TargetExists, CmpEq, 0)},
			Success: []TxnOp{putOp("x", `1`)},
			Failure: []TxnOp{getOp("a"), getOp("p.1")},
		}, []step{{t0 + 1_500, &Delete{Key: "a"}}}, func(t *testing.T, s *State) {
			eq(t, "success branch not run on retry", getKey(t, s, "x") == nil, true)
		}},
		{"read-only transaction", &Txn{Success: []TxnOp{getOp("a")}}, []step{{t0 + 1_500, &Put{Key: "a", Value: val(`"new"`)}}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			run(t, s, setup...)
			c := keyed("client-7:req-1", tc.body)
			r, first := applyFresh(t, s, t0+1_000, c)
			eq(t, "entries", s.IdempotencyCount(), 1)
			run(t, s, tc.then...)
			// The retry may come much later, with the stamp of its own proposal.
			cr := mustCached(t, s, t0+2_000, c, first)
			// A cached reply reads exactly like the first.
			eq(t, "cached JSON", string(mustJSON(t, cr.Reply)), string(first))
			eq(t, "first result JSON", resultJSON(r) != "", true)
			// And again: still the first reply.
			mustCached(t, s, t0+3_000, c, first)
			// The same body decoded from a differently spaced entry is the
			// same request.
			if p, ok := tc.body.(*Put); ok {
				spaced := *p
				spaced.Value = append(val(" "), p.Value...)
				mustCached(t, s, t0+3_000, keyed(c.IdempotencyKey, &spaced), first)
			}
			if tc.check != nil {
				tc.check(t, s)
			}
			if err := checkInvariants(s); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The same key with a different request, a different operation or a
// different flag is refused with ErrIdempotencyConflict and changes
// nothing; the first reply stays cached.
func TestIdempotencyConflict(t *testing.T) {
	s := New()
	run(t, s, step{t0, &Grant{TTL: 10}}, step{t0, &Put{Key: "a", Value: val(`1`)}})
	put := &Put{Key: "k", Value: val(`{"v":1}`)}
	_, first := applyFresh(t, s, t0, keyed("dup", put))
	for _, body := range []any{
		&Put{Key: "k", Value: val(`{"v":2}`)},
		&Put{Key: "k", Value: val(`{"v":1.0}`)}, // same meaning, different request bytes
		&Put{Key: "k", Value: val(`{"v":1}`), PrevKV: true},
		&Put{Key: "k", Value: val(`{"v":1}`), Lease: 1},
		&Put{Key: "k2", Value: val(`{"v":1}`)},
		&Delete{Key: "k"},
		&Grant{TTL: 10},
		&KeepAlive{ID: 1},
		&Revoke{ID: 1},
		&Txn{Success: []TxnOp{{Put: put}}},
		&Put{Key: "k", Value: val(`{"v":1}`), Lease: 99}, // would also fail for its lease: the conflict is reported
	} {
		r := mustFail(t, s, keyed("dup", body), ErrIdempotencyConflict)
		if r.Op != opOf(body) || r.Cached {
			t.Fatalf("%T: %+v", body, r)
		}
		if !errors.Is(r.Err, ErrIdempotencyConflict) || !bytes.Contains([]byte(r.Err.Error()), []byte(`"dup"`)) {
			t.Fatalf("error %q does not name the key", r.Err)
		}
	}
	mustCached(t, s, t0+1, keyed("dup", put), first)
	// Another key with the same request applies again.
	r, _ := applyFresh(t, s, t0+2, keyed("dup2", put))
	eq(t, "second put", r.Reply, any(&schema.KVPutReply{Revision: 3}))
	eq(t, "version", getKey(t, s, "k").Version, int64(2))
	// Without a key nothing is remembered or checked.
	mustApply(t, s, t0+3, put)
	eq(t, "entries", s.IdempotencyCount(), 2)

	// Requests of different operations whose bodies encode to the same
	// bytes (00 00 00) are different requests.
	eq(t, "same body bytes", string(requestBytes(keyed("", &Txn{}))[1:]), string(requestBytes(keyed("", &Delete{Key: ""}))[1:]))
	_, empty := applyFresh(t, s, t0+4, keyed("same-bytes", &Txn{}))
	mustFail(t, s, keyed("same-bytes", &Delete{Key: ""}), ErrIdempotencyConflict)
	mustCached(t, s, t0+5, keyed("same-bytes", &Txn{}), empty)
}

// A command that fails is not remembered: its retry, once the cause is
// fixed, applies; its key may be reused for another request; a failed
// transaction likewise.
func TestIdempotencyFailedCommandsAreNotRecorded(t *testing.T) {
	s := New()
	c := keyed("req-1", &Put{Key: "svc.a", Value: val(`1`), Lease: 5})
	mustFail(t, s, c, ErrLeaseNotFound)
	eq(t, "entries after a failure", s.IdempotencyCount(), 0)
	mustFail(t, s, c, ErrLeaseNotFound) // the retry fails the same way, no conflict
	mustApply(t, s, t0, &Grant{ID: 5, TTL: 10})
	r, first := applyFresh(t, s, t0, c)
	eq(t, "applied", r.Reply, any(&schema.KVPutReply{Revision: 1}))
	mustCached(t, s, t0, c, first)

	// A failed key reused for something else applies.
	mustFail(t, s, keyed("req-2", &Revoke{ID: 77}), ErrLeaseNotFound)
	applyFresh(t, s, t0, keyed("req-2", &Put{Key: "b", Value: val(`2`)}))

	// A transaction that fails (not one whose compare fails) is not
	// remembered either.
	txn := &Txn{Success: []TxnOp{putOp("c", `1`), delPrefixOp("", 1)}}
	mustFail(t, s, keyed("req-3", txn), ErrTooLarge)
	eq(t, "entries", s.IdempotencyCount(), 2)
	txn.Success[1] = delPrefixOp("", 10)
	rep, _ := applyFresh(t, s, t0, keyed("req-3", txn))
	eq(t, "deleted", rep.Reply.(*schema.KVTxnReply).Responses[1].Delete.Deleted, int64(3))
}

// Expire and SetLimits are not covered by keys: they apply every time,
// record nothing and never conflict.
func TestIdempotencyIgnoredForExpireAndLimits(t *testing.T) {
	s := New()
	run(t, s, step{t0, &Grant{TTL: 1}}, step{t0, &Put{Key: "a", Value: val(`1`), Lease: 1}})
	exp := keyed("tick", &Expire{IDs: []int64{1}})
	r := mustApply(t, s, t0+500, exp)
	eq(t, "not yet expired", len(r.Expired), 0)
	r = mustApply(t, s, t0+2_000, exp)
	if r.Cached || len(r.Expired) != 1 || len(r.Events) != 1 {
		t.Fatalf("keyed expire did not apply again: %+v", r)
	}
	lim := keyed("tick", &Limits{MaxLeases: 7, MaxKeysPerLease: 7, IdempotencyEntries: 9})
	mustApply(t, s, t0+2_000, lim)
	mustApply(t, s, t0+2_000, keyed("tick", &Limits{MaxLeases: 8, MaxKeysPerLease: 8}))
	eq(t, "limits applied", s.Limits().MaxLeases, int64(8))
	eq(t, "entries", s.IdempotencyCount(), 0)
	// The key is free for a mutating command.
	applyFresh(t, s, t0+2_000, keyed("tick", &Put{Key: "b", Value: val(`1`)}))
	mustApply(t, s, t0+2_000, keyed("tick", &Expire{}))
	eq(t, "entries", s.IdempotencyCount(), 1)
}

// The cache is bounded by count: beyond Limits.IdempotencyEntries the
// oldest entry (by insertion; a retry does not refresh it) is evicted, and
// an evicted key applies again as new, with any body.
func TestIdempotencyEvictionByCount(t *testing.T) {
	s := New()
	mustApply(t, s, t0, &Limits{MaxLeases: 10, MaxKeysPerLease: 10, IdempotencyEntries: 3})
	replies := map[string][]byte{}
	for i := 1; i <= 3; i++ {
		k := fmt.Sprint("r", i)
		_, replies[k] = applyFresh(t, s, t0, keyed(k, &Put{Key: k, Value: val(`1`)}))
	}
	eq(t, "full", s.IdempotencyCount(), 3)
	// A retry of the oldest does not make it young.
	mustCached(t, s, t0, keyed("r1", &Put{Key: "r1", Value: val(`1`)}), replies["r1"])
	_, replies["r4"] = applyFresh(t, s, t0, keyed("r4", &Put{Key: "r4", Value: val(`1`)}))
	eq(t, "bounded", s.IdempotencyCount(), 3)
	// r1 is gone: it applies again.
	r, _ := applyFresh(t, s, t0, keyed("r1", &Put{Key: "r1", Value: val(`1`)}))
	eq(t, "r1 applied again", [2]int64{r.Reply.(*schema.KVPutReply).Revision, getKey(t, s, "r1").Version}, [2]int64{5, 2})
	// ... which evicted r2, the oldest now; r3 and r4 stay.
	applyFresh(t, s, t0, keyed("r2", &Delete{Key: "r2"})) // another body: no conflict once evicted
	eq(t, "r2 deleted", getKey(t, s, "r2") == nil, true)
	// Now r4, r1, r2 are cached; r3 was evicted by r2.
	mustCached(t, s, t0, keyed("r4", &Put{Key: "r4", Value: val(`1`)}), replies["r4"])
	applyFresh(t, s, t0, keyed("r3", &Put{Key: "r3", Value: val(`1`)}))
	// Lowering the limit evicts at once, oldest first.
	mustApply(t, s, t0, &Limits{MaxLeases: 10, MaxKeysPerLease: 10, IdempotencyEntries: 1})
	eq(t, "after lowering", s.IdempotencyCount(), 1)
	mustCached(t, s, t0, keyed("r3", &Put{Key: "r3", Value: val(`1`)}), mustJSON(t, &schema.KVPutReply{Revision: 7}))
	applyFresh(t, s, t0, keyed("r2", &Put{Key: "r2", Value: val(`2`)}))
	if err := checkIdempotency(s); err != nil {
		t.Fatal(err)
	}
}

// The cache is bounded by age: an entry recorded more than
// Limits.IdempotencyRevisions revisions ago is dropped, by whatever command
// moves the revision, and its key applies again as new.
func TestIdempotencyEvictionByRevisions(t *testing.T) {
	s := New()
	mustApply(t, s, t0, &Limits{MaxLeases: 10, MaxKeysPerLease: 10, IdempotencyRevisions: 3})
	mustApply(t, s, t0, &Put{Key: "x", Value: val(`0`)}) // rev 1
	c := keyed("old", &Put{Key: "a", Value: val(`1`)})
	_, first := applyFresh(t, s, t0, c)                    // rev 2, recorded at 2
	applyFresh(t, s, t0, keyed("grant", &Grant{TTL: 100})) // rev 2: recorded at 2, no revision change
	mustApply(t, s, t0, &Put{Key: "x", Value: val(`1`)})   // rev 3
	mustApply(t, s, t0, &Put{Key: "x", Value: val(`2`)})   // rev 4
	mustApply(t, s, t0, &Put{Key: "x", Value: val(`3`)})   // rev 5: 2 is exactly 3 revisions ago
	mustCached(t, s, t0, c, first)                         // still there
	mustFail(t, s, &Put{Key: "y", Value: val(`1`), Lease: 50}, ErrLeaseNotFound)
	mustApply(t, s, t0, &Grant{TTL: 5}) // no revision change: nothing ages
	eq(t, "entries at revision 5", s.IdempotencyCount(), 2)
	mustApply(t, s, t0, &Delete{Key: "x"}) // rev 6: 2 is 4 revisions ago
	eq(t, "entries at revision 6", s.IdempotencyCount(), 0)
	r, _ := applyFresh(t, s, t0, c)
	eq(t, "applied again", getKey(t, s, "a").Version, int64(2))
	eq(t, "at", r.Reply, any(&schema.KVPutReply{Revision: 7}))
	// Expiries age entries too.
	mustApply(t, s, t0, &Put{Key: "e1", Value: val(`1`), TTL: 1}) // rev 8
	mustApply(t, s, t0, &Put{Key: "e2", Value: val(`1`), TTL: 1}) // rev 9
	mustApply(t, s, t0, &Put{Key: "e3", Value: val(`1`), TTL: 1}) // rev 10: 7 is 3 ago
	eq(t, "before expiry", s.IdempotencyCount(), 1)
	r = mustApply(t, s, t0+5_000, &Expire{IDs: s.Expired(t0+5_000, 0)}) // revs 11, 12, 13
	eq(t, "expired", len(r.Expired) >= 3, true)
	eq(t, "after expiry", s.IdempotencyCount(), 0)
	if err := checkIdempotency(s); err != nil {
		t.Fatal(err)
	}
}

// The cache lives in snapshots: a restored state answers retries with the
// same bytes, refuses conflicts, and evicts in the same order as the
// original, so the two stay identical under the same further commands.
func TestIdempotencySurvivesSnapshot(t *testing.T) {
	s := New()
	run(t, s,
		step{t0, &Limits{MaxLeases: 100, MaxKeysPerLease: 100, IdempotencyEntries: 5, IdempotencyRevisions: 12}},
		step{t0, &Grant{TTL: 60}},
	)
	type sent struct {
		c     Command
		reply []byte
	}
	var history []sent
	send := func(key string, body any) {
		_, reply := applyFresh(t, s, s.Now()+10, keyed(key, body))
		history = append(history, sent{keyed(key, body), reply})
	}
	send("k1", &Put{Key: "a", Value: val(`{"html":"<b>&</b>","sep":"\u2028 ","é":"\u00e9"}`), Lease: 1})
	send("k2", &Txn{Success: []TxnOp{getOp("a"), putOp("b", `"<>"`)}})
	send("k3", &Grant{TTL: 5, Metadata: val(`{"<":">"}`)})
	send("k4", &KeepAlive{ID: 1})
	send("k5", &Delete{Key: "b", PrevKV: true})
	data := snap(t, s)
	c := restored(t, data)
	eq(t, "rewritten", string(snap(t, c)), string(data))
	eq(t, "entries", c.IdempotencyCount(), 5)
	eq(t, "digest", stateDigest(c), stateDigest(s))
	for _, h := range history {
		mustCached(t, c, c.Now(), h.c, h.reply)
	}
	mustFail(t, c, keyed("k1", &Put{Key: "a", Value: val(`2`)}), ErrIdempotencyConflict)

	// The same further commands, to both: results and snapshots agree after
	// every one, while entries are evicted by count and by age.
	more := []Command{
		keyed("k6", &Put{Key: "c", Value: val(`1`)}),
		keyed("k1", history[0].c.Body), // cached on both
		keyed("k7", &Put{Key: "d", Value: val(`1`)}),
		keyed("k2", history[1].c.Body), // k2 was evicted by k7: applies again on both
		keyed("k3", &Revoke{ID: 1}),    // k3 evicted: no conflict
		{Op: OpPut, Body: &Put{Key: "e", Value: val(`1`)}},
		keyed("k8", &Txn{Compare: []Compare{cmpInt("c", TargetVersion, CmpEq, 1)}, Success: []TxnOp{putOp("c", `2`)}}),
	}
	for i := 0; i < 15; i++ {
		more = append(more, keyed(fmt.Sprint("f", i), &Put{Key: fmt.Sprint("f", i%3), Value: val(fmt.Sprint(i))}))
		if i%4 == 0 {
			more = append(more, keyed("k8", more[6].Body), keyed(fmt.Sprint("f", i/2), &Put{Key: fmt.Sprint("f", i/2%3), Value: val(fmt.Sprint(i / 2))}))
		}
	}
	cached := 0
	for i, cmd := range more {
		now := s.Now() + 7
		ra, rb := apply(t, s, now, cmd), apply(t, c, now, cmd)
		if ja, jb := resultJSON(ra), resultJSON(rb); ja != jb || ra.Cached != rb.Cached {
			t.Fatalf("command %d: original %s (cached %v), restored %s (cached %v)", i, ja, ra.Cached, jb, rb.Cached)
		}
		if ra.Cached {
			cached++
		}
		eq(t, fmt.Sprint("snapshot after command ", i), string(snap(t, c)), string(snap(t, s)))
		if err := checkIdempotency(c); err != nil {
			t.Fatal(err)
		}
	}
	if cached < 3 {
		t.Fatalf("only %d cached answers: the sequence shows nothing", cached)
	}
	// And after another round trip.
	c2 := restored(t, snap(t, c))
	mustCached(t, c2, c2.Now(), more[len(more)-1], mustJSON(t, mustFirstReply(t, s, more[len(more)-1])))
}

// mustFirstReply returns the reply the cache holds for a command's key.
func mustFirstReply(t testing.TB, s *State, c Command) json.RawMessage {
	t.Helper()
	e, ok := s.idemByKey.Get(&idemEntry{key: c.IdempotencyKey})
	if !ok {
		t.Fatalf("no entry for %q", c.IdempotencyKey)
	}
	return e.reply
}

// A cached reply is the JSON the service sends: HTML characters and
// U+2028 are not escaped, and it survives a snapshot byte for byte.
func TestIdempotencyReplyBytes(t *testing.T) {
	s := New()
	value := "{\"h\":\"<b>&</b>\",\"ls\":\"\u2028\",\"esc\":\"\\u00e9\"}"
	mustApply(t, s, t0, &Put{Key: "a", Value: val(value)})
	c := keyed("read", &Txn{Success: []TxnOp{getOp("a")}})
	_, first := applyFresh(t, s, t0, c)
	want := `{"succeeded":true,"revision":1,"responses":[{"get":{"revision":1,"kvs":[{"key":"a","value":` + value +
		`,"create_revision":1,"mod_revision":1,"version":1}],"count":1,"more":false}}]}`
	eq(t, "first reply", string(first), want)
	mustCached(t, s, t0, c, []byte(want))
	r := restored(t, snap(t, s))
	mustCached(t, r, t0, c, []byte(want))
	mustCached(t, restored(t, snap(t, r)), t0, c, []byte(want))
}

// checkIdempotency checks the cache's own invariants: both indexes hold the
// same entries, sequence numbers are unique and below the counter,
// revisions do not decrease with them, and the limits hold.
func checkIdempotency(s *State) error {
	if s.idemByKey.Len() != s.idemBySeq.Len() || s.IdempotencyCount() != s.idemBySeq.Len() {
		return fmt.Errorf("idempotency indexes: %d by key, %d by sequence", s.idemByKey.Len(), s.idemBySeq.Len())
	}
	if n := int64(s.IdempotencyCount()); n > s.limits.IdempotencyEntries {
		return fmt.Errorf("%d idempotency entries, limit %d", n, s.limits.IdempotencyEntries)
	}
	var err error
	var prev *idemEntry
	s.idemBySeq.Ascend(func(e *idemEntry) bool {
		switch byKey, ok := s.idemByKey.Get(e); {
		case !ok || byKey != e:
			err = fmt.Errorf("entry %q (seq %d) missing from the key index", e.key, e.seq)
		case e.seq == 0 || e.seq > s.idemSeq:
			err = fmt.Errorf("entry %q: seq %d, counter %d", e.key, e.seq, s.idemSeq)
		case prev != nil && prev.revision > e.revision:
			err = fmt.Errorf("entry %q (seq %d) at revision %d after %q at %d", e.key, e.seq, e.revision, prev.key, prev.revision)
		case e.revision > s.revision || e.revision < s.revision-s.limits.IdempotencyRevisions:
			err = fmt.Errorf("entry %q at revision %d, state at %d, age limit %d", e.key, e.revision, s.revision, s.limits.IdempotencyRevisions)
		case !json.Valid(e.reply):
			err = fmt.Errorf("entry %q: reply is not JSON", e.key)
		}
		prev = e
		return err == nil
	})
	return err
}
