package fsm

import (
	"encoding/json"
	"testing"

	"github.com/concord-io/concord/schema"
)

func TestGrant(t *testing.T) {
	runCases(t, []cmdCase{
		{
			name: "first auto id is 1, revision 0, deadline now+ttl",
			now:  t0,
			cmd:  &Grant{TTL: 10},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(&schema.LeaseGrantReply{ID: 1, TTL: 10, Revision: 0}))
				eq(t, "events", len(r.Events), 0)
				li := info(t, s, 1)
				eq(t, "info", *li, schema.LeaseInfo{ID: 1, TTL: 10, RemainingTTL: 10, RemainingMS: 10_000,
					Metadata: json.RawMessage(`{}`), Keys: []string{}})
				d, ok := s.NextDeadline()
				eq(t, "next deadline", d, int64(t0+10_000))
				eq(t, "has deadline", ok, true)
				eq(t, "revision", s.Revision(), int64(0))
				eq(t, "now", s.Now(), int64(t0))
			},
		},
		{
			name:  "auto ids count up 1,2,3",
			setup: []step{{t0, &Grant{TTL: 5}}, {t0, &Grant{TTL: 6}}},
			cmd:   &Grant{TTL: 7},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(&schema.LeaseGrantReply{ID: 3, TTL: 7}))
				eq(t, "ttl 1", info(t, s, 1).TTL, int64(5))
				eq(t, "ttl 2", info(t, s, 2).TTL, int64(6))
			},
		},
		{
			name:  "reply and granted_revision carry the current revision",
			setup: []step{{t0, &Put{Key: "a", Value: val(`1`)}}, {t0, &Put{Key: "b", Value: val(`2`)}}},
			cmd:   &Grant{TTL: 3},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(&schema.LeaseGrantReply{ID: 1, TTL: 3, Revision: 2}))
				eq(t, "granted_revision", info(t, s, 1).GrantedRevision, int64(2))
				eq(t, "revision unchanged", s.Revision(), int64(2))
			},
		},
		{
			name: "metadata is kept",
			now:  t0,
			cmd:  &Grant{TTL: 3, Metadata: val(`{"owner":"billing","n":[1,2]}`)},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "metadata", string(info(t, s, 1).Metadata), `{"owner":"billing","n":[1,2]}`)
			},
		},
		{
			name: "requested id is granted",
			now:  t0,
			cmd:  &Grant{ID: 42, TTL: 3},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(&schema.LeaseGrantReply{ID: 42, TTL: 3}))
				eq(t, "ttl", info(t, s, 42).TTL, int64(3))
				leaseGone(t, s, 1)
			},
		},
		{
			name:  "requested id bumps the counter: next auto id is above it",
			setup: []step{{t0, &Grant{TTL: 1}}, {t0, &Grant{ID: 42, TTL: 3}}},
			cmd:   &Grant{TTL: 4},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "auto id", r.Reply.(*schema.LeaseGrantReply).ID, int64(43))
			},
		},
		{
			name:  "requested id below the counter does not lower it",
			setup: []step{{t0, &Grant{ID: 42, TTL: 3}}, {t0, &Grant{ID: 7, TTL: 3}}},
			cmd:   &Grant{TTL: 4},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "auto id", r.Reply.(*schema.LeaseGrantReply).ID, int64(43))
				eq(t, "lease 7", info(t, s, 7).ID, int64(7))
			},
		},
		{
			name:  "auto ids are never reused after revoke",
			setup: []step{{t0, &Grant{TTL: 1}}, {t0, &Grant{TTL: 1}}, {t0, &Revoke{ID: 2}}, {t0, &Revoke{ID: 1}}},
			cmd:   &Grant{TTL: 1},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "auto id", r.Reply.(*schema.LeaseGrantReply).ID, int64(3))
			},
		},
		{
			name:  "auto ids are never reused after expiry",
			setup: []step{{t0, &Grant{TTL: 1}}, {t0 + 1001, &Expire{IDs: []int64{1}}}},
			cmd:   &Grant{TTL: 1},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "auto id", r.Reply.(*schema.LeaseGrantReply).ID, int64(2))
			},
		},
		{
			name:  "auto ids skip ids used by anonymous leases",
			setup: []step{{t0, &Grant{TTL: 1}}, {t0, &Put{Key: "k", Value: val(`1`), TTL: 5}}},
			cmd:   &Grant{TTL: 1},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "auto id", r.Reply.(*schema.LeaseGrantReply).ID, int64(3))
				eq(t, "anonymous lease 2", info(t, s, 2).Anonymous, true)
			},
		},
		{
			name:    "requested id taken -> lease_exists",
			setup:   []step{{t0, &Grant{ID: 5, TTL: 10}}},
			cmd:     &Grant{ID: 5, TTL: 99},
			wantErr: ErrLeaseExists,
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "ttl kept", info(t, s, 5).TTL, int64(10))
			},
		},
		{
			name:    "requested id of an auto-granted lease -> lease_exists",
			setup:   []step{{t0, &Grant{TTL: 10}}},
			cmd:     &Grant{ID: 1, TTL: 10},
			wantErr: ErrLeaseExists,
		},
		{
			name:    "requested id held by an anonymous lease -> lease_exists",
			setup:   []step{{t0, &Put{Key: "k", Value: val(`1`), TTL: 5}}},
			cmd:     &Grant{ID: 1, TTL: 10},
			wantErr: ErrLeaseExists,
		},
		{
			name:    "max leases -> limit_exceeded",
			setup:   []step{{t0, &Limits{MaxLeases: 2, MaxKeysPerLease: 10}}, {t0, &Grant{TTL: 1}}, {t0, &Grant{TTL: 1}}},
			cmd:     &Grant{TTL: 1},
			wantErr: ErrLimitExceeded,
		},
		{
			name:    "max leases applies to requested ids too",
			setup:   []step{{t0, &Limits{MaxLeases: 1, MaxKeysPerLease: 10}}, {t0, &Grant{TTL: 1}}},
			cmd:     &Grant{ID: 100, TTL: 1},
			wantErr: ErrLimitExceeded,
			check: func(t *testing.T, s *State, r Result) {
				// The failed grant must not have bumped the id counter.
				mustApply(t, s, s.Now(), &Revoke{ID: 1})
				r = mustApply(t, s, s.Now(), &Grant{TTL: 1})
				eq(t, "next auto id", r.Reply.(*schema.LeaseGrantReply).ID, int64(2))
			},
		},
		{
			name: "anonymous leases count towards max leases",
			setup: []step{{t0, &Limits{MaxLeases: 2, MaxKeysPerLease: 10}}, {t0, &Grant{TTL: 1}},
				{t0, &Put{Key: "k", Value: val(`1`), TTL: 1}}},
			cmd:     &Grant{TTL: 1},
			wantErr: ErrLimitExceeded,
		},
		{
			name: "a freed slot can be granted again",
			setup: []step{{t0, &Limits{MaxLeases: 1, MaxKeysPerLease: 10}}, {t0, &Grant{TTL: 1}},
				{t0, &Revoke{ID: 1}}},
			cmd: &Grant{TTL: 1},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "id", r.Reply.(*schema.LeaseGrantReply).ID, int64(2))
			},
		},
	})
}

