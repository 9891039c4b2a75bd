package tests

import (
	"fmt"
	"strings"
	"testing"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

func TestPutGetDeleteRevisions(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)

	if r := c.put("cfg.api", map[string]any{"v": 1}, 0); r != 1 {
		t.Fatalf("first put revision %d", r)
	}
	var p schema.KVPutReply
	c.ok(subjects.KVPut, `{"key":"cfg.api","value":{"v":2},"prev_kv":true}`, &p)
	if p.Revision != 2 || p.PrevKV == nil || string(p.PrevKV.Value) != `{"v":1}` || p.PrevKV.Version != 1 || p.PrevKV.ModRevision != 1 {
		t.Fatalf("second put = %+v prev %+v", p, p.PrevKV)
	}
	g := c.get(map[string]any{"key": "cfg.api"})
	kv := g.KVs[0]
	if g.Revision != 2 || g.Count != 1 || kv.CreateRevision != 1 || kv.ModRevision != 2 || kv.Version != 2 || string(kv.Value) != `{"v":2}` || kv.Lease != 0 || kv.RemainingMS != nil {
		t.Fatalf("get = %+v", g)
	}
	// A missing key is an empty result, not an error.
	if g := c.get(map[string]any{"key": "cfg.nope"}); len(g.KVs) != 0 || g.Count != 0 || g.Revision != 2 {
		t.Fatalf("get of a missing key = %+v", g)
	}
	// Any JSON value, null included, round-trips byte for byte (compacted).
	for i, v := range []string{`null`, `true`, `-1.5e3`, `"a<b>&c"`, `[1,{"x":[]}]`, `"\u00e9\n"`} {
		key := fmt.Sprintf("vals.k%d", i)
		c.ok(subjects.KVPut, `{"key":"`+key+`","value": `+v+` }`, nil)
		if got := c.get(map[string]any{"key": key}).KVs[0].Value; string(got) != v {
			t.Fatalf("value %s came back as %s", v, got)
		}
	}

	var d schema.KVDeleteReply
	c.ok(subjects.KVDelete, `{"key":"cfg.api","prev_kv":true}`, &d)
	if d.Deleted != 1 || len(d.PrevKVs) != 1 || string(d.PrevKVs[0].Value) != `{"v":2}` {
		t.Fatalf("delete = %+v", d)
	}
	rev := d.Revision
	c.ok(subjects.KVDelete, `{"key":"cfg.api"}`, &d)
	if d.Deleted != 0 || d.Revision != rev {
		t.Fatalf("deleting nothing = %+v, want revision %d unchanged", d, rev)
	}
	// Re-creating starts a new life: version 1, new create_revision.
	c.put("cfg.api", 3, 0)
	kv = c.get(map[string]any{"key": "cfg.api"}).KVs[0]
	if kv.Version != 1 || kv.CreateRevision != rev+1 {
		t.Fatalf("re-created key = %+v", kv)
	}
}

func TestPrefixReads(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	for i := 0; i < 25; i++ {
		c.put(fmt.Sprintf("svc.api.n%02d", i), i, 0)
	}
	c.put("svc.db.n1", "x", 0)
	c.put("svcx", "not under svc.", 0)

	g := c.get(map[string]any{"prefix": "svc.api."})
	if g.Count != 25 || len(g.KVs) != 25 || g.More || g.KVs[0].Key != "svc.api.n00" || g.KVs[24].Key != "svc.api.n24" {
		t.Fatalf("prefix get: count %d len %d more %v", g.Count, len(g.KVs), g.More)
	}
	g = c.get(map[string]any{"prefix": "svc.api.", "limit": 10})
	if g.Count != 25 || len(g.KVs) != 10 || !g.More {
		t.Fatalf("limited: count %d len %d more %v", g.Count, len(g.KVs), g.More)
	}
	g = c.get(map[string]any{"prefix": "svc.api.", "limit": 10, "after": "svc.api.n19"})
	if len(g.KVs) != 5 || g.More || g.KVs[0].Key != "svc.api.n20" || g.Count != 5 {
		t.Fatalf("after: %+v", g)
	}
	g = c.get(map[string]any{"prefix": "svc.", "keys_only": true})
	if len(g.KVs) != 26 || g.KVs[0].Value != nil {
		t.Fatalf("keys_only: %d records, first value %s", len(g.KVs), g.KVs[0].Value)
	}
	g = c.get(map[string]any{"prefix": "", "count_only": true})
	if g.Count != 27 || len(g.KVs) != 0 {
		t.Fatalf("count_only: %+v", g)
	}
	g = c.get(map[string]any{"prefix": "svc.api.n2", "serializable": true})
	if g.Count != 5 {
		t.Fatalf("serializable prefix read: %+v", g)
	}

	rev := c.revision()
	var d schema.KVDeleteReply
	c.ok(subjects.KVDelete, `{"prefix":"svc.api.","prev_kv":true}`, &d)
	if d.Deleted != 25 || d.Revision != rev+1 || len(d.PrevKVs) != 25 {
		t.Fatalf("prefix delete: deleted %d revision %d prev %d", d.Deleted, d.Revision, len(d.PrevKVs))
	}
	if g := c.get(map[string]any{"prefix": ""}); g.Count != 2 {
		t.Fatalf("after prefix delete %d keys remain, want 2", g.Count)
	}
}

