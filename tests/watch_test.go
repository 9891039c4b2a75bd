package tests

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

func TestWatchEventsForEveryChange(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	w := c.watch("concord.watch.svc.>")
	other := c.watch("concord.watch.svc.api.n1")

	lease := c.grant(60)
	c.put("svc.api.n1", map[string]any{"addr": "10.0.0.5"}, lease) // rev 1
	c.put("svc.api.n2", 2, lease)                                  // rev 2
	c.put("svc.api.n1", 3, lease)                                  // rev 3
	c.put("elsewhere.x", 1, 0)                                     // rev 4, not watched
	c.ok(subjects.KVDelete, `{"key":"svc.api.n2"}`, nil)           // rev 5
	c.put("svc.db.a", 1, 0)                                        // rev 6
	c.put("svc.db.b", 1, 0)                                        // rev 7
	c.ok(subjects.KVDelete, `{"prefix":"svc.db."}`, nil)           // rev 8: two events
	c.ok(subjects.LeaseRevoke, map[string]any{"id": lease}, nil)   // rev 9

	evs := w.waitFor(9, 5*time.Second)
	type want struct {
		typ, key, cause string
		rev             int64
		op              int
		version         int64
		lease           int64
	}
	wants := []want{
		{"put", "svc.api.n1", "put", 1, 0, 1, lease},
		{"put", "svc.api.n2", "put", 2, 0, 1, lease},
		{"put", "svc.api.n1", "put", 3, 0, 2, lease},
		{"delete", "svc.api.n2", "delete", 5, 0, 0, lease},
		{"put", "svc.db.a", "put", 6, 0, 1, 0},
		{"put", "svc.db.b", "put", 7, 0, 1, 0},
		{"delete", "svc.db.a", "delete", 8, 0, 0, 0},
		{"delete", "svc.db.b", "delete", 8, 1, 0, 0},
		{"delete", "svc.api.n1", "lease_revoked", 9, 0, 0, lease},
	}
	if len(evs) != len(wants) {
		t.Fatalf("got %d events, want %d: %+v", len(evs), len(wants), evs)
	}
	for i, wnt := range wants {
		e := evs[i].Event
		got := want{e.Type, e.Key, e.Cause, e.Revision, e.OpIndex, e.Version, e.Lease}
		if got != wnt {
			t.Errorf("event %d = %+v, want %+v", i, got, wnt)
		}
	}
	if string(evs[0].Value) != `{"addr":"10.0.0.5"}` || evs[0].CreateRevision != 1 || evs[2].CreateRevision != 1 || evs[2].ModRevision != 3 {
		t.Errorf("put event details: %+v / %+v", evs[0].Event, evs[2].Event)
	}
	if evs[3].Value != nil || evs[3].ModRevision != 5 || evs[3].CreateRevision != 0 {
		t.Errorf("delete event details: %+v", evs[3].Event)
	}
	// A single-key subscription sees only its key.
	for _, e := range other.waitFor(3, 5*time.Second) {
		if e.Key != "svc.api.n1" {
			t.Errorf("svc.api.n1 watcher got %s", e.Key)
		}
	}
}

func TestWatchOrderUnderConcurrentWriters(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	w := c.watch("concord.watch.load.>")
	const writers, each = 8, 50
	// The helpers fail the test from these goroutines by ending them
	// (runtime.Goexit); the deferred Done still runs, so the test goes on.
	var wg sync.WaitGroup
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			wc := connect(t, n.natsURL)
			for j := 0; j < each; j++ {
				wc.put(fmt.Sprintf("load.w%d.k%d", i, j%5), j, 0)
			}
		}(i)
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	evs := w.waitFor(writers*each, 10*time.Second)
	for i := 1; i < len(evs); i++ {
		if evs[i].Revision != evs[i-1].Revision+1 {
			t.Fatalf("event %d has revision %d after %d: not in order or a gap", i, evs[i].Revision, evs[i-1].Revision)
		}
	}
}

// The bar: a 10,000-key revoke deletes every key at one revision
// and a watcher receives every delete. The time to the last event is logged
// (speed is measured by `concord bench revoke`, not asserted here).
func TestRevokeOfTenThousandKeys(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	lease := c.grant(600)
	const keys = 10000
	putMany(t, n, "big.", keys, lease)
	if info := c.info(lease, false); info.KeyCount != keys {
		t.Fatalf("lease has %d keys", info.KeyCount)
	}
	w := c.watch("concord.watch.big.>")
	rev := c.revision()
	start := time.Now()
	var r schema.LeaseRevokeReply
	c.ok(subjects.LeaseRevoke, map[string]any{"id": lease}, &r)
	replied := time.Since(start)
	if r.Deleted != keys || r.Revision != rev+1 {
		t.Fatalf("revoke = %+v, want %d deleted at %d", r, keys, rev+1)
	}
	evs := w.waitFor(keys, 20*time.Second)
	last := evs[len(evs)-1].at.Sub(start)
	for i, e := range evs {
		if e.Revision != rev+1 || e.OpIndex != i || e.Cause != schema.CauseLeaseRevoked || e.Type != schema.EventDelete {
			t.Fatalf("event %d = %+v", i, e.Event)
		}
	}
	t.Logf("revoke of %d keys: reply after %s, last delete event after %s", keys, replied, last)
	if g := c.get(map[string]any{"prefix": "big.", "count_only": true}); g.Count != 0 {
		t.Fatalf("%d keys left", g.Count)
	}
}

// putMany writes count keys attached to lease from several connections.
func putMany(t *testing.T, n *node, prefix string, count int, lease int64) {
	t.Helper()
	const conns = 16
	var wg sync.WaitGroup
	for i := 0; i < conns; i++ {
		wc := connect(t, n.natsURL)
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for k := i; k < count; k += conns {
				key := fmt.Sprintf("%s%05d", prefix, k)
				if _, e, err := request(wc.nc, "concord.kv.put", map[string]any{"key": key, "value": k, "lease": lease}, "", 10*time.Second); err != nil || e != nil {
					t.Errorf("put %s: %v %v", key, err, e)
					return
				}
			}
		}(i)
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}