func TestKeepAlive(t *testing.T) {
	runCases(t, []cmdCase{
		{
			name:  "deadline is now + ttl",
			setup: []step{{t0, &Grant{TTL: 10}}},
			now:   t0 + 4_321,
			cmd:   &KeepAlive{ID: 1},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(&schema.LeaseKeepAliveReply{ID: 1, TTL: 10, RemainingTTL: 10, RemainingMS: 10_000}))
				eq(t, "deadline", s.getLease(1).deadline, int64(t0+4_321+10_000))
				eq(t, "remaining", info(t, s, 1).RemainingMS, int64(10_000))
				d, _ := s.NextDeadline()
				eq(t, "next deadline", d, int64(t0+4_321+10_000))
				eq(t, "events", len(r.Events), 0)
				eq(t, "revision", s.Revision(), int64(0))
			},
		},
		{
			name:  "new ttl replaces the old one from now on",
			setup: []step{{t0, &Grant{TTL: 10}}},
			now:   t0 + 1_000,
			cmd:   &KeepAlive{ID: 1, TTL: 3},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(&schema.LeaseKeepAliveReply{ID: 1, TTL: 3, RemainingTTL: 3, RemainingMS: 3_000}))
				eq(t, "deadline", s.getLease(1).deadline, int64(t0+4_000))
				// A later keep-alive without ttl keeps the new ttl.
				r = mustApply(t, s, t0+2_000, &KeepAlive{ID: 1})
				eq(t, "second reply", r.Reply, any(&schema.LeaseKeepAliveReply{ID: 1, TTL: 3, RemainingTTL: 3, RemainingMS: 3_000}))
				eq(t, "ttl", info(t, s, 1).TTL, int64(3))
				eq(t, "deadline", s.getLease(1).deadline, int64(t0+5_000))
			},
		},
		{
			name:  "a shorter ttl moves the deadline earlier in the expiry index",
			setup: []step{{t0, &Grant{TTL: 100}}, {t0, &Grant{TTL: 50}}},
			now:   t0 + 10,
			cmd:   &KeepAlive{ID: 1, TTL: 1},
			check: func(t *testing.T, s *State, r Result) {
				d, _ := s.NextDeadline()
				eq(t, "next deadline", d, int64(t0+1_010))
				eq(t, "expired after 1s", s.Expired(t0+1_011, 0), []int64{1})
			},
		},
		{
			name:  "a lease past its deadline but not yet expired is renewed",
			setup: []step{{t0, &Grant{TTL: 1}}},
			now:   t0 + 5_000,
			cmd:   &KeepAlive{ID: 1},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "remaining", info(t, s, 1).RemainingMS, int64(1_000))
				eq(t, "expired", len(s.Expired(s.Now(), 0)), 0)
			},
		},
		{
			name:  "keys of the lease are kept and show the new remaining time",
			setup: []step{{t0, &Grant{TTL: 2}}, {t0, &Put{Key: "a", Value: val(`1`), Lease: 1}}},
			now:   t0 + 1_500,
			cmd:   &KeepAlive{ID: 1},
			check: func(t *testing.T, s *State, r Result) {
				kv := getKey(t, s, "a")
				eq(t, "remaining_ms", *kv.RemainingMS, int64(2_000))
				eq(t, "mod_revision unchanged", kv.ModRevision, int64(1))
			},
		},
		{
			name:    "unknown lease -> lease_not_found",
			setup:   []step{{t0, &Grant{TTL: 2}}},
			cmd:     &KeepAlive{ID: 2},
			wantErr: ErrLeaseNotFound,
		},
		{
			name:    "revoked lease -> lease_not_found",
			setup:   []step{{t0, &Grant{TTL: 2}}, {t0, &Revoke{ID: 1}}},
			cmd:     &KeepAlive{ID: 1},
			wantErr: ErrLeaseNotFound,
		},
		{
			name:    "anonymous lease -> lease_not_found",
			setup:   []step{{t0, &Put{Key: "k", Value: val(`1`), TTL: 5}}},
			cmd:     &KeepAlive{ID: 1, TTL: 9},
			wantErr: ErrLeaseNotFound,
		},
	})
}

