package fsm

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/concord-io/concord/schema"
)

func kaReply(id, ttl int64) schema.LeaseKeepAliveReply {
	return schema.LeaseKeepAliveReply{ID: id, TTL: ttl, RemainingTTL: ttl, RemainingMS: ttl * 1000}
}

func kamReply(notFound []int64, leases ...schema.LeaseKeepAliveReply) *schema.LeaseKeepAliveManyReply {
	if leases == nil {
		leases = []schema.LeaseKeepAliveReply{}
	}
	if notFound == nil {
		notFound = []int64{}
	}
	return &schema.LeaseKeepAliveManyReply{Leases: leases, NotFound: notFound}
}

// KeepAliveMany renews every listed explicit lease like KeepAlive without a
// ttl (each keeps its own), lists every other id as not found, in request
// order, and never fails.
func TestKeepAliveMany(t *testing.T) {
	noWrite := func(t *testing.T, s *State, r Result, rev int64) {
		t.Helper()
		eq(t, "events", len(r.Events), 0)
		eq(t, "revision", s.Revision(), rev)
		eq(t, "change log", len(loggedEvents(s)), int(rev))
	}
	runCases(t, []cmdCase{
		{
			name:  "renews each lease with its own ttl",
			setup: []step{{t0, &Grant{TTL: 10}}, {t0, &Grant{TTL: 30}}, {t0, &Grant{TTL: 5}}, {t0, &Put{Key: "a", Value: val(`1`), Lease: 2}}},
			now:   t0 + 4_000,
			cmd:   &KeepAliveMany{IDs: []int64{2, 1}},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(kamReply(nil, kaReply(2, 30), kaReply(1, 10))))
				eq(t, "deadline 1", s.getLease(1).deadline, int64(t0+4_000+10_000))
				eq(t, "deadline 2", s.getLease(2).deadline, int64(t0+4_000+30_000))
				eq(t, "lease 3 not listed, not renewed", s.getLease(3).deadline, int64(t0+5_000))
				d, _ := s.NextDeadline()
				eq(t, "next deadline", d, int64(t0+5_000))
				eq(t, "expired later", s.Expired(t0+14_001, 0), []int64{3, 1})
				kv := getKey(t, s, "a")
				eq(t, "key remaining", *kv.RemainingMS, int64(30_000))
				eq(t, "key mod_revision", kv.ModRevision, int64(1))
				noWrite(t, s, r, 1)
			},
		},
		{
			name:  "a ttl set by an earlier keep-alive is the lease's own",
			setup: []step{{t0, &Grant{TTL: 10}}, {t0, &KeepAlive{ID: 1, TTL: 3}}},
			now:   t0 + 1_000,
			cmd:   &KeepAliveMany{IDs: []int64{1}},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(kamReply(nil, kaReply(1, 3))))
				eq(t, "deadline", s.getLease(1).deadline, int64(t0+4_000))
			},
		},
		{
			name: "unknown, revoked, expired and anonymous ids are not found, in request order",
			setup: []step{
				{t0, &Grant{TTL: 10}},                         // 1
				{t0, &Put{Key: "k", Value: val(`1`), TTL: 5}}, // anonymous 2
				{t0, &Grant{TTL: 10}},                         // 3, revoked
				{t0, &Revoke{ID: 3}},                          //
				{t0, &Grant{TTL: 1}},                          // 4, expired
				{t0 + 2_000, &Expire{IDs: []int64{4}}},        //
				{t0 + 2_000, &Grant{TTL: 20}},                 // 5
			},
			cmd: &KeepAliveMany{IDs: []int64{99, 2, 5, 3, 0, 1, -5, 4, 1 << 53}},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(kamReply([]int64{99, 2, 3, 0, -5, 4, 1 << 53}, kaReply(5, 20), kaReply(1, 10))))
				eq(t, "anonymous lease untouched", s.getLease(2).deadline, int64(t0+5_000))
				eq(t, "deadline 1", s.getLease(1).deadline, int64(t0+2_000+10_000))
				noWrite(t, s, r, 1)
			},
		},
		{
			name:  "nothing found is no failure",
			setup: []step{{t0, &Put{Key: "k", Value: val(`1`), TTL: 5}}},
			cmd:   &KeepAliveMany{IDs: []int64{7, 1}},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(kamReply([]int64{7, 1})))
			},
		},
		{
			name:  "an id listed twice is renewed and answered twice",
			setup: []step{{t0, &Grant{TTL: 10}}, {t0, &Grant{TTL: 20}}},
			now:   t0 + 500,
			cmd:   &KeepAliveMany{IDs: []int64{1, 2, 1, 8, 8}},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(kamReply([]int64{8, 8}, kaReply(1, 10), kaReply(2, 20), kaReply(1, 10))))
				eq(t, "deadline 1", s.getLease(1).deadline, int64(t0+500+10_000))
			},
		},
		{
			name:  "an empty list",
			setup: []step{{t0, &Grant{TTL: 10}}},
			now:   t0 + 500,
			cmd:   &KeepAliveMany{},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(kamReply(nil)))
				eq(t, "reply JSON", string(mustJSON(t, r.Reply)), `{"leases":[],"not_found":[]}`)
				eq(t, "not renewed", s.getLease(1).deadline, int64(t0+10_000))
				eq(t, "clock", s.Now(), int64(t0+500))
			},
		},
		{
			name:  "a lease past its deadline but not yet expired is renewed",
			setup: []step{{t0, &Grant{TTL: 1}}},
			now:   t0 + 5_000,
			cmd:   &KeepAliveMany{IDs: []int64{1}},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(kamReply(nil, kaReply(1, 1))))
				eq(t, "expired", len(s.Expired(s.Now(), 0)), 0)
			},
		},
	})
}

