package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/concord-io/concord/schema"
)

// applyFor applies body for tenant through an encoded entry, as a replica
// does, with an optional idempotency key.
func applyFor(t testing.TB, s *State, tenant, idemKey string, now int64, body any) Result {
	t.Helper()
	data, err := EncodeFor(now, tenant, idemKey, body)
	if err != nil {
		t.Fatalf("EncodeFor(%q): %v", tenant, err)
	}
	return s.Apply(data)
}

func mustApplyFor(t testing.TB, s *State, tenant string, now int64, body any) Result {
	t.Helper()
	r := applyFor(t, s, tenant, "", now, body)
	if r.Err != nil {
		t.Fatalf("apply %T for %q: %v", body, tenant, r.Err)
	}
	return r
}

// Two tenants and the default one use the same key names and get the same
// lease ids; nothing one does is seen or changed by another.
func TestTenantsAreSeparateSpaces(t *testing.T) {
	s := New()
	tenants := []string{DefaultTenant, "TENANT_A", "TENANT_B"}
	for i, tn := range tenants {
		g := mustApplyFor(t, s, tn, t0, &Grant{TTL: 10 + int64(i)}).Reply.(*schema.LeaseGrantReply)
		eq(t, "each tenant's first lease id", g.ID, int64(1))
		r := mustApplyFor(t, s, tn, t0, &Put{Key: "svc.a", Value: val(`"` + tn + `"`), Lease: 1})
		eq(t, "tenant of the result", r.Tenant, tn)
		eq(t, "the event's key is the tenant's own", r.Events[0].Key, "svc.a")
		mustApplyFor(t, s, tn, t0, &Put{Key: "svc.b", Value: val(`1`)})
	}
	// Every tenant reads its own values, counts and leases.
	for i, tn := range tenants {
		v := s.In(tn)
		kvs := getAll(v, t0)
		eq(t, "keys of "+tn, len(kvs), 2)
		eq(t, "value of "+tn, string(kvs[0].Value), `"`+tn+`"`)
		li, err := v.LeaseInfo(1, true, t0)
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "lease ttl of "+tn, li.TTL, 10+int64(i))
		eq(t, "lease keys of "+tn, li.Keys, []string{"svc.a"})
		eq(t, "usage of "+tn, v.Usage().Keys, int64(2))
		eq(t, "lease list of "+tn, len(v.LeaseList(true, 0, 100, t0).Leases), 1)
	}
	eq(t, "keys of the cluster", s.KeyCount(), 6)
	eq(t, "tenants", s.Tenants(), tenants)

	// B revokes its lease 1: its key goes, A's and the default's stay.
	r := mustApplyFor(t, s, "TENANT_B", t0+1, &Revoke{ID: 1})
	eq(t, "revoke deletes B's key", len(r.Events), 1)
	eq(t, "B's keys", len(getAll(s.In("TENANT_B"), t0)), 1)
	eq(t, "A's keys", len(getAll(s.In("TENANT_A"), t0)), 2)
	eq(t, "default keys", len(getAll(s, t0)), 2)
	// B cannot renew or attach to lease 1 any more, though A's exists.
	if r := applyFor(t, s, "TENANT_B", "", t0+1, &KeepAlive{ID: 1}); !errors.Is(r.Err, ErrLeaseNotFound) {
		t.Fatalf("B renews lease 1 after revoking it: %v", r.Err)
	}
	if r := applyFor(t, s, "TENANT_B", "", t0+1, &Put{Key: "x", Value: val(`1`), Lease: 1}); !errors.Is(r.Err, ErrLeaseNotFound) {
		t.Fatalf("B attaches to lease 1 after revoking it: %v", r.Err)
	}
	// A compare reads the tenant's own key only: C has no key "svc.a".
	txn := &Txn{Compare: []Compare{{Key: "svc.a", Target: TargetVersion, Op: CmpGt, Int: 0}},
		Success: []TxnOp{{Put: &Put{Key: "won", Value: val(`1`)}}}}
	reply := mustApplyFor(t, s, "TENANT_C", t0+2, txn).Reply.(*schema.KVTxnReply)
	if reply.Succeeded {
		t.Fatal("a compare in tenant C saw another tenant's key")
	}
	reply = mustApplyFor(t, s, "TENANT_A", t0+2, txn).Reply.(*schema.KVTxnReply)
	if !reply.Succeeded {
		t.Fatal("a compare in tenant A did not see A's own key")
	}
	// Deleting everything deletes one tenant's keys only.
	mustApplyFor(t, s, "TENANT_A", t0+3, &Delete{Key: "", IsPrefix: true})
	eq(t, "A after delete all", len(getAll(s.In("TENANT_A"), t0)), 0)
	eq(t, "default after A's delete all", len(getAll(s, t0)), 2)
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
}