func TestRevoke(t *testing.T) {
	withKeys := []step{
		{t0, &Grant{TTL: 10}},
		{t0, &Grant{TTL: 10}},
		{t0, &Put{Key: "svc.c", Value: val(`"c"`), Lease: 1}}, // rev 1
		{t0, &Put{Key: "svc.a", Value: val(`"a"`), Lease: 1}}, // rev 2
		{t0, &Put{Key: "other", Value: val(`"o"`), Lease: 2}}, // rev 3
		{t0, &Put{Key: "svc.b", Value: val(`"b"`), Lease: 1}}, // rev 4
		{t0, &Put{Key: "plain", Value: val(`"p"`)}},           // rev 5
	}
	runCases(t, []cmdCase{
		{
			name:  "all keys deleted at one new revision, in key order",
			setup: withKeys,
			cmd:   &Revoke{ID: 1},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(&schema.LeaseRevokeReply{Revision: 6, Deleted: 3}))
				eq(t, "revision", s.Revision(), int64(6))
				keys := checkEvents(t, r.Events, 6, schema.EventDelete, schema.CauseLeaseRevoked)
				eq(t, "event keys", keys, []string{"svc.a", "svc.b", "svc.c"})
				for _, e := range r.Events {
					eq(t, "event lease", e.Lease, int64(1))
				}
				eq(t, "keys left", keysOf(getAll(s, s.Now())), []string{"other", "plain"})
				leaseGone(t, s, 1)
				eq(t, "other lease", info(t, s, 2).Keys, []string{"other"})
				eq(t, "lease count", func() [2]int64 { e, a := s.LeaseCount(); return [2]int64{e, a} }(), [2]int64{1, 0})
			},
		},
		{
			name:  "a lease with no keys goes without a new revision",
			setup: []step{{t0, &Put{Key: "a", Value: val(`1`)}}, {t0, &Grant{TTL: 10}}},
			cmd:   &Revoke{ID: 1},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(&schema.LeaseRevokeReply{Revision: 1, Deleted: 0}))
				eq(t, "revision", s.Revision(), int64(1))
				eq(t, "events", len(r.Events), 0)
				leaseGone(t, s, 1)
				if _, ok := s.NextDeadline(); ok {
					t.Fatal("NextDeadline still reports a deadline")
				}
			},
		},
		{
			name: "a lease whose keys were all deleted goes without a new revision",
			setup: []step{{t0, &Grant{TTL: 10}}, {t0, &Put{Key: "a", Value: val(`1`), Lease: 1}},
				{t0, &Delete{Key: "a"}}},
			cmd: &Revoke{ID: 1},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(&schema.LeaseRevokeReply{Revision: 2, Deleted: 0}))
				eq(t, "revision", s.Revision(), int64(2))
			},
		},
		{
			// The wire contract does not forbid it; the key goes with its lease.
			name:  "revoking an anonymous lease deletes its key",
			setup: []step{{t0, &Put{Key: "k", Value: val(`1`), TTL: 5}}},
			cmd:   &Revoke{ID: 1},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(&schema.LeaseRevokeReply{Revision: 2, Deleted: 1}))
				eq(t, "keys", s.KeyCount(), 0)
				e, a := s.LeaseCount()
				eq(t, "lease count", [2]int64{e, a}, [2]int64{0, 0})
			},
		},
		{
			name:    "unknown lease -> lease_not_found",
			setup:   withKeys,
			cmd:     &Revoke{ID: 3},
			wantErr: ErrLeaseNotFound,
		},
		{
			name:    "revoking twice -> lease_not_found",
			setup:   append(append([]step{}, withKeys...), step{t0, &Revoke{ID: 1}}),
			cmd:     &Revoke{ID: 1},
			wantErr: ErrLeaseNotFound,
		},
	})
}

