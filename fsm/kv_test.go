package fsm

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/concord-io/concord/schema"
)

func i64(v int64) *int64 { return &v }

func TestPut(t *testing.T) {
	runCases(t, []cmdCase{
		{
			name: "first put creates the key at revision 1",
			now:  t0,
			cmd:  &Put{Key: "a.b", Value: val(`{"x":1}`), PrevKV: true},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(&schema.KVPutReply{Revision: 1}))
				eq(t, "events", r.Events, []schema.Event{{Type: schema.EventPut, Key: "a.b", Value: val(`{"x":1}`),
					Revision: 1, CreateRevision: 1, ModRevision: 1, Version: 1, Cause: schema.CausePut}})
				eq(t, "record", *getKey(t, s, "a.b"), schema.KeyValue{Key: "a.b", Value: val(`{"x":1}`),
					CreateRevision: 1, ModRevision: 1, Version: 1})
				eq(t, "revision", s.Revision(), int64(1))
			},
		},
		{
			name: "each put advances the revision; create_revision stays, version counts",
			setup: []step{
				{t0, &Put{Key: "a", Value: val(`1`)}}, // rev 1
				{t0, &Put{Key: "b", Value: val(`1`)}}, // rev 2
				{t0, &Put{Key: "a", Value: val(`2`)}}, // rev 3
			},
			cmd: &Put{Key: "a", Value: val(`3`)},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(&schema.KVPutReply{Revision: 4}))
				eq(t, "record", *getKey(t, s, "a"), schema.KeyValue{Key: "a", Value: val(`3`),
					CreateRevision: 1, ModRevision: 4, Version: 3})
				eq(t, "event", r.Events, []schema.Event{{Type: schema.EventPut, Key: "a", Value: val(`3`),
					Revision: 4, CreateRevision: 1, ModRevision: 4, Version: 3, Cause: schema.CausePut}})
				eq(t, "b untouched", *getKey(t, s, "b"), schema.KeyValue{Key: "b", Value: val(`1`),
					CreateRevision: 2, ModRevision: 2, Version: 1})
			},
		},
		{
			name:  "a put after a delete starts a new life: version 1, new create_revision",
			setup: []step{{t0, &Put{Key: "a", Value: val(`1`)}}, {t0, &Put{Key: "a", Value: val(`2`)}}, {t0, &Delete{Key: "a"}}},
			cmd:   &Put{Key: "a", Value: val(`3`), PrevKV: true},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(&schema.KVPutReply{Revision: 4}))
				eq(t, "record", *getKey(t, s, "a"), schema.KeyValue{Key: "a", Value: val(`3`),
					CreateRevision: 4, ModRevision: 4, Version: 1})
			},
		},
		{
			name:  "prev_kv returns the old record",
			setup: []step{{t0, &Put{Key: "a", Value: val(`"old"`)}}, {t0, &Put{Key: "a", Value: val(`"older"`)}}},
			cmd:   &Put{Key: "a", Value: val(`"new"`), PrevKV: true},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(&schema.KVPutReply{Revision: 3, PrevKV: &schema.KeyValue{
					Key: "a", Value: val(`"older"`), CreateRevision: 1, ModRevision: 2, Version: 2}}))
			},
		},
		{
			name:  "prev_kv of a leased key carries lease and remaining_ms",
			setup: []step{{t0, &Grant{TTL: 10}}, {t0, &Put{Key: "a", Value: val(`1`), Lease: 1}}},
			now:   t0 + 2_500,
			cmd:   &Put{Key: "a", Value: val(`2`), Lease: 1, PrevKV: true},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(&schema.KVPutReply{Revision: 2, PrevKV: &schema.KeyValue{
					Key: "a", Value: val(`1`), CreateRevision: 1, ModRevision: 1, Version: 1, Lease: 1, RemainingMS: i64(7_500)}}))
			},
		},
		{
			name:  "no prev_kv unless asked",
			setup: []step{{t0, &Put{Key: "a", Value: val(`1`)}}},
			cmd:   &Put{Key: "a", Value: val(`2`)},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(&schema.KVPutReply{Revision: 2}))
			},
		},
		{
			name:  "put with a lease attaches the key",
			setup: []step{{t0, &Grant{TTL: 10}}, {t0, &Put{Key: "z", Value: val(`0`), Lease: 1}}},
			now:   t0 + 1_000,
			cmd:   &Put{Key: "svc.a", Value: val(`{"addr":"10.0.0.5"}`), Lease: 1},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "event lease", r.Events[0].Lease, int64(1))
				eq(t, "record", *getKey(t, s, "svc.a"), schema.KeyValue{Key: "svc.a", Value: val(`{"addr":"10.0.0.5"}`),
					CreateRevision: 2, ModRevision: 2, Version: 1, Lease: 1, RemainingMS: i64(9_000)})
				li := info(t, s, 1)
				eq(t, "key_count", li.KeyCount, int64(2))
				eq(t, "keys", li.Keys, []string{"svc.a", "z"})
				// A put does not renew the lease.
				eq(t, "remaining", li.RemainingMS, int64(9_000))
			},
		},
		{
			name:  "re-put to the same lease keeps one attachment",
			setup: []step{{t0, &Grant{TTL: 10}}, {t0, &Put{Key: "a", Value: val(`1`), Lease: 1}}},
			cmd:   &Put{Key: "a", Value: val(`2`), Lease: 1},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "keys", info(t, s, 1).Keys, []string{"a"})
				eq(t, "version", getKey(t, s, "a").Version, int64(2))
			},
		},
		{
			name:  "a leased put on an unleased key attaches it",
			setup: []step{{t0, &Grant{TTL: 10}}, {t0, &Put{Key: "a", Value: val(`1`)}}},
			cmd:   &Put{Key: "a", Value: val(`2`), Lease: 1},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "keys", info(t, s, 1).Keys, []string{"a"})
				eq(t, "lease", getKey(t, s, "a").Lease, int64(1))
			},
		},
		{
			name:    "unknown lease -> lease_not_found",
			setup:   []step{{t0, &Grant{TTL: 10}}, {t0, &Put{Key: "a", Value: val(`1`)}}},
			cmd:     &Put{Key: "a", Value: val(`2`), Lease: 2},
			wantErr: ErrLeaseNotFound,
		},
		{
			name:    "naming an anonymous lease -> lease_not_found",
			setup:   []step{{t0, &Put{Key: "a", Value: val(`1`), TTL: 10}}},
			cmd:     &Put{Key: "b", Value: val(`2`), Lease: 1},
			wantErr: ErrLeaseNotFound,
		},
		{
			name:    "naming another lease while attached -> lease_conflict",
			setup:   []step{{t0, &Grant{TTL: 10}}, {t0, &Grant{TTL: 10}}, {t0, &Put{Key: "a", Value: val(`1`), Lease: 1}}},
			cmd:     &Put{Key: "a", Value: val(`2`), Lease: 2},
			wantErr: ErrLeaseConflict,
		},
		{
			name:    "naming a lease while attached to an anonymous one -> lease_conflict",
			setup:   []step{{t0, &Grant{TTL: 10}}, {t0, &Put{Key: "a", Value: val(`1`), TTL: 5}}},
			cmd:     &Put{Key: "a", Value: val(`2`), Lease: 1},
			wantErr: ErrLeaseConflict,
		},
		{
			name:  "ttl put creates an anonymous lease",
			setup: []step{{t0, &Grant{TTL: 10}}, {t0, &Put{Key: "x", Value: val(`0`)}}},
			now:   t0 + 100,
			cmd:   &Put{Key: "tmp.a", Value: val(`1`), TTL: 5},
			check: func(t *testing.T, s *State, r Result) {
				kv := getKey(t, s, "tmp.a")
				eq(t, "record", *kv, schema.KeyValue{Key: "tmp.a", Value: val(`1`), CreateRevision: 2, ModRevision: 2,
					Version: 1, Lease: 2, RemainingMS: i64(5_000)})
				eq(t, "event lease", r.Events[0].Lease, int64(2))
				eq(t, "info", *info(t, s, 2), schema.LeaseInfo{ID: 2, TTL: 5, RemainingTTL: 5, RemainingMS: 5_000,
					GrantedRevision: 2, Anonymous: true, Metadata: val(`{}`), KeyCount: 1, Keys: []string{"tmp.a"}})
				pub := s.LeaseList(false, 0, 100, s.Now())
				eq(t, "public list", len(pub.Leases), 1)
				eq(t, "public list id", pub.Leases[0].ID, int64(1))
				all := s.LeaseList(true, 0, 100, s.Now())
				eq(t, "full list", len(all.Leases), 2)
				eq(t, "full list anon", all.Leases[1].Anonymous, true)
				e, a := s.LeaseCount()
				eq(t, "lease count", [2]int64{e, a}, [2]int64{1, 1})
				d, _ := s.NextDeadline()
				eq(t, "next deadline", d, int64(t0+5_100))
			},
		},
		{
			name:  "ttl put on a key with an anonymous lease replaces it",
			setup: []step{{t0, &Put{Key: "tmp.a", Value: val(`1`), TTL: 5}}},
			now:   t0 + 3_000,
			cmd:   &Put{Key: "tmp.a", Value: val(`2`), TTL: 7, PrevKV: true},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(&schema.KVPutReply{Revision: 2, PrevKV: &schema.KeyValue{
					Key: "tmp.a", Value: val(`1`), CreateRevision: 1, ModRevision: 1, Version: 1, Lease: 1, RemainingMS: i64(2_000)}}))
				leaseGone(t, s, 1)
				kv := getKey(t, s, "tmp.a")
				eq(t, "record", *kv, schema.KeyValue{Key: "tmp.a", Value: val(`2`), CreateRevision: 1, ModRevision: 2,
					Version: 2, Lease: 2, RemainingMS: i64(7_000)})
				li := info(t, s, 2)
				eq(t, "new lease", [3]any{li.Anonymous, li.TTL, li.Keys}, [3]any{true, int64(7), []string{"tmp.a"}})
				e, a := s.LeaseCount()
				eq(t, "lease count", [2]int64{e, a}, [2]int64{0, 1})
				eq(t, "old deadline gone", s.Expired(t0+6_000, 0), []int64(nil))
			},
		},
		{
			name:  "ttl put replacing an anonymous lease is allowed at max leases",
			setup: []step{{t0, &Limits{MaxLeases: 1, MaxKeysPerLease: 10}}, {t0, &Put{Key: "a", Value: val(`1`), TTL: 5}}},
			cmd:   &Put{Key: "a", Value: val(`2`), TTL: 5},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "lease", getKey(t, s, "a").Lease, int64(2))
			},
		},
		{
			name:    "ttl put on a key with an explicit lease -> lease_conflict",
			setup:   []step{{t0, &Grant{TTL: 10}}, {t0, &Put{Key: "a", Value: val(`1`), Lease: 1}}},
			cmd:     &Put{Key: "a", Value: val(`2`), TTL: 3},
			wantErr: ErrLeaseConflict,
		},
		{
			name:    "ttl put at max leases -> limit_exceeded",
			setup:   []step{{t0, &Limits{MaxLeases: 1, MaxKeysPerLease: 10}}, {t0, &Grant{TTL: 10}}},
			cmd:     &Put{Key: "a", Value: val(`2`), TTL: 3},
			wantErr: ErrLimitExceeded,
		},
		{
			name:  "put without lease or ttl detaches from an anonymous lease, which goes",
			setup: []step{{t0, &Put{Key: "a", Value: val(`1`), TTL: 5}}},
			cmd:   &Put{Key: "a", Value: val(`2`)},
			check: func(t *testing.T, s *State, r Result) {
				leaseGone(t, s, 1)
				eq(t, "record", *getKey(t, s, "a"), schema.KeyValue{Key: "a", Value: val(`2`), CreateRevision: 1, ModRevision: 2, Version: 2})
				eq(t, "event lease", r.Events[0].Lease, int64(0))
				if _, ok := s.NextDeadline(); ok {
					t.Fatal("a deadline is left")
				}
			},
		},
		{
			name:  "put without lease or ttl detaches from an explicit lease, which stays",
			setup: []step{{t0, &Grant{TTL: 10}}, {t0, &Put{Key: "a", Value: val(`1`), Lease: 1}}, {t0, &Put{Key: "b", Value: val(`1`), Lease: 1}}},
			cmd:   &Put{Key: "a", Value: val(`2`)},
			check: func(t *testing.T, s *State, r Result) {
				li := info(t, s, 1)
				eq(t, "key_count", li.KeyCount, int64(1))
				eq(t, "keys", li.Keys, []string{"b"})
				eq(t, "lease of a", getKey(t, s, "a").Lease, int64(0))
				// Revoking the lease now leaves a alone.
				r = mustApply(t, s, s.Now(), &Revoke{ID: 1})
				eq(t, "revoked keys", checkEvents(t, r.Events, 4, schema.EventDelete, schema.CauseLeaseRevoked), []string{"b"})
				eq(t, "a kept", getKey(t, s, "a") != nil, true)
			},
		},
		{
			name: "max keys per lease -> limit_exceeded",
			setup: []step{{t0, &Limits{MaxLeases: 10, MaxKeysPerLease: 2}}, {t0, &Grant{TTL: 10}},
				{t0, &Put{Key: "a", Value: val(`1`), Lease: 1}}, {t0, &Put{Key: "b", Value: val(`1`), Lease: 1}}},
			cmd:     &Put{Key: "c", Value: val(`1`), Lease: 1},
			wantErr: ErrLimitExceeded,
		},
		{
			name: "max keys per lease: an existing unleased key cannot be attached either",
			setup: []step{{t0, &Limits{MaxLeases: 10, MaxKeysPerLease: 1}}, {t0, &Grant{TTL: 10}},
				{t0, &Put{Key: "a", Value: val(`1`), Lease: 1}}, {t0, &Put{Key: "b", Value: val(`1`)}}},
			cmd:     &Put{Key: "b", Value: val(`2`), Lease: 1},
			wantErr: ErrLimitExceeded,
		},
		{
			name: "max keys per lease: re-putting an attached key is fine at the limit",
			setup: []step{{t0, &Limits{MaxLeases: 10, MaxKeysPerLease: 2}}, {t0, &Grant{TTL: 10}},
				{t0, &Put{Key: "a", Value: val(`1`), Lease: 1}}, {t0, &Put{Key: "b", Value: val(`1`), Lease: 1}}},
			cmd: &Put{Key: "b", Value: val(`2`), Lease: 1},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "key_count", info(t, s, 1).KeyCount, int64(2))
			},
		},
	})
}