// An idempotency key is a tenant's own: the same key in another tenant is
// another request, neither a cached reply nor a conflict.
func TestTenantIdempotencyKeysAreSeparate(t *testing.T) {
	s := New()
	put := &Put{Key: "k", Value: val(`1`)}
	if r := applyFor(t, s, "A", "req-1", t0, put); r.Err != nil || r.Cached {
		t.Fatalf("first: %v cached %v", r.Err, r.Cached)
	}
	if r := applyFor(t, s, "A", "req-1", t0, put); r.Err != nil || !r.Cached {
		t.Fatalf("retry in A: %v cached %v", r.Err, r.Cached)
	}
	other := &Put{Key: "k", Value: val(`2`)}
	if r := applyFor(t, s, "B", "req-1", t0, other); r.Err != nil || r.Cached {
		t.Fatalf("the same key in B: %v cached %v", r.Err, r.Cached)
	}
	if r := applyFor(t, s, DefaultTenant, "req-1", t0, other); r.Err != nil || r.Cached {
		t.Fatalf("the same key in the default tenant: %v cached %v", r.Err, r.Cached)
	}
	eq(t, "A's value", string(getKey(t, s.In("A"), "k").Value), `1`)
	eq(t, "B's value", string(getKey(t, s.In("B"), "k").Value), `2`)
}

// Expiry: each tenant's due leases are listed apart, expire in their own
// space, and the next deadline is the earliest of all tenants.
func TestTenantExpiry(t *testing.T) {
	s := New()
	mustApplyFor(t, s, DefaultTenant, t0, &Grant{TTL: 5})
	mustApplyFor(t, s, "A", t0, &Grant{TTL: 2})
	mustApplyFor(t, s, "A", t0, &Put{Key: "k", Value: val(`1`), Lease: 1})
	mustApplyFor(t, s, "B", t0, &Grant{TTL: 3})
	next, ok := s.NextDeadline()
	eq(t, "next deadline is A's", next, int64(t0+2000))
	eq(t, "has next", ok, true)
	eq(t, "nothing due yet", len(s.Due(t0+2000)), 0)
	due := s.Due(t0 + 3001)
	eq(t, "due", due, []DueLeases{{Tenant: "A", IDs: []int64{1}}, {Tenant: "B", IDs: []int64{1}}})
	r := mustApplyFor(t, s, "A", t0+3001, &Expire{IDs: []int64{1}})
	eq(t, "A's key deleted", len(r.Events), 1)
	eq(t, "A's lease gone", len(s.In("A").LeaseList(true, 0, 10, t0).Leases), 0)
	eq(t, "B's lease 1 stays", len(s.In("B").LeaseList(true, 0, 10, t0).Leases), 1)
	eq(t, "the default's lease 1 stays", len(s.LeaseList(true, 0, 10, t0).Leases), 1)
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
}