// KeepAliveMany leaves exactly the state that one KeepAlive per found id,
// at the same stamp, leaves; its reply lists what those would reply.
func TestKeepAliveManyEqualsKeepAlives(t *testing.T) {
	setup := []step{
		{t0, &Grant{TTL: 10}}, {t0, &Grant{TTL: 3}}, {t0, &Grant{TTL: 7, Metadata: val(`{"o":1}`)}},
		{t0, &Put{Key: "a", Value: val(`1`), Lease: 3}}, {t0, &Put{Key: "t", Value: val(`1`), TTL: 2}},
	}
	ids := []int64{3, 4, 1, 3, 50}
	a, b := New(), New()
	run(t, a, setup...)
	run(t, b, setup...)
	r := mustApply(t, a, t0+1_234, &KeepAliveMany{IDs: ids})
	var leases []schema.LeaseKeepAliveReply
	var notFound []int64
	for _, id := range ids {
		kr := apply(t, b, t0+1_234, &KeepAlive{ID: id})
		if kr.Err != nil {
			notFound = append(notFound, id)
			continue
		}
		leases = append(leases, *kr.Reply.(*schema.LeaseKeepAliveReply))
	}
	eq(t, "reply", r.Reply, any(kamReply(notFound, leases...)))
	eq(t, "state", string(snap(t, a)), string(snap(t, b)))
	eq(t, "digest", stateDigest(a), stateDigest(b))
}

// KeepAliveMany takes an idempotency key: a retry gets the first reply and
// renews nothing again, even after the leases changed; the same key with
// another list, or the same ids in another order, is a conflict.
func TestKeepAliveManyIdempotent(t *testing.T) {
	s := New()
	run(t, s, step{t0, &Grant{TTL: 10}}, step{t0, &Grant{TTL: 20}})
	c := keyed("sess-1:ka-1", &KeepAliveMany{IDs: []int64{2, 9, 1}})
	r, first := applyFresh(t, s, t0+1_000, c)
	eq(t, "first reply", r.Reply, any(kamReply([]int64{9}, kaReply(2, 20), kaReply(1, 10))))
	eq(t, "first JSON", string(first), `{"leases":[{"id":2,"ttl":20,"remaining_ttl":20,"remaining_ms":20000},{"id":1,"ttl":10,"remaining_ttl":10,"remaining_ms":10000}],"not_found":[9]}`)
	eq(t, "entries", s.IdempotencyCount(), 1)
	// The retry renews nothing: the deadlines stay those of the first.
	mustCached(t, s, t0+3_000, c, first)
	eq(t, "deadline 1", s.getLease(1).deadline, int64(t0+11_000))
	eq(t, "deadline 2", s.getLease(2).deadline, int64(t0+21_000))
	// Even after lease 1 is gone, the retry answers as the first time.
	mustApply(t, s, t0+3_000, &Revoke{ID: 1})
	cr := mustCached(t, s, t0+4_000, c, first)
	if !bytes.Equal(cr.Reply.(json.RawMessage), first) {
		t.Fatal("cached reply changed")
	}
	mustFail(t, s, keyed("sess-1:ka-1", &KeepAliveMany{IDs: []int64{2, 9}}), ErrIdempotencyConflict)
	mustFail(t, s, keyed("sess-1:ka-1", &KeepAliveMany{IDs: []int64{1, 9, 2}}), ErrIdempotencyConflict)
	mustFail(t, s, keyed("sess-1:ka-1", &KeepAlive{ID: 2}), ErrIdempotencyConflict)
	// A new key applies, and an empty list is a request of its own.
	r, _ = applyFresh(t, s, t0+5_000, keyed("sess-1:ka-2", &KeepAliveMany{IDs: []int64{2, 1}}))
	eq(t, "second reply", r.Reply, any(kamReply([]int64{1}, kaReply(2, 20))))
	eq(t, "deadline 2 renewed", s.getLease(2).deadline, int64(t0+25_000))
	_, empty := applyFresh(t, s, t0+5_000, keyed("sess-1:ka-3", &KeepAliveMany{}))
	mustCached(t, s, t0+6_000, keyed("sess-1:ka-3", &KeepAliveMany{}), empty)
	mustFail(t, s, keyed("sess-1:ka-3", &KeepAliveMany{IDs: []int64{2}}), ErrIdempotencyConflict)
	// It all survives a snapshot.
	c2 := restored(t, snap(t, s))
	mustCached(t, c2, t0+7_000, c, first)
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
}
