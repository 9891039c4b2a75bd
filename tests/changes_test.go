package tests

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// readChanges pages through P.kv.changes from a position and returns every
// event and the final reply.
func (c *client) readChanges(req map[string]any, limit int) ([]schema.Event, schema.KVChangesReply) {
	c.t.Helper()
	var all []schema.Event
	for page := 0; ; page++ {
		if page > 10000 {
			c.t.Fatal("change log paging does not end")
		}
		req["limit"] = limit
		var r schema.KVChangesReply
		c.ok(subjects.KVChanges, req, &r)
		all = append(all, r.Events...)
		if !r.More {
			return all, r
		}
		req["after_revision"] = r.NextRevision
		delete(req, "after_op_index")
		if r.NextOpIndex >= 0 {
			req["after_op_index"] = r.NextOpIndex
		}
	}
}

// The change log returns the same events the watchers saw, in order, for
// a key or a prefix, and pages through a revision with more events than
// one reply holds without repeating or skipping any.
func TestChangeLog(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	w := c.watch("concord.watch.cl.>")
	lease := c.grant(60)
	putMany(t, n, "cl.many.", 1500, lease)
	c.put("cl.single", 1, 0)
	c.put("other.key", 1, 0)
	c.put("cl.single", 2, 0)
	c.ok(subjects.LeaseRevoke, map[string]any{"id": lease}, nil) // 1500 deletes at one revision
	watched := w.waitFor(1500+2+1500, 20*time.Second)

	events, last := c.readChanges(map[string]any{"prefix": "cl.", "after_revision": 0}, 1000)
	if len(events) != len(watched) {
		t.Fatalf("change log has %d events under cl., watchers saw %d", len(events), len(watched))
	}
	for i := range events {
		a, _ := json.Marshal(events[i])
		b, _ := json.Marshal(watched[i].Event)
		if string(a) != string(b) {
			t.Fatalf("event %d: change log %s, watch %s", i, a, b)
		}
	}
	if last.NextRevision != c.revision() || last.NextOpIndex != -1 || last.CompactRevision != 0 {
		t.Fatalf("final position %+v, want the current revision %d", last, c.revision())
	}
	// Through the 1500-event revoke with limit 7: still every event once.
	small, _ := c.readChanges(map[string]any{"prefix": "cl.many.", "after_revision": 1500}, 7)
	if len(small) != 1500 || small[0].OpIndex != 0 || small[1499].OpIndex != 1499 {
		t.Fatalf("paging the revoke with limit 7 gave %d events", len(small))
	}
	one, _ := c.readChanges(map[string]any{"key": "cl.single", "after_revision": 0}, 100)
	if len(one) != 2 || string(one[1].Value) != "2" {
		t.Fatalf("a key's changes: %+v", one)
	}
}

// The history keeps --history-revisions revisions; a change-log read from
// below its floor gets 410 compacted with the floor in the description.
func TestChangeLogCompaction(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{flags: []string{"--history-revisions", "10"}})
	c := connect(t, n.natsURL)
	for i := 0; i < 30; i++ {
		c.put(fmt.Sprintf("cmp.k%d", i), i, 0)
	}
	e := c.fails(subjects.KVChanges, `{"prefix":"cmp.","after_revision":5}`, schema.ErrCompacted)
	if e.Code != 410 || !strings.Contains(e.Description, "20") {
		t.Fatalf("compacted error %+v, want the floor 20 named", e)
	}
	events, last := c.readChanges(map[string]any{"prefix": "cmp.", "after_revision": 20}, 100)
	if len(events) != 10 || last.CompactRevision != 20 || events[0].Revision != 21 {
		t.Fatalf("after the floor: %d events, %+v", len(events), last)
	}
}

// One keepalive_many renews many leases and lists the ones that are gone.
func TestKeepAliveMany(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	a, b := c.grant(5), c.grant(30)
	c.ok(subjects.KVPut, `{"key":"anon.k","value":1,"ttl":30}`, nil)
	anon := c.get(map[string]any{"key": "anon.k"}).KVs[0].Lease
	var r schema.LeaseKeepAliveManyReply
	c.ok(subjects.LeaseKeepAliveMany, map[string]any{"ids": []int64{a, 4242, b, anon}}, &r)
	if len(r.Leases) != 2 || r.Leases[0].ID != a || r.Leases[0].RemainingMS != 5000 || r.Leases[1].ID != b || r.Leases[1].TTL != 30 {
		t.Fatalf("renewed %+v", r.Leases)
	}
	if len(r.NotFound) != 2 || r.NotFound[0] != 4242 || r.NotFound[1] != anon {
		t.Fatalf("not found %v, want [4242 %d]", r.NotFound, anon)
	}
	c.fails(subjects.LeaseKeepAliveMany, `{"ids":[]}`, schema.ErrInvalidRequest)
	c.fails(subjects.LeaseKeepAliveMany, `{"ids":[0]}`, schema.ErrInvalidRequest)
}