// A batch of keep-alives of lease 1 for two tenants is two renewals: the
// coalescing of identical keep-alives is within a tenant.
func TestTenantBatchKeepAlivesStayApart(t *testing.T) {
	s := New()
	mustApplyFor(t, s, "A", t0, &Grant{TTL: 5})
	var parts [][]byte
	for _, tn := range []string{"A", "B", "A"} {
		data, err := EncodeFor(t0+100, tn, "", &KeepAlive{ID: 1})
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, data)
	}
	batch, err := EncodeBatch(parts)
	if err != nil {
		t.Fatal(err)
	}
	rs := s.ApplyEntry(batch)
	eq(t, "A renews", rs[0].Err, error(nil))
	if !errors.Is(rs[1].Err, ErrLeaseNotFound) {
		t.Fatalf("B renewed A's lease 1: %v", rs[1].Err)
	}
	eq(t, "A renews again", rs[2].Err, error(nil))
}

// A snapshot holds every tenant's space; restoring it gives the same
// state, and a replica restored from it goes on in step with the original.
func TestTenantSnapshotRoundTrip(t *testing.T) {
	log, src := genTenantLog(21, 3000)
	data := snap(t, src)
	got := restored(t, data)
	eq(t, "digest", stateDigest(got), stateDigest(src))
	eq(t, "bytes", string(snap(t, got)), string(data))
	if err := checkInvariants(got); err != nil {
		t.Fatal(err)
	}
	more, _ := genTenantLog(22, 500)
	for i, e := range append(more, log[:200]...) {
		if a, b := resultJSON(got.Apply(e)), resultJSON(src.Apply(e)); a != b {
			t.Fatalf("entry %d after the restore: %s, want %s", i, a, b)
		}
	}
	eq(t, "digest after more", stateDigest(got), stateDigest(src))
	// Version 4, for an older release, cannot hold tenants: refused.
	var buf bytes.Buffer
	if _, err := src.Snapshot().WriteVersion(&buf, 4); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("version 4 with tenants: %v", err)
	}
}

