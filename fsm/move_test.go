package fsm

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/concord-io/concord/schema"
)

// A tenant moves from one state machine to another: every key, lease (with
// its time left at the fence) and idempotency entry arrives once; the
// source refuses the tenant from the fence on, even a write proposed
// before it; the target refuses it until it is activated.
func TestTenantMoveBetweenStates(t *testing.T) {
	src, dst := New(), New()
	mustApplyFor(t, src, "A", t0, &Grant{TTL: 10})
	mustApplyFor(t, src, "A", t0, &Put{Key: "k1", Value: val(`1`), Lease: 1})
	mustApplyFor(t, src, "A", t0, &Put{Key: "k2", Value: val(`"two"`), ContentType: "text/plain", Metadata: val(`{"m":1}`)})
	mustApplyFor(t, src, "A", t0, &Put{Key: "k2", Value: val(`"2"`)})
	mustApplyFor(t, src, "A", t0, &Put{Key: "anon", Value: val(`3`), TTL: 30})
	if r := applyFor(t, src, "A", "req-1", t0, &Grant{TTL: 20}); r.Err != nil {
		t.Fatal(r.Err)
	}
	mustApplyFor(t, src, "B", t0, &Grant{TTL: 10})
	// The target has its own tenant B and its own revisions.
	for range 5 {
		mustApplyFor(t, dst, "B", t0, &Put{Key: "b", Value: val(`1`)})
	}

	// Fence at t0+4000: lease 1 has 6 s left, the anonymous one 26 s.
	mustApply(t, src, t0+4000, &TenantMove{Tenant: "A", Phase: MoveFence, To: "c2"})
	for _, body := range []any{&KeepAlive{ID: 1}, &Put{Key: "k3", Value: val(`1`)}, &Revoke{ID: 1}} {
		r := applyFor(t, src, "A", "", t0+4000, body)
		if !errors.Is(r.Err, ErrTenantUnavailable) || !strings.Contains(r.Err.Error(), `moving to the cluster at subject prefix "c2"`) {
			t.Fatalf("%T while fenced: %v", body, r.Err)
		}
	}
	if err := src.TenantRefusal("A"); err == nil {
		t.Fatal("TenantRefusal says A is served while fenced")
	}
	// Frozen: long past every deadline, nothing is due, and an expire
	// changes nothing.
	if due := src.Due(t0 + 1_000_000); len(due) != 1 || due[0].Tenant != "B" {
		t.Fatalf("due while A is fenced: %+v", due)
	}
	if r := applyFor(t, src, "A", "", t0+1_000_000, &Expire{IDs: []int64{1, 2, 3}}); r.Err != nil || len(r.Events) != 0 {
		t.Fatalf("an expire of a fenced tenant: %v %v", r.Err, r.Events)
	}

	// Copy it over in chunks of one.
	var leases []MovedLease
	var keys []MovedKey
	var idem []MovedIdem
	var next int64
	for _, section := range []string{ExportLeases, ExportKeys, ExportIdempotency} {
		after := ""
		for {
			p, err := src.ExportTenant("A", section, after, 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			leases, keys, idem = append(leases, p.Leases...), append(keys, p.Keys...), append(idem, p.Idempotency...)
			next, after = p.NextLeaseID, p.Next
			if !p.More {
				break
			}
		}
	}
	eq(t, "leases exported", len(leases), 3)
	eq(t, "keys exported", len(keys), 3)
	eq(t, "idempotency exported", len(idem), 1)
	eq(t, "lease 1's time left at the fence", leases[0].RemainingMS, int64(6000))
	for _, l := range leases {
		mustApply(t, dst, t0+90_000, &TenantMove{Tenant: "A", Phase: MoveImport, Leases: []MovedLease{l}})
	}
	for _, k := range keys {
		mustApply(t, dst, t0+90_000, &TenantMove{Tenant: "A", Phase: MoveImport, Keys: []MovedKey{k}})
	}
	mustApply(t, dst, t0+90_000, &TenantMove{Tenant: "A", Phase: MoveImport, Idempotency: idem})
	if r := applyFor(t, dst, "A", "", t0+90_000, &KeepAlive{ID: 1}); !errors.Is(r.Err, ErrTenantUnavailable) {
		t.Fatalf("A served on the target before activation: %v", r.Err)
	}
	mustApply(t, dst, t0+90_000, &TenantMove{Tenant: "A", Phase: MoveActivate, NextLeaseID: next})
	mustApply(t, src, t0+90_000, &TenantMove{Tenant: "A", Phase: MoveFinish})

	// The target has A as it was, its leases with their time left.
	a := dst.In("A")
	li, err := a.LeaseInfo(1, true, t0+90_000)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "lease 1 remaining on the target", li.RemainingMS, int64(6000))
	eq(t, "lease 1 keys", li.Keys, []string{"k1"})
	kvs := getAll(a, t0+90_000)
	eq(t, "keys on the target", len(kvs), 3)
	k2 := getKey(t, a, "k2")
	eq(t, "k2 value", string(k2.Value), `"2"`)
	eq(t, "k2 version", k2.Version, int64(2))
	eq(t, "k2 revision is the target's", k2.ModRevision, int64(5))
	// A retry of the keyed grant is answered, not applied again.
	if r := applyFor(t, dst, "A", "req-1", t0+90_000, &Grant{TTL: 20}); r.Err != nil || !r.Cached {
		t.Fatalf("a retry of a request applied on the source: %v cached %v", r.Err, r.Cached)
	}
	// New leases do not reuse the source's ids.
	g := mustApplyFor(t, dst, "A", t0+90_000, &Grant{TTL: 5}).Reply.(*schema.LeaseGrantReply)
	if g.ID <= 3 {
		t.Fatalf("a new lease on the target took id %d", g.ID)
	}
	// The history starts at the import; reads before it are compacted.
	if _, err := a.GetAt(GetQuery{Key: "k2"}, 3, t0); !errors.Is(err, ErrCompacted) {
		t.Fatalf("a read at a revision before the import: %v", err)
	}
	// B on the target is untouched.
	eq(t, "B on the target", getKey(t, dst.In("B"), "b").Version, int64(5))

	// The source refuses A for good, naming where it went, and holds
	// nothing of it.
	r := applyFor(t, src, "A", "", t0+90_000, &Grant{TTL: 5})
	if !errors.Is(r.Err, ErrTenantUnavailable) || !strings.Contains(r.Err.Error(), `moved to the cluster at subject prefix "c2"`) {
		t.Fatalf("A on the source after the move: %v", r.Err)
	}
	eq(t, "A's keys on the source", src.In("A").Usage().Keys, int64(0))
	eq(t, "leases on the source", src.leaseTotal, int64(1)) // B's
	for _, s := range []*State{src, dst} {
		if err := checkInvariants(s); err != nil {
			t.Fatal(err)
		}
		eq(t, "digest after a snapshot", stateDigest(restored(t, snap(t, s))), stateDigest(s))
	}
	if err := restored(t, snap(t, src)).TenantRefusal("A"); err == nil {
		t.Fatal("a restored source serves A again")
	}
}