func TestLargeReadIsSplitBelowMaxPayload(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	big := strings.Repeat("x", 600<<10)
	for i := 0; i < 5; i++ {
		c.put(fmt.Sprintf("blob.%d", i), big, 0)
	}
	var keys []string
	after := ""
	for page := 0; page < 10; page++ {
		g := c.get(map[string]any{"prefix": "blob.", "after": after})
		if g.Count == 0 || len(g.KVs) == 0 {
			t.Fatalf("page %d empty", page)
		}
		for _, kv := range g.KVs {
			keys = append(keys, kv.Key)
		}
		if !g.More {
			break
		}
		after = g.KVs[len(g.KVs)-1].Key
	}
	if strings.Join(keys, ",") != "blob.0,blob.1,blob.2,blob.3,blob.4" {
		t.Fatalf("paged keys %v", keys)
	}
}

func TestValueSizeLimit(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	// A 1 MiB value (compact JSON) is accepted.
	exact := `"` + strings.Repeat("v", 1<<20-2) + `"`
	c.ok(subjects.KVPut, `{"key":"big.ok","value":`+exact+`}`, nil)
	if got := c.get(map[string]any{"key": "big.ok"}).KVs[0].Value; len(got) != 1<<20 {
		t.Fatalf("1 MiB value came back with %d bytes", len(got))
	}
	rev := c.revision()
	over := `"` + strings.Repeat("v", 1<<20-1) + `"`
	e := c.fails(subjects.KVPut, `{"key":"big.no","value":`+over+`}`, schema.ErrTooLarge)
	if e.Code != 413 || !strings.Contains(e.Description, "value") {
		t.Fatalf("too large: %+v", e)
	}
	if c.revision() != rev {
		t.Fatal("an oversize put changed the revision")
	}
}

func TestLeaseAttachmentRules(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	a, b := c.grant(60), c.grant(60)
	c.put("k", 1, a)
	rev := c.revision()

	e := c.fails(subjects.KVPut, map[string]any{"key": "k", "value": 2, "lease": b}, schema.ErrLeaseConflict)
	if e.Code != 409 {
		t.Fatalf("conflict code %d", e.Code)
	}
	c.fails(subjects.KVPut, `{"key":"k","value":2,"ttl":5}`, schema.ErrLeaseConflict)
	c.fails(subjects.KVPut, `{"key":"k2","value":2,"lease":999}`, schema.ErrLeaseNotFound)
	if c.revision() != rev {
		t.Fatal("refused puts changed the revision")
	}

	// Same lease again is fine; no lease detaches.
	c.put("k", 3, a)
	if c.info(a, false).KeyCount != 1 {
		t.Fatal("re-put with the same lease double-counted")
	}
	c.put("k", 4, 0)
	if got := c.get(map[string]any{"key": "k"}).KVs[0]; got.Lease != 0 || c.info(a, false).KeyCount != 0 {
		t.Fatalf("put without a lease did not detach: %+v", got)
	}
	// Now it can join b.
	c.put("k", 5, b)

	// ttl puts: an anonymous lease, replaced by the next ttl put.
	c.ok(subjects.KVPut, `{"key":"s","value":1,"ttl":30}`, nil)
	first := c.get(map[string]any{"key": "s"}).KVs[0]
	c.ok(subjects.KVPut, `{"key":"s","value":2,"ttl":60}`, nil)
	second := c.get(map[string]any{"key": "s"}).KVs[0]
	if first.Lease == 0 || second.Lease == first.Lease || *second.RemainingMS <= 30000 {
		t.Fatalf("ttl re-put: first %+v second %+v", first, second)
	}
	c.fails(subjects.LeaseInfo, map[string]any{"id": first.Lease}, schema.ErrLeaseNotFound)
	// A plain put drops the anonymous lease with the attachment.
	c.put("s", 3, 0)
	c.fails(subjects.LeaseInfo, map[string]any{"id": second.Lease}, schema.ErrLeaseNotFound)
}