// Tenant frames out of order, twice the same tenant, a tenant's space
// missing or one revision in two tenants' logs are refused.
func TestTenantSnapshotDamageRefused(t *testing.T) {
	s := New()
	for _, n := range []string{"A", "B"} {
		mustApplyFor(t, s, n, t0, &Put{Key: "k", Value: val(`1`)})
	}
	for _, c := range []struct {
		name, want string
		damage     func(sn *Snapshot)
	}{
		{"out of order", `tenant "A" after "B"`, func(sn *Snapshot) { sn.tenants[0], sn.tenants[1] = sn.tenants[1], sn.tenants[0] }},
		{"twice", `tenant "A" after "A"`, func(sn *Snapshot) { sn.tenants[1] = sn.tenants[0] }},
		{"missing", "no change at revision 2", func(sn *Snapshot) { sn.tenants = sn.tenants[:1] }},
		{"renamed copy", "two spaces holds changes at revision 1", func(sn *Snapshot) {
			dup := *sn.tenants[0]
			dup.tenant = "B"
			sn.tenants[1] = &dup
		}},
		{"default name", `names "", not a tenant`, func(sn *Snapshot) { sn.tenants[0].tenant = DefaultTenant }},
	} {
		sn := s.Snapshot()
		c.damage(sn)
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

// A tenant entry must name a tenant, a valid one, and the default tenant
// has only its old encodings.
func TestTenantEntryEncoding(t *testing.T) {
	for _, bad := range []string{"a.b", "a b", "*", ">", "é", string(make([]byte, MaxTenantBytes+1))} {
		if _, err := EncodeFor(t0, bad, "", &Revoke{ID: 1}); !errors.Is(err, ErrBadCommand) {
			t.Errorf("EncodeFor(%q): %v", bad, err)
		}
	}
	def, err := EncodeFor(t0, DefaultTenant, "", &Revoke{ID: 1})
	if err != nil {
		t.Fatal(err)
	}
	old, _ := Encode(t0, &Revoke{ID: 1})
	eq(t, "the default tenant's entry is the old one", def, old)
	// Hand-made format 4 entries naming the default tenant or a bad name.
	for _, name := range []string{"", "a.b"} {
		w := encoder{buf: make([]byte, headerLen)}
		w.buf[0], w.buf[1] = formatTenant, byte(OpRevoke)
		w.bytes([]byte(name))
		w.bytes(nil)
		w = ops[OpRevoke].encode(w, &Revoke{ID: 1})
		if _, err := Decode(w.buf); !errors.Is(err, ErrBadCommand) {
			t.Errorf("a format 4 entry for tenant %q decodes: %v", name, err)
		}
		s := New()
		if r := s.Apply(w.buf); r.Err == nil || len(s.Tenants()) != 1 {
			t.Errorf("a format 4 entry for tenant %q applies (%v) or makes a space (%v)", name, r.Err, s.Tenants())
		}
	}
	// A read for a tenant that never wrote makes no space.
	s := New()
	eq(t, "empty tenant reads nothing", len(getAll(s.In("nobody"), t0)), 0)
	eq(t, "and leaves no space behind", s.Tenants(), []string{DefaultTenant})
}

// A view of a tenant reads that tenant's space only, and stands still.
func TestTenantView(t *testing.T) {
	s := New()
	mustApplyFor(t, s, "A", t0, &Put{Key: "k", Value: val(`1`)})
	mustApplyFor(t, s, DefaultTenant, t0, &Put{Key: "k", Value: val(`2`)})
	v := s.In("A").View()
	mustApplyFor(t, s, "A", t0, &Put{Key: "k", Value: val(`3`)})
	got := v.Get(GetQuery{Key: "k"}, t0)
	eq(t, "A's view", string(got.KVs[0].Value), `1`)
	eq(t, "the view's tenant", v.Tenant(), "A")
	eq(t, "the default view", string(s.View().Get(GetQuery{Key: "k"}, t0).KVs[0].Value), `2`)
}

// One tenant's writes never push another's history below what retention
// promises it: each keeps its own last HistoryRevisions revisions.
func TestTenantRetentionIsPerTenant(t *testing.T) {
	s := New()
	mustApply(t, s, t0, &Limits{MaxLeases: 100, MaxKeysPerLease: 10, HistoryRevisions: 20})
	for i := range 10 {
		mustApplyFor(t, s, "B", t0, &Put{Key: "b", Value: val(fmt.Sprint(i))})
	}
	for i := range 500 {
		mustApplyFor(t, s, "A", t0, &Put{Key: fmt.Sprintf("a%d", i%7), Value: val(fmt.Sprint(i))})
	}
	// B writes again: its retention runs, and still keeps its 11 changes.
	mustApplyFor(t, s, "B", t0, &Put{Key: "b", Value: val(`10`)})
	h, err := s.In("B").History(HistoryQuery{Key: "b", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "B's history after A's 500 writes", len(h.Records), 11)
	eq(t, "B's floor", s.In("B").CompactRevision(), int64(0))
	// A keeps its last 20 revisions; its floor is where they begin.
	ua := s.In("A").Usage()
	eq(t, "A's changes", ua.HistoryChanges, int64(20))
	eq(t, "A's floor", ua.CompactRevision, s.Revision()-21) // B's last write is above A's
	// B's 21st revision pushes out its first.
	for i := range 10 {
		mustApplyFor(t, s, "B", t0, &Put{Key: "b", Value: val(fmt.Sprint(11 + i))})
	}
	eq(t, "B at 21 revisions keeps 20", s.In("B").Usage().HistoryChanges, int64(20))
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
	// And the same after a snapshot and restore.
	r := restored(t, snap(t, s))
	eq(t, "digest after restore", stateDigest(r), stateDigest(s))
	if err := checkInvariants(r); err != nil {
		t.Fatal(err)
	}
}