func TestDelete(t *testing.T) {
	keys := []step{
		{t0, &Grant{TTL: 10}},
		{t0, &Put{Key: "svc.b", Value: val(`"b"`), Lease: 1}}, // rev 1
		{t0, &Put{Key: "svc.a", Value: val(`"a"`)}},           // rev 2
		{t0, &Put{Key: "svc.c", Value: val(`"c"`), TTL: 5}},   // rev 3, anonymous lease 2
		{t0, &Put{Key: "svcx", Value: val(`"x"`)}},            // rev 4
		{t0, &Put{Key: "a", Value: val(`"top"`), Lease: 1}},   // rev 5
		{t0, &Put{Key: "svc.a", Value: val(`"a2"`)}},          // rev 6
		{t0 + 1_000, &Put{Key: "zz", Value: val(`"z"`)}},      // rev 7
	}
	runCases(t, []cmdCase{
		{
			name:  "single key",
			setup: keys,
			cmd:   &Delete{Key: "svc.a"},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(&schema.KVDeleteReply{Revision: 8, Deleted: 1}))
				eq(t, "events", checkEvents(t, r.Events, 8, schema.EventDelete, schema.CauseDelete), []string{"svc.a"})
				eq(t, "event lease", r.Events[0].Lease, int64(0))
				eq(t, "gone", getKey(t, s, "svc.a") == nil, true)
				eq(t, "keys", keysOf(getAll(s, s.Now())), []string{"a", "svc.b", "svc.c", "svcx", "zz"})
			},
		},
		{
			name:  "single leased key detaches it; the lease stays",
			setup: keys,
			cmd:   &Delete{Key: "svc.b", PrevKV: true},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(&schema.KVDeleteReply{Revision: 8, Deleted: 1, PrevKVs: []schema.KeyValue{
					{Key: "svc.b", Value: val(`"b"`), CreateRevision: 1, ModRevision: 1, Version: 1, Lease: 1, RemainingMS: i64(9_000)}}}))
				eq(t, "event lease", r.Events[0].Lease, int64(1))
				li := info(t, s, 1)
				eq(t, "lease keys", [2]any{li.KeyCount, li.Keys}, [2]any{int64(1), []string{"a"}})
			},
		},
		{
			name:  "deleting a key removes its anonymous lease",
			setup: keys,
			cmd:   &Delete{Key: "svc.c"},
			check: func(t *testing.T, s *State, r Result) {
				leaseGone(t, s, 2)
				e, a := s.LeaseCount()
				eq(t, "lease count", [2]int64{e, a}, [2]int64{1, 0})
				eq(t, "event lease", r.Events[0].Lease, int64(2))
				d, _ := s.NextDeadline()
				eq(t, "next deadline", d, int64(t0+10_000))
			},
		},
		{
			name:  "prefix: matching keys at one revision, in key order",
			setup: keys,
			cmd:   &Delete{Key: "svc.", IsPrefix: true, PrevKV: true},
			check: func(t *testing.T, s *State, r Result) {
				rep := r.Reply.(*schema.KVDeleteReply)
				eq(t, "revision", rep.Revision, int64(8))
				eq(t, "deleted", rep.Deleted, int64(3))
				eq(t, "prev_kvs", rep.PrevKVs, []schema.KeyValue{
					{Key: "svc.a", Value: val(`"a2"`), CreateRevision: 2, ModRevision: 6, Version: 2},
					{Key: "svc.b", Value: val(`"b"`), CreateRevision: 1, ModRevision: 1, Version: 1, Lease: 1, RemainingMS: i64(9_000)},
					{Key: "svc.c", Value: val(`"c"`), CreateRevision: 3, ModRevision: 3, Version: 1, Lease: 2, RemainingMS: i64(4_000)},
				})
				eq(t, "events", checkEvents(t, r.Events, 8, schema.EventDelete, schema.CauseDelete), []string{"svc.a", "svc.b", "svc.c"})
				eq(t, "event leases", []int64{r.Events[0].Lease, r.Events[1].Lease, r.Events[2].Lease}, []int64{0, 1, 2})
				eq(t, "keys left", keysOf(getAll(s, s.Now())), []string{"a", "svcx", "zz"})
				leaseGone(t, s, 2)
				eq(t, "lease 1 keys", info(t, s, 1).Keys, []string{"a"})
			},
		},
		{
			name:  "prefix inside a token",
			setup: keys,
			cmd:   &Delete{Key: "svc", IsPrefix: true},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "deleted", r.Reply.(*schema.KVDeleteReply).Deleted, int64(4))
				eq(t, "keys left", keysOf(getAll(s, s.Now())), []string{"a", "zz"})
			},
		},
		{
			name:  "prefix \"\" deletes every key",
			setup: keys,
			cmd:   &Delete{Key: "", IsPrefix: true},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(&schema.KVDeleteReply{Revision: 8, Deleted: 6}))
				eq(t, "events", checkEvents(t, r.Events, 8, schema.EventDelete, schema.CauseDelete),
					[]string{"a", "svc.a", "svc.b", "svc.c", "svcx", "zz"})
				eq(t, "keys", s.KeyCount(), 0)
				li := info(t, s, 1)
				eq(t, "explicit lease stays, empty", li.KeyCount, int64(0))
				e, a := s.LeaseCount()
				eq(t, "lease count", [2]int64{e, a}, [2]int64{1, 0})
			},
		},
		{
			name:  "deleting a missing key keeps the revision",
			setup: keys,
			cmd:   &Delete{Key: "svc.zzz", PrevKV: true},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(&schema.KVDeleteReply{Revision: 7}))
				eq(t, "events", len(r.Events), 0)
				eq(t, "revision", s.Revision(), int64(7))
				eq(t, "keys", s.KeyCount(), 6)
			},
		},
		{
			name:  "a prefix that matches nothing keeps the revision",
			setup: keys,
			cmd:   &Delete{Key: "nope.", IsPrefix: true},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(&schema.KVDeleteReply{Revision: 7}))
				eq(t, "revision", s.Revision(), int64(7))
			},
		},
		{
			name:  "a single-key delete does not match by prefix",
			setup: []step{{t0, &Put{Key: "svc.a.b", Value: val(`1`)}}},
			cmd:   &Delete{Key: "svc.a"},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "deleted", r.Reply.(*schema.KVDeleteReply).Deleted, int64(0))
				eq(t, "keys", s.KeyCount(), 1)
			},
		},
		{
			name: "delete on an empty state",
			cmd:  &Delete{Key: "", IsPrefix: true},
			check: func(t *testing.T, s *State, r Result) {
				eq(t, "reply", r.Reply, any(&schema.KVDeleteReply{}))
			},
		},
	})
}