func TestExpire(t *testing.T) {
	// Lease 1: ttl 1, keys b.1 b.2; lease 2: ttl 1, no keys; lease 3: ttl 1,
	// key a.1; lease 4: ttl 10, key c. All granted at t0.
	leases := []step{
		{t0, &Grant{TTL: 1}},
		{t0, &Grant{TTL: 1}},
		{t0, &Grant{TTL: 1}},
		{t0, &Grant{TTL: 10}},
		{t0, &Put{Key: "b.2", Value: val(`2`), Lease: 1}},
		{t0, &Put{Key: "b.1", Value: val(`1`), Lease: 1}},
		{t0, &Put{Key: "a.1", Value: val(`3`), Lease: 3}},
		{t0, &Put{Key: "c", Value: val(`4`), Lease: 4}},
	}
	runCases(t, []cmdCase{
		{
			name:  "deadline equal to now is not expired",
			setup: leases,
			now:   t0 + 1_000,
			cmd:   &Expire{IDs: []int64{1, 2, 3}},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "expired", len(r.Expired), 0)
				eq(t, "events", len(r.Events), 0)
				eq(t, "revision", s.Revision(), int64(4))
				eq(t, "leases", len(s.LeaseList(true, 0, 100, s.Now()).Leases), 4)
				eq(t, "now", s.Now(), int64(t0+1_000))
			},
		},
		{
			name:  "deadline before now: one revision per lease with keys",
			setup: leases,
			now:   t0 + 1_001,
			cmd:   &Expire{IDs: []int64{3, 2, 1, 4}},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "expired", r.Expired, []ExpiredLease{
					{ID: 3, Keys: 1, Deadline: t0 + 1_000},
					{ID: 2, Keys: 0, Deadline: t0 + 1_000},
					{ID: 1, Keys: 2, Deadline: t0 + 1_000},
				})
				eq(t, "revision", s.Revision(), int64(6))
				eq(t, "events", len(r.Events), 3)
				// Lease 3 went first, at revision 5; lease 1 at revision 6,
				// its keys in key order, numbered from 0.
				eq(t, "lease 3 events", checkEvents(t, r.Events[:1], 5, schema.EventDelete, schema.CauseLeaseExpired), []string{"a.1"})
				eq(t, "lease 1 events", checkEvents(t, r.Events[1:], 6, schema.EventDelete, schema.CauseLeaseExpired), []string{"b.1", "b.2"})
				eq(t, "event leases", []int64{r.Events[0].Lease, r.Events[1].Lease, r.Events[2].Lease}, []int64{3, 1, 1})
				eq(t, "keys left", keysOf(getAll(s, s.Now())), []string{"c"})
				for _, id := range []int64{1, 2, 3} {
					leaseGone(t, s, id)
				}
				eq(t, "lease 4 kept", info(t, s, 4).Keys, []string{"c"})
			},
		},
		{
			name:  "a keep-alive applied before the expire entry wins",
			setup: append(append([]step{}, leases...), step{t0 + 1_500, &KeepAlive{ID: 1}}),
			// The leader decided to expire lease 1 and 3 at t0+1_400 (stamp
			// earlier than the keep-alive's), but the keep-alive landed first.
			now: t0 + 1_400,
			cmd: &Expire{IDs: []int64{1, 3}},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "expired", r.Expired, []ExpiredLease{{ID: 3, Keys: 1, Deadline: t0 + 1_000}})
				eq(t, "lease 1 keys", info(t, s, 1).Keys, []string{"b.1", "b.2"})
				eq(t, "revision", s.Revision(), int64(5))
				eq(t, "now", s.Now(), int64(t0+1_500))
			},
		},
		{
			name:  "unknown and live ids are skipped",
			setup: leases,
			now:   t0 + 2_000,
			cmd:   &Expire{IDs: []int64{99, 4, 1, 1}},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "expired", r.Expired, []ExpiredLease{{ID: 1, Keys: 2, Deadline: t0 + 1_000}})
				eq(t, "revision", s.Revision(), int64(5))
				eq(t, "lease 4", info(t, s, 4).KeyCount, int64(1))
			},
		},
		{
			name:  "an anonymous lease expires with its key",
			setup: []step{{t0, &Put{Key: "tmp", Value: val(`1`), TTL: 2}}, {t0, &Put{Key: "keep", Value: val(`1`)}}},
			now:   t0 + 2_001,
			cmd:   &Expire{IDs: []int64{1}},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "expired", r.Expired, []ExpiredLease{{ID: 1, Keys: 1, Deadline: t0 + 2_000}})
				eq(t, "event", checkEvents(t, r.Events, 3, schema.EventDelete, schema.CauseLeaseExpired), []string{"tmp"})
				eq(t, "keys", keysOf(getAll(s, s.Now())), []string{"keep"})
				e, a := s.LeaseCount()
				eq(t, "lease count", [2]int64{e, a}, [2]int64{0, 0})
			},
		},
		{
			name:  "a tick only advances the clock",
			setup: leases,
			now:   t0 + 60_000,
			cmd:   &Expire{},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "now", s.Now(), int64(t0+60_000))
				eq(t, "reply", r.Reply, nil)
				eq(t, "events", len(r.Events), 0)
				eq(t, "revision", s.Revision(), int64(4))
				eq(t, "leases", len(s.LeaseList(true, 0, 100, s.Now()).Leases), 4)
				eq(t, "now expired", s.Expired(s.Now(), 0), []int64{1, 2, 3, 4})
			},
		},
	})
}