// An aborted move serves the tenant again on the source, its leases later
// by the time they were frozen, and drops what the target imported.
func TestTenantMoveAbort(t *testing.T) {
	src, dst := New(), New()
	mustApplyFor(t, src, "A", t0, &Grant{TTL: 10})
	mustApply(t, src, t0+4000, &TenantMove{Tenant: "A", Phase: MoveFence, To: "c2"})
	mustApply(t, dst, t0, &TenantMove{Tenant: "A", Phase: MoveImport, Leases: []MovedLease{{ID: 1, TTL: 10, RemainingMS: 6000}}})
	mustApply(t, src, t0+9000, &TenantMove{Tenant: "A", Phase: MoveAbort})
	mustApply(t, dst, t0, &TenantMove{Tenant: "A", Phase: MoveAbort})
	li, err := src.In("A").LeaseInfo(1, false, t0+9000)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "time left after 5 s frozen", li.RemainingMS, int64(6000))
	mustApplyFor(t, src, "A", t0+9000, &KeepAlive{ID: 1})
	eq(t, "the target forgot A", dst.Tenants(), []string{DefaultTenant})
	eq(t, "the target's leases", dst.leaseTotal, int64(0))
	// Steps out of order are refused and change nothing.
	for _, m := range []*TenantMove{
		{Tenant: "A", Phase: MoveFinish},                   // not fenced
		{Tenant: "A", Phase: MoveActivate},                 // not importing
		{Tenant: "nobody", Phase: MoveFence, To: "c2"},     // never wrote
		{Tenant: "A", Phase: MoveFence},                    // no destination
		{Tenant: "A", Phase: MoveImport},                   // served here
		{Tenant: DefaultTenant, Phase: MoveFence, To: "x"}, // the operator's own
	} {
		if r := apply(t, src, t0+9000, m); r.Err == nil {
			t.Errorf("move step %+v applied", m)
		}
	}
	for _, s := range []*State{src, dst} {
		if err := checkInvariants(s); err != nil {
			t.Fatal(err)
		}
	}
}

