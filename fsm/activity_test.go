package fsm

import "testing"

// Result.Leases counts lease grants and renewals for telemetry: once per
// command that did it, never for a failed or replayed command.
func TestLeaseActivity(t *testing.T) {
	s := New()
	check := func(what string, r Result, want LeaseActivity) {
		t.Helper()
		if r.Leases != want {
			t.Errorf("%s: activity %+v, want %+v", what, r.Leases, want)
		}
	}
	check("grant", mustApply(t, s, 1000, &Grant{TTL: 10}), LeaseActivity{Granted: 1})
	check("grant with id", mustApply(t, s, 1000, &Grant{ID: 7, TTL: 10}), LeaseActivity{Granted: 1})
	check("grant taken id", apply(t, s, 1000, &Grant{ID: 7, TTL: 10}), LeaseActivity{})
	check("put with lease", mustApply(t, s, 1000, &Put{Key: "a", Value: val("1"), Lease: 1}), LeaseActivity{})
	check("put with ttl", mustApply(t, s, 1000, &Put{Key: "b", Value: val("1"), TTL: 5}), LeaseActivity{GrantedAnonymous: 1})
	// Re-putting with a ttl replaces the key's anonymous lease with a new one.
	check("re-put with ttl", mustApply(t, s, 1000, &Put{Key: "b", Value: val("2"), TTL: 5}), LeaseActivity{GrantedAnonymous: 1})
	check("keepalive", mustApply(t, s, 2000, &KeepAlive{ID: 1}), LeaseActivity{Renewed: 1})
	check("keepalive missing", apply(t, s, 2000, &KeepAlive{ID: 99}), LeaseActivity{})
	check("keepalive many", mustApply(t, s, 2000, &KeepAliveMany{IDs: []int64{1, 7, 99}}), LeaseActivity{Renewed: 2})
	txn := &Txn{Success: []TxnOp{{Put: &Put{Key: "c", Value: val("1"), TTL: 3}}, {Put: &Put{Key: "d", Value: val("1"), TTL: 3}}}}
	check("txn with two ttl puts", mustApply(t, s, 3000, txn), LeaseActivity{GrantedAnonymous: 2})
	// A transaction that fails after staging a grant grants nothing.
	bad := &Txn{Success: []TxnOp{{Put: &Put{Key: "e", Value: val("1"), TTL: 3}}, {Put: &Put{Key: "f", Value: val("1"), Lease: 99}}}}
	check("failed txn", apply(t, s, 3000, bad), LeaseActivity{})
	keyed := Command{IdempotencyKey: "k1", Body: &Grant{TTL: 10}}
	check("keyed grant", mustApply(t, s, 4000, keyed), LeaseActivity{Granted: 1})
	r := mustApply(t, s, 4000, keyed)
	if !r.Cached {
		t.Fatal("retry was not answered from the cache")
	}
	check("replayed grant", r, LeaseActivity{})
	check("revoke", mustApply(t, s, 5000, &Revoke{ID: 1}), LeaseActivity{})
}
