package fsm

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// Each quota refuses exactly the request that would go over it, with an
// error naming the quota and the use, and changes nothing; another tenant
// is not held to it.
func TestQuotasRefuseAtTheLimit(t *testing.T) {
	s := New()
	mustApply(t, s, t0, &SetQuota{Tenant: "A", Quota: Quota{Leases: 2, Keys: 3, ValueBytes: 10, KeepAliveMany: 2}})
	// Two leases, the second an anonymous one: the third is refused.
	mustApplyFor(t, s, "A", t0, &Grant{TTL: 10})
	mustApplyFor(t, s, "A", t0, &Put{Key: "anon", Value: val(`1`), TTL: 10})
	refused := func(what string, body any, want error, says string) {
		t.Helper()
		before := string(snap(t, s))
		r := applyFor(t, s, "A", "", t0, body)
		if !errors.Is(r.Err, want) || !strings.Contains(r.Err.Error(), says) {
			t.Fatalf("%s: %v, want %v saying %q", what, r.Err, want, says)
		}
		if string(snap(t, s)) != before {
			t.Fatalf("%s: a refused request changed the state", what)
		}
	}
	refused("a third lease", &Grant{TTL: 10}, ErrLimitExceeded, "tenant A is at its quota of 2 leases (2 in use)")
	refused("a third lease by ttl", &Put{Key: "anon2", Value: val(`1`), TTL: 10}, ErrLimitExceeded, "quota of 2 leases")
	// Three keys (anon, k1, k2): a fourth is refused, an overwrite is not.
	mustApplyFor(t, s, "A", t0, &Put{Key: "k1", Value: val(`1`)})
	mustApplyFor(t, s, "A", t0, &Put{Key: "k2", Value: val(`1`)})
	refused("a fourth key", &Put{Key: "k3", Value: val(`1`)}, ErrLimitExceeded, "tenant A is at its quota of 3 keys (3 in use)")
	mustApplyFor(t, s, "A", t0, &Put{Key: "k2", Value: val(`"1234"`)})
	// 1+1+6 = 8 bytes: a value that brings them to 11 is refused, 10 is not.
	refused("value bytes", &Put{Key: "k1", Value: val(`"12"`)}, ErrLimitExceeded, "would take 11 bytes, over its quota of 10 bytes (8 in use)")
	mustApplyFor(t, s, "A", t0, &Put{Key: "k1", Value: val(`"1"`)})
	eq(t, "value bytes in use", s.In("A").Usage().ValueBytes, int64(10))
	// Metadata counts as the value's.
	refused("metadata bytes", &Put{Key: "k1", Value: val(`"1"`), Metadata: val(`{}`)}, ErrLimitExceeded, "over its quota of 10 bytes")
	// A transaction whose second put goes over is refused whole.
	refused("a transaction over the key quota", &Txn{Success: []TxnOp{
		{Put: &Put{Key: "k1", Value: val(`1`)}}, {Put: &Put{Key: "k9", Value: val(`1`)}}}}, ErrLimitExceeded, "quota of 3 keys")
	// keepalive_many of more than 2 leases.
	refused("keepalive_many", &KeepAliveMany{IDs: []int64{1, 2, 3}}, ErrTooLarge, "at most 2 leases in one keepalive_many (its quota); this one lists 3")
	mustApplyFor(t, s, "A", t0, &KeepAliveMany{IDs: []int64{1, 2}})

	// B has no quota of its own and there is no default: not bounded.
	for range 5 {
		mustApplyFor(t, s, "B", t0, &Grant{TTL: 10})
	}
	// The default quota holds B now; A keeps its own.
	mustApply(t, s, t0, &SetQuota{Tenant: QuotaDefault, Quota: Quota{Leases: 5}})
	if r := applyFor(t, s, "B", "", t0, &Grant{TTL: 10}); !errors.Is(r.Err, ErrLimitExceeded) || !strings.Contains(r.Err.Error(), "tenant B is at its quota of 5 leases") {
		t.Fatalf("B over the default quota: %v", r.Err)
	}
	eq(t, "A keeps its own", s.QuotaOf("A").Leases, int64(2))
	// Clearing A's own quota leaves A under the default one.
	mustApply(t, s, t0, &SetQuota{Tenant: "A", Clear: true})
	eq(t, "A under the default", s.QuotaOf("A"), Quota{Leases: 5})
	mustApplyFor(t, s, "A", t0, &Put{Key: "k3", Value: val(`"much longer than ten bytes"`)})
	// The default tenant is never held to a quota.
	eq(t, "default tenant", s.QuotaOf(DefaultTenant), Quota{})
	for range 8 {
		mustApply(t, s, t0, &Grant{TTL: 10})
	}
	// Bad quota commands do not decode, so no replica applies one and the
	// state is unchanged.
	before := snapBytes(s)
	for _, bad := range []*SetQuota{{Tenant: DefaultTenant}, {Tenant: "a.b"}, {Tenant: "C", Quota: Quota{Keys: -1}},
		{Tenant: QuotaDefault, Quota: Quota{RequestsPerSecond: -5}}} {
		data := encode(t, t0, bad)
		if _, err := Decode(data); !errors.Is(err, ErrBadCommand) {
			t.Errorf("quota %+v decoded: %v", bad, err)
		}
		if r := s.Apply(data); !errors.Is(r.Err, ErrBadCommand) {
			t.Fatalf("quota %+v: %v", bad, r.Err)
		}
	}
	if !bytes.Equal(before, snapBytes(s)) {
		t.Fatal("a refused quota changed the state")
	}
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}

	// The quotas survive a snapshot; version 4 cannot hold them.
	r := restored(t, snap(t, s))
	eq(t, "quotas after restore", r.Quotas(), s.Quotas())
	eq(t, "digest after restore", stateDigest(r), stateDigest(s))
	var buf bytes.Buffer
	q := New()
	mustApply(t, q, t0, &SetQuota{Tenant: "A", Quota: Quota{Keys: 1}})
	if _, err := q.Snapshot().WriteVersion(&buf, 4); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("version 4 with quotas: %v", err)
	}
}

// Quota frames out of order, or naming the default tenant, are refused.
func TestQuotaSnapshotDamageRefused(t *testing.T) {
	for _, c := range []struct {
		name, want string
		quotas     map[string]Quota
	}{
		{"default tenant", "the default tenant has no quota", map[string]Quota{"": {Keys: 1}}},
		{"bad name", "not a NATS subject token", map[string]Quota{"a.b": {Keys: 1}}},
		{"negative", "negative", map[string]Quota{"A": {Keys: -1}}},
	} {
		sn := New().Snapshot()
		sn.quotas = c.quotas
		var buf bytes.Buffer
		if _, err := sn.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		err := New().Restore(&buf)
		if !errors.Is(err, ErrBadSnapshot) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrBadSnapshot saying %q", c.name, err, c.want)
		}
	}
}