// A page of keys ends once its bytes pass the bound, after one key at
// least.
func TestTenantExportPageBytes(t *testing.T) {
	s := New()
	for _, k := range []string{"a", "b", "c"} {
		mustApplyFor(t, s, "A", t0, &Put{Key: k, Value: val(`"` + strings.Repeat("x", 1000) + `"`)})
	}
	mustApply(t, s, t0, &TenantMove{Tenant: "A", Phase: MoveFence, To: "c2"})
	p, err := s.ExportTenant("A", ExportKeys, "", 100, 10)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "keys in a page of 10 bytes", len(p.Keys), 1)
	eq(t, "more", p.More, true)
	p, err = s.ExportTenant("A", ExportKeys, p.Next, 100, 2500)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "keys after a", []string{p.Keys[0].Key, p.Keys[1].Key}, []string{"b", "c"})
	eq(t, "no more", p.More, false)
}

// A move step whose shape no state could accept does not decode: Check
// refuses it, so no replica applies it and Apply fails with ErrBadCommand.
func TestDecodeRefusesMalformedMoveSteps(t *testing.T) {
	lease := MovedLease{ID: 1, TTL: 10, RemainingMS: 5}
	key := MovedKey{Key: "k", Value: val(`1`), Version: 1}
	idem := MovedIdem{Key: "r", Reply: val(`{}`)}
	for _, m := range []*TenantMove{
		{Tenant: DefaultTenant, Phase: MoveFence, To: "x"},
		{Tenant: "a.b", Phase: MoveFence, To: "x"},
		{Tenant: "A", Phase: 0},
		{Tenant: "A", Phase: MoveAbort + 1},
		{Tenant: "A", Phase: MoveImport, Leases: []MovedLease{{ID: 0, TTL: 1}}},
		{Tenant: "A", Phase: MoveImport, Leases: []MovedLease{{ID: MaxLeaseID + 1, TTL: 1}}},
		{Tenant: "A", Phase: MoveImport, Leases: []MovedLease{{ID: 1, TTL: 0}}},
		{Tenant: "A", Phase: MoveImport, Leases: []MovedLease{{ID: 1, TTL: 1, RemainingMS: -1}}},
		{Tenant: "A", Phase: MoveImport, Leases: []MovedLease{lease, lease}},
		{Tenant: "A", Phase: MoveImport, Keys: []MovedKey{{Value: val(`1`), Version: 1}}},
		{Tenant: "A", Phase: MoveImport, Keys: []MovedKey{{Key: "k", Version: 1}}},
		{Tenant: "A", Phase: MoveImport, Keys: []MovedKey{{Key: "k", Value: val(`1`)}}},
		{Tenant: "A", Phase: MoveImport, Keys: []MovedKey{{Key: "k", Value: val(`1`), Version: 1, Lease: -1}}},
		{Tenant: "A", Phase: MoveImport, Keys: []MovedKey{{Key: "k", Value: val(`1`), Version: schema.MaxRevision + 1}}},
		{Tenant: "A", Phase: MoveImport, Keys: []MovedKey{key, key}},
		{Tenant: "A", Phase: MoveImport, Idempotency: []MovedIdem{{Reply: val(`{}`)}}},
		{Tenant: "A", Phase: MoveImport, Idempotency: []MovedIdem{{Key: "r"}}},
		{Tenant: "A", Phase: MoveImport, Idempotency: []MovedIdem{idem, idem}},
	} {
		data := encode(t, t0, m)
		if _, err := Decode(data); !errors.Is(err, ErrBadCommand) {
			t.Errorf("move step %+v decoded: %v", m, err)
		}
	}
	// The same chunk with its names once decodes, so the cases above fail
	// for the reason they name.
	good := &TenantMove{Tenant: "A", Phase: MoveImport, Leases: []MovedLease{lease}, Keys: []MovedKey{key}, Idempotency: []MovedIdem{idem}}
	if _, err := Decode(encode(t, t0, good)); err != nil {
		t.Fatalf("control step: %v", err)
	}
}