// Failing commands change nothing at all, checked over one rich state: the
// snapshot bytes are identical and a later command behaves as if the failed
// ones never happened.
func TestFailedCommandsChangeNothing(t *testing.T) {
	setup := []step{
		{t0, &Limits{MaxLeases: 4, MaxKeysPerLease: 2}},
		{t0, &Grant{TTL: 10, Metadata: val(`{"a":1}`)}},       // 1
		{t0, &Grant{TTL: 20}},                                 // 2
		{t0, &Put{Key: "a", Value: val(`1`), Lease: 1}},       // rev 1
		{t0, &Put{Key: "b", Value: val(`1`), Lease: 1}},       // rev 2
		{t0, &Put{Key: "c", Value: val(`1`), TTL: 5}},         // rev 3, lease 3
		{t0, &Put{Key: "d", Value: val(`1`)}},                 // rev 4
		{t0 + 500, &Grant{ID: 9, TTL: 1}},                     // 9
		{t0 + 500, &Put{Key: "e", Value: val(`1`), Lease: 2}}, // rev 5
	}
	failures := []struct {
		body any
		err  error
	}{
		{&Grant{TTL: 1}, ErrLimitExceeded},
		{&Grant{ID: 2, TTL: 1}, ErrLimitExceeded},
		{&KeepAlive{ID: 5}, ErrLeaseNotFound},
		{&KeepAlive{ID: 3, TTL: 100}, ErrLeaseNotFound},
		{&Revoke{ID: 4}, ErrLeaseNotFound},
		{&Put{Key: "x", Value: val(`1`), Lease: 8}, ErrLeaseNotFound},
		{&Put{Key: "x", Value: val(`1`), Lease: 3}, ErrLeaseNotFound},
		{&Put{Key: "a", Value: val(`1`), Lease: 2, PrevKV: true}, ErrLeaseConflict},
		{&Put{Key: "c", Value: val(`1`), Lease: 2}, ErrLeaseConflict},
		{&Put{Key: "a", Value: val(`1`), TTL: 4}, ErrLeaseConflict},
		{&Put{Key: "x", Value: val(`1`), Lease: 1}, ErrLimitExceeded},
		{&Put{Key: "d", Value: val(`1`), Lease: 1}, ErrLimitExceeded},
		{&Put{Key: "x", Value: val(`1`), TTL: 4}, ErrLimitExceeded},
	}
	s := New()
	run(t, s, setup...)
	control := New()
	run(t, control, setup...)
	for _, f := range failures {
		mustFail(t, s, f.body, f.err)
	}
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
	// The same follow-up gives the same output on both.
	for _, st := range []step{
		{t0 + 600, &Revoke{ID: 1}},
		{t0 + 600, &Grant{TTL: 1}},
		{t0 + 600, &Put{Key: "x", Value: val(`2`), Lease: 2}},
		{t0 + 600, &Put{Key: "c", Value: val(`2`), TTL: 3}},
	} {
		a, b := mustApply(t, s, st.now, st.body), mustApply(t, control, st.now, st.body)
		eq(t, "follow-up result", resultJSON(a), resultJSON(b))
	}
	eq(t, "snapshots", string(snap(t, s)), string(snap(t, control)))
}