// A tick changes nothing but the clock: the snapshot equals that of the
// same state whose header says the later time.
func TestTickChangesOnlyTheClock(t *testing.T) {
	s := New()
	run(t, s, step{t0, &Grant{TTL: 1}}, step{t0, &Put{Key: "a", Value: val(`1`), Lease: 1}})
	before := snap(t, s)
	mustApply(t, s, t0+5_000, &Expire{})
	after := snap(t, s)
	// The state before the tick, with the later time.
	want := restored(t, before)
	eq(t, "now before", want.Now(), int64(t0))
	want.now = t0 + 5_000
	eq(t, "snapshot after tick", string(after), string(snap(t, want)))
}

func TestSetLimits(t *testing.T) {
	s := New()
	eq(t, "default limits", s.Limits(), DefaultLimits)
	eq(t, "default values", DefaultLimits, Limits{MaxLeases: 100_000, MaxKeysPerLease: 10_000, IdempotencyEntries: 100_000, IdempotencyRevisions: 10_000,
		HistoryRevisions: 1_000_000, HistoryAgeMS: 24 * 3600 * 1000})
	r := mustApply(t, s, t0, &Limits{MaxLeases: 3, MaxKeysPerLease: 1})
	eq(t, "op", r.Op, OpSetLimits)
	eq(t, "reply", r.Reply, nil)
	// Unset idempotency and change-log limits take their defaults.
	eq(t, "limits", s.Limits(), Limits{MaxLeases: 3, MaxKeysPerLease: 1, IdempotencyEntries: 100_000, IdempotencyRevisions: 10_000,
		HistoryRevisions: 1_000_000, HistoryAgeMS: 86_400_000})
	eq(t, "revision", s.Revision(), int64(0))
	// The limits are enforced and survive a snapshot.
	run(t, s, step{t0, &Grant{TTL: 1}}, step{t0, &Put{Key: "a", Value: val(`1`), Lease: 1}})
	mustFail(t, s, &Put{Key: "b", Value: val(`1`), Lease: 1}, ErrLimitExceeded)
	s2 := restored(t, snap(t, s))
	eq(t, "restored limits", s2.Limits(), Limits{MaxLeases: 3, MaxKeysPerLease: 1, IdempotencyEntries: 100_000, IdempotencyRevisions: 10_000,
		HistoryRevisions: 1_000_000, HistoryAgeMS: 86_400_000})
	mustFail(t, s2, &Put{Key: "b", Value: val(`1`), Lease: 1}, ErrLimitExceeded)
	// Every field goes through the log and a snapshot; negative values
	// take the defaults too.
	all := Limits{MaxLeases: 3, MaxKeysPerLease: 1, IdempotencyEntries: 7, IdempotencyRevisions: 8, HistoryRevisions: 9, HistoryAgeMS: 10_000}
	s3 := New()
	mustApply(t, s3, t0, &all)
	eq(t, "all limits", s3.Limits(), all)
	eq(t, "all limits restored", restored(t, snap(t, s3)).Limits(), all)
	mustApply(t, s3, t0, &Limits{MaxLeases: 3, MaxKeysPerLease: 1, IdempotencyEntries: -1, IdempotencyRevisions: -1, HistoryRevisions: -1, HistoryAgeMS: -1})
	eq(t, "negative limits", s3.Limits(), Limits{MaxLeases: 3, MaxKeysPerLease: 1, IdempotencyEntries: 100_000, IdempotencyRevisions: 10_000,
		HistoryRevisions: 1_000_000, HistoryAgeMS: 86_400_000})
	// Lowering a limit below the current count keeps what exists and
	// refuses more.
	run(t, s, step{t0, &Grant{TTL: 1}}, step{t0, &Grant{TTL: 1}}, step{t0, &Limits{MaxLeases: 1, MaxKeysPerLease: 1}})
	eq(t, "leases kept", len(s.LeaseList(true, 0, 10, s.Now()).Leases), 3)
	mustFail(t, s, &Grant{TTL: 1}, ErrLimitExceeded)
	// Raising it lets grants through again.
	mustApply(t, s, t0, &Limits{MaxLeases: 4, MaxKeysPerLease: 1})
	eq(t, "grant id", mustApply(t, s, t0, &Grant{TTL: 1}).Reply.(*schema.LeaseGrantReply).ID, int64(4))
}

