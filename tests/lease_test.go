package tests

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

func TestLeaseLifecycle(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)

	var g schema.LeaseGrantReply
	c.ok(subjects.LeaseGrant, `{"ttl":30,"metadata":{"owner":"worker-1"}}`, &g)
	if g.ID != 1 || g.TTL != 30 || g.Revision != 0 {
		t.Fatalf("first grant = %+v, want id 1 ttl 30 revision 0", g)
	}
	c.put("svc.a", 1, g.ID)
	c.put("svc.b", 2, g.ID)

	info := c.info(g.ID, true)
	if info.TTL != 30 || info.Anonymous || info.KeyCount != 2 || strings.Join(info.Keys, ",") != "svc.a,svc.b" ||
		string(info.Metadata) != `{"owner":"worker-1"}` || info.GrantedRevision != 0 {
		t.Fatalf("info = %+v", info)
	}
	if info.RemainingMS <= 0 || info.RemainingMS > 30000 || info.RemainingTTL != info.RemainingMS/1000 {
		t.Fatalf("remaining = %d ms / %d s", info.RemainingMS, info.RemainingTTL)
	}
	if noKeys := c.info(g.ID, false); noKeys.Keys != nil || noKeys.KeyCount != 2 {
		t.Fatalf("info without keys = %+v", noKeys)
	}

	var ka schema.LeaseKeepAliveReply
	c.ok(subjects.LeaseKeepAlive, `{"id":1,"ttl":60}`, &ka)
	if ka.ID != 1 || ka.TTL != 60 || ka.RemainingTTL != 60 || ka.RemainingMS != 60000 {
		t.Fatalf("keepalive with new ttl = %+v", ka)
	}
	c.ok(subjects.LeaseKeepAlive, `{"id":1}`, &ka)
	if ka.TTL != 60 {
		t.Fatalf("keepalive keeps the new ttl: %+v", ka)
	}

	rev := c.revision()
	var rv schema.LeaseRevokeReply
	c.ok(subjects.LeaseRevoke, `{"id":1}`, &rv)
	if rv.Deleted != 2 || rv.Revision != rev+1 {
		t.Fatalf("revoke = %+v, want 2 deleted at revision %d", rv, rev+1)
	}
	if got := c.get(map[string]any{"prefix": "svc."}); len(got.KVs) != 0 {
		t.Fatalf("keys survive revoke: %+v", got.KVs)
	}
	c.fails(subjects.LeaseInfo, `{"id":1}`, schema.ErrLeaseNotFound)
	c.fails(subjects.LeaseKeepAlive, `{"id":1}`, schema.ErrLeaseNotFound)
	c.fails(subjects.LeaseRevoke, `{"id":1}`, schema.ErrLeaseNotFound)

	// A lease with no keys revokes without a new revision.
	empty := c.grant(5)
	c.ok(subjects.LeaseRevoke, map[string]any{"id": empty}, &rv)
	if rv.Deleted != 0 || rv.Revision != rev+1 {
		t.Fatalf("revoke of empty lease = %+v, want revision %d unchanged", rv, rev+1)
	}
	// Ids are never reused.
	if id := c.grant(5); id != empty+1 {
		t.Fatalf("grant after revoke got id %d, want %d", id, empty+1)
	}
}

func TestLeaseGrantWithRequestedID(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	var g schema.LeaseGrantReply
	c.ok(subjects.LeaseGrant, `{"ttl":10,"id":100}`, &g)
	if g.ID != 100 {
		t.Fatalf("requested id: got %d", g.ID)
	}
	e := c.fails(subjects.LeaseGrant, `{"ttl":10,"id":100}`, schema.ErrLeaseExists)
	if e.Code != 409 || !strings.Contains(e.Description, "100") {
		t.Fatalf("lease_exists error %+v", e)
	}
	// The counter moves past a requested id, so it is never handed out.
	if id := c.grant(10); id != 101 {
		t.Fatalf("next auto id %d, want 101", id)
	}
}