// A lease past its deadline that the leader has not expired yet takes no
// new keys (the leases proposal, §13.1), in a put or a transaction, but a
// keep-alive still renews it, after which it takes keys again.
func TestPutToLeasePastDeadline(t *testing.T) {
	s := New()
	run(t, s, step{t0, &Grant{TTL: 1}}, step{t0, &Put{Key: "a", Value: val(`1`), Lease: 1}})
	late := int64(t0 + 1_001)
	before := snap(t, s)
	for _, cmd := range []any{
		&Put{Key: "b", Value: val(`1`), Lease: 1},
		&Txn{Success: []TxnOp{{Put: &Put{Key: "b", Value: val(`1`), Lease: 1}}}},
	} {
		r := apply(t, s, late, cmd)
		if !errors.Is(r.Err, ErrLeaseNotFound) || !strings.Contains(r.Err.Error(), "expired") {
			t.Fatalf("%T to a lease past its deadline: %v", cmd, r.Err)
		}
	}
	// The state after, with the clock set back, is the state before.
	back := restored(t, snap(t, s))
	back.now = t0
	if !bytes.Equal(snap(t, back), before) {
		t.Fatal("a refused put changed more than the clock")
	}
	// Re-putting a key already on the lease is refused the same way.
	if r := apply(t, s, late, &Put{Key: "a", Value: val(`2`), Lease: 1}); !errors.Is(r.Err, ErrLeaseNotFound) {
		t.Fatalf("re-put on a lease past its deadline: %v", r.Err)
	}
	mustApply(t, s, late, &KeepAlive{ID: 1})
	mustApply(t, s, late, &Put{Key: "b", Value: val(`1`), Lease: 1})
}