// Every id handed out, by grant or by a ttl put, is new: a long run of
// grants, revokes, expiries and anonymous puts never repeats an id.
func TestLeaseIDsNeverReused(t *testing.T) {
	s := New()
	seen := map[int64]bool{}
	now := int64(t0)
	note := func(id int64) {
		t.Helper()
		if seen[id] {
			t.Fatalf("lease id %d handed out twice", id)
		}
		seen[id] = true
	}
	for i := 0; i < 200; i++ {
		now += 700
		g := mustApply(t, s, now, &Grant{TTL: 1}).Reply.(*schema.LeaseGrantReply)
		note(g.ID)
		mustApply(t, s, now, &Put{Key: "k", Value: val(`1`), TTL: 1})
		note(getKey(t, s, "k").Lease)
		if i%3 == 0 {
			mustApply(t, s, now, &Revoke{ID: g.ID})
		}
		mustApply(t, s, now, &Expire{IDs: s.Expired(now, 0)})
		if i%50 == 0 {
			s = restored(t, snap(t, s))
		}
	}
	// The restored counter keeps going too.
	if g := mustApply(t, s, now, &Grant{TTL: 1}).Reply.(*schema.LeaseGrantReply); seen[g.ID] {
		t.Fatalf("id %d reused", g.ID)
	}
	if len(seen) != 400 {
		t.Fatalf("%d ids seen", len(seen))
	}
}