func TestLeaseList(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	for i := 0; i < 5; i++ {
		c.grant(60)
	}
	// A ttl put makes an anonymous lease, hidden unless asked for.
	c.ok(subjects.KVPut, `{"key":"session.abc","value":"x","ttl":60}`, nil)

	var l schema.LeaseListReply
	c.ok(subjects.LeaseList, `{}`, &l)
	if len(l.Leases) != 5 || l.More {
		t.Fatalf("list = %d leases more=%v", len(l.Leases), l.More)
	}
	c.ok(subjects.LeaseList, `{"include_anonymous":true}`, &l)
	if len(l.Leases) != 6 || !l.Leases[5].Anonymous || l.Leases[5].KeyCount != 1 {
		t.Fatalf("list with anonymous = %+v", l.Leases)
	}
	c.ok(subjects.LeaseList, `{"limit":2}`, &l)
	if len(l.Leases) != 2 || !l.More || l.Leases[0].ID != 1 || l.Leases[1].ID != 2 {
		t.Fatalf("first page = %+v more=%v", l.Leases, l.More)
	}
	c.ok(subjects.LeaseList, `{"limit":2,"after":4}`, &l)
	if len(l.Leases) != 1 || l.More || l.Leases[0].ID != 5 {
		t.Fatalf("last page = %+v more=%v", l.Leases, l.More)
	}
	for _, lease := range l.Leases {
		if lease.Keys != nil {
			t.Fatalf("list carries keys: %+v", lease)
		}
	}
}

func TestLeaseLimits(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{flags: []string{"--max-leases", "3", "--max-keys-per-lease", "2", "--max-metadata-bytes", "64"}})
	c := connect(t, n.natsURL)
	a := c.grant(60)
	c.put("a.1", 1, a)
	c.put("a.2", 2, a)
	rev := c.revision()
	e := c.fails(subjects.KVPut, map[string]any{"key": "a.3", "value": 3, "lease": a}, schema.ErrLimitExceeded)
	if e.Code != 429 {
		t.Fatalf("code %d", e.Code)
	}
	// Re-putting an attached key is not a new attachment.
	c.put("a.2", 22, a)
	c.grant(60)
	c.ok(subjects.KVPut, `{"key":"anon.1","value":1,"ttl":60}`, nil)
	c.fails(subjects.LeaseGrant, `{"ttl":60}`, schema.ErrLimitExceeded)
	c.fails(subjects.KVPut, `{"key":"anon.2","value":1,"ttl":60}`, schema.ErrLimitExceeded)
	// Replacing a key's anonymous lease does not need a new slot.
	c.ok(subjects.KVPut, `{"key":"anon.1","value":2,"ttl":30}`, nil)
	if got := c.revision(); got != rev+3 {
		t.Fatalf("revision %d, want %d: refused requests must not advance it", got, rev+3)
	}

	big := `{"ttl":5,"metadata":{"note":"` + strings.Repeat("x", 64) + `"}}`
	if e := c.fails(subjects.LeaseGrant, big, schema.ErrTooLarge); e.Code != 413 {
		t.Fatalf("metadata too large: %+v", e)
	}
}

func TestKeepAliveOfAnonymousLeaseIsRefused(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	c.ok(subjects.KVPut, `{"key":"s.1","value":1,"ttl":30}`, nil)
	kv := c.get(map[string]any{"key": "s.1"}).KVs[0]
	info := c.info(kv.Lease, true)
	if !info.Anonymous || info.KeyCount != 1 || info.Keys[0] != "s.1" || info.GrantedRevision != kv.ModRevision {
		t.Fatalf("anonymous lease info %+v for %+v", info, kv)
	}
	e := c.fails(subjects.LeaseKeepAlive, map[string]any{"id": kv.Lease}, schema.ErrLeaseNotFound)
	if !strings.Contains(e.Description, "anonymous") {
		t.Fatalf("description should say why: %q", e.Description)
	}
	// Attaching another key to it is refused too: it belongs to one key.
	c.fails(subjects.KVPut, map[string]any{"key": "s.2", "value": 1, "lease": kv.Lease}, schema.ErrLeaseNotFound)
	// Deleting the key removes its anonymous lease.
	c.ok(subjects.KVDelete, `{"key":"s.1"}`, nil)
	c.fails(subjects.LeaseInfo, map[string]any{"id": kv.Lease}, schema.ErrLeaseNotFound)
}

func TestMetadataRoundTrips(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	var g schema.LeaseGrantReply
	c.ok(subjects.LeaseGrant, `{"ttl":10, "metadata": {"b": [1, 2], "a": "<&>"}}`, &g)
	info := c.info(g.ID, false)
	// Stored compact, byte for byte, with no HTML escaping.
	if string(info.Metadata) != `{"b":[1,2],"a":"<&>"}` {
		t.Fatalf("metadata = %s", info.Metadata)
	}
	var any map[string]any
	if err := json.Unmarshal(info.Metadata, &any); err != nil {
		t.Fatal(err)
	}
}