// A chunk that names what the target holds for the tenant already, or
// attaches a key to a lease neither holds, is refused whole: not one of
// its leases, keys or idempotency entries is written, and a first chunk
// refused leaves no space behind.
func TestImportConflictChangesNothing(t *testing.T) {
	s := New()
	mustApply(t, s, t0, &Grant{TTL: 10}) // the clock at t0, where it stays
	// A first chunk whose key names a lease nowhere: no space for A.
	before := snapBytes(s)
	r := apply(t, s, t0, &TenantMove{Tenant: "A", Phase: MoveImport, Leases: []MovedLease{{ID: 1, TTL: 10, RemainingMS: 5}},
		Keys: []MovedKey{{Key: "k", Value: val(`1`), Version: 1, Lease: 2}}})
	if !errors.Is(r.Err, ErrImportConflict) {
		t.Fatalf("key naming a lease not imported: %v", r.Err)
	}
	if !bytes.Equal(before, snapBytes(s)) || slices.Contains(s.Tenants(), "A") {
		t.Fatalf("a refused first chunk changed the state; tenants %v", s.Tenants())
	}
	mustApply(t, s, t0, &TenantMove{Tenant: "A", Phase: MoveImport, Leases: []MovedLease{{ID: 1, TTL: 10, RemainingMS: 5}, {ID: 5, TTL: 10, Anonymous: true}},
		Keys:        []MovedKey{{Key: "k", Value: val(`1`), Version: 1, Lease: 1}, {Key: "a", Value: val(`1`), Version: 1, Lease: 5}},
		Idempotency: []MovedIdem{{Key: "r", Reply: val(`{}`)}}})
	fresh := MovedLease{ID: 9, TTL: 10, RemainingMS: 5}
	before = snapBytes(s)
	for _, c := range []struct {
		what string
		m    *TenantMove
	}{
		{"lease 1 is here already", &TenantMove{Leases: []MovedLease{fresh, {ID: 1, TTL: 3}}}},
		{`key "k" is here already`, &TenantMove{Leases: []MovedLease{fresh}, Keys: []MovedKey{{Key: "k", Value: val(`2`), Version: 1}}}},
		{`key "j" names lease 4`, &TenantMove{Leases: []MovedLease{fresh}, Keys: []MovedKey{{Key: "i", Value: val(`2`), Version: 1, Lease: 9},
			{Key: "j", Value: val(`2`), Version: 1, Lease: 4}}}},
		{`idempotency key "r" is here already`, &TenantMove{Leases: []MovedLease{fresh}, Idempotency: []MovedIdem{{Key: "r", Reply: val(`{}`)}}}},
		{`key "y" names anonymous lease 8, which holds another key`, &TenantMove{Leases: []MovedLease{fresh, {ID: 8, TTL: 3, Anonymous: true}},
			Keys: []MovedKey{{Key: "x", Value: val(`2`), Version: 1, Lease: 8}, {Key: "y", Value: val(`2`), Version: 1, Lease: 8}}}},
		{`key "z" names anonymous lease 5, which holds another key`, &TenantMove{Leases: []MovedLease{fresh},
			Keys: []MovedKey{{Key: "z", Value: val(`2`), Version: 1, Lease: 5}}}},
	} {
		c.m.Tenant, c.m.Phase = "A", MoveImport
		r := apply(t, s, t0, c.m)
		if !errors.Is(r.Err, ErrImportConflict) || !strings.Contains(r.Err.Error(), c.what) {
			t.Errorf("%s: %v", c.what, r.Err)
		}
		if name, _ := WireName(r.Err); name != schema.ErrInvalidRequest {
			t.Errorf("%s: wire name %q", c.what, name)
		}
	}
	if !bytes.Equal(before, snapBytes(s)) {
		t.Fatal("a refused chunk changed the state")
	}
	// A key of a later chunk may name a lease of an earlier one.
	mustApply(t, s, t0, &TenantMove{Tenant: "A", Phase: MoveImport, Keys: []MovedKey{{Key: "k2", Value: val(`2`), Version: 1, Lease: 1}}})
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
}

// A move imports an anonymous lease with the leases and its key with the
// keys, so between the chunks the lease has no key: the state restores
// from a snapshot then, and the tenant cannot be activated until the key
// arrives.
func TestImportAnonymousLeaseBeforeItsKey(t *testing.T) {
	s := New()
	mustApply(t, s, t0, &Put{Key: "d", Value: val(`1`)})
	mustApply(t, s, t0, &TenantMove{Tenant: "A", Phase: MoveImport, Leases: []MovedLease{{ID: 4, TTL: 10, RemainingMS: 7000, Anonymous: true}}})
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
	eq(t, "digest after restore between chunks", stateDigest(restored(t, snap(t, s))), stateDigest(s))
	before := snapBytes(s)
	r := apply(t, s, t0, &TenantMove{Tenant: "A", Phase: MoveActivate, NextLeaseID: 5})
	if !errors.Is(r.Err, ErrImportConflict) || !strings.Contains(r.Err.Error(), "anonymous lease 4 has no key") {
		t.Fatalf("activation with a keyless anonymous lease: %v", r.Err)
	}
	if !bytes.Equal(before, snapBytes(s)) {
		t.Fatal("a refused activation changed the state")
	}
	mustApply(t, s, t0, &TenantMove{Tenant: "A", Phase: MoveImport, Keys: []MovedKey{{Key: "t", Value: val(`1`), Version: 3, Lease: 4}}})
	mustApply(t, s, t0, &TenantMove{Tenant: "A", Phase: MoveActivate, NextLeaseID: 5})
	li, err := s.In("A").LeaseInfo(4, true, t0)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "the anonymous lease's key", li.Keys, []string{"t"})
	eq(t, "its time left", li.RemainingMS, int64(7000))
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
	eq(t, "digest after restore", stateDigest(restored(t, snap(t, s))), stateDigest(s))
}

// An import into a cluster that never wrote gives its keys revision 1,
// not 0 (the revision of a key that does not exist); after an abort the
// revision stays accounted for, so the state still restores.
func TestImportIntoAFreshClusterThenAbort(t *testing.T) {
	s := New()
	mustApply(t, s, t0, &TenantMove{Tenant: "A", Phase: MoveImport, Keys: []MovedKey{{Key: "k", Value: val(`1`), Version: 2}}})
	k := getKey(t, s.In("A"), "k")
	eq(t, "imported key's revisions", []int64{k.CreateRevision, k.ModRevision, s.Revision()}, []int64{1, 1, 1})
	mustApply(t, s, t0, &TenantMove{Tenant: "A", Phase: MoveAbort})
	eq(t, "tenants after the abort", s.Tenants(), []string{DefaultTenant})
	if err := checkInvariants(s); err != nil {
		t.Fatal(err)
	}
	eq(t, "digest after restore", stateDigest(restored(t, snap(t, s))), stateDigest(s))
	// The default space's floor took revision 1 over: a reader from 0 is
	// told to read from 1, where it misses nothing.
	eq(t, "the default floor", s.CompactRevision(), int64(1))
	if _, err := s.Changes(ChangesQuery{IsPrefix: true, AfterOpIndex: -1, Limit: 10}); !errors.Is(err, ErrCompacted) || !strings.Contains(err.Error(), "read again from 1") {
		t.Fatalf("changes after 0: %v", err)
	}
	// The next write is revision 2, and a reader from revision 1 sees it.
	mustApply(t, s, t0, &Put{Key: "d", Value: val(`1`)})
	ch, err := s.Changes(ChangesQuery{IsPrefix: true, AfterRevision: 1, AfterOpIndex: -1, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "changes after revision 1", len(ch.Events), 1)
	eq(t, "at revision", ch.Events[0].Revision, int64(2))
	eq(t, "digest after restore", stateDigest(restored(t, snap(t, s))), stateDigest(s))
}

// The default floor takes revision 1 over only when nothing else accounts
// for it: not when the default tenant wrote revision 1, nor while another
// importing space's floor covers it.
func TestAbortLeavesTheFloorWhenRevisionOneIsOwned(t *testing.T) {
	s := New()
	mustApply(t, s, t0, &Put{Key: "d", Value: val(`1`)})
	mustApply(t, s, t0, &TenantMove{Tenant: "A", Phase: MoveImport, Keys: []MovedKey{{Key: "k", Value: val(`1`), Version: 1}}})
	mustApply(t, s, t0, &TenantMove{Tenant: "A", Phase: MoveAbort})
	eq(t, "the default floor after the default wrote revision 1", s.CompactRevision(), int64(0))
	eq(t, "digest after restore", stateDigest(restored(t, snap(t, s))), stateDigest(s))

	s = New()
	for _, tenant := range []string{"A", "B"} {
		mustApply(t, s, t0, &TenantMove{Tenant: tenant, Phase: MoveImport, Keys: []MovedKey{{Key: "k", Value: val(`1`), Version: 1}}})
	}
	eq(t, "revision after two imports", s.Revision(), int64(1))
	mustApply(t, s, t0, &TenantMove{Tenant: "A", Phase: MoveAbort})
	eq(t, "the default floor while B covers revision 1", s.CompactRevision(), int64(0))
	eq(t, "digest after restore", stateDigest(restored(t, snap(t, s))), stateDigest(s))
	mustApply(t, s, t0, &TenantMove{Tenant: "B", Phase: MoveAbort})
	eq(t, "the default floor once nothing else does", s.CompactRevision(), int64(1))
	eq(t, "digest after restore", stateDigest(restored(t, snap(t, s))), stateDigest(s))
}
