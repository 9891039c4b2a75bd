package tests

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

func (c *client) txn(body any) schema.KVTxnReply {
	c.t.Helper()
	var r schema.KVTxnReply
	c.ok(subjects.KVTxn, body, &r)
	return r
}

// 32 clients race to create one key with create_revision == 0: exactly one
// wins, and every loser's failure branch reads the winner's value.
func TestTxnCreateRaceHasOneWinner(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	const clients = 32
	replies := make([]schema.KVTxnReply, clients)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < clients; i++ {
		c := connect(t, n.natsURL)
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			r := c.raw(subjects.KVTxn, fmt.Sprintf(`{
				"compare": [{"key":"race.owner","target":"create_revision","op":"==","value":0}],
				"success": [{"put":{"key":"race.owner","value":"client-%d"}}],
				"failure": [{"get":{"key":"race.owner"}}]}`, i))
			if r.err != nil {
				t.Errorf("client %d: %v", i, r.err)
				return
			}
			if err := json.Unmarshal(r.data, &replies[i]); err != nil {
				t.Error(err)
			}
		}(i)
	}
	close(start)
	wg.Wait()
	winners := 0
	var winner string
	for i, r := range replies {
		if r.Succeeded {
			winners++
			winner = fmt.Sprintf(`"client-%d"`, i)
		}
	}
	if winners != 1 {
		t.Fatalf("%d winners, want exactly 1", winners)
	}
	for i, r := range replies {
		if r.Succeeded {
			continue
		}
		kvs := r.Responses[0].Get.KVs
		if len(kvs) != 1 || string(kvs[0].Value) != winner || kvs[0].Version != 1 {
			t.Fatalf("loser %d read %+v, want the winner's %s at version 1", i, kvs, winner)
		}
	}
	c := connect(t, n.natsURL)
	if kv := c.get(map[string]any{"key": "race.owner"}).KVs[0]; string(kv.Value) != winner || kv.Version != 1 {
		t.Fatalf("final value %+v, want %s written once", kv, winner)
	}
}

// A lock is a key created with create_revision == 0 on the holder's lease;
// its create_revision is the fencing token. When the holder's lease goes,
// the key goes, and the next acquire gets a larger token.
func TestTxnLockAcquireWithLease(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	acquire := func(lease int64, holder string) schema.KVTxnReply {
		return c.txn(map[string]any{
			"compare": []any{map[string]any{"key": "locks.build", "target": "create_revision", "op": "==", "value": 0}},
			"success": []any{map[string]any{"put": map[string]any{"key": "locks.build", "value": holder, "lease": lease}},
				map[string]any{"get": map[string]any{"key": "locks.build"}}},
			"failure": []any{map[string]any{"get": map[string]any{"key": "locks.build"}}},
		})
	}
	a, b := c.grant(30), c.grant(30)
	first := acquire(a, "n1")
	if !first.Succeeded {
		t.Fatalf("first acquire failed: %+v", first)
	}
	token1 := first.Responses[1].Get.KVs[0].CreateRevision
	if token1 != first.Revision || first.Responses[1].Get.KVs[0].Lease != a {
		t.Fatalf("the lock key %+v does not carry the txn revision %d and lease %d", first.Responses[1].Get.KVs[0], first.Revision, a)
	}
	second := acquire(b, "n2")
	if second.Succeeded || string(second.Responses[0].Get.KVs[0].Value) != `"n1"` {
		t.Fatalf("second acquire while held: %+v", second)
	}
	// The holder's lease ends: the lock is free, and the new token is larger.
	c.ok(subjects.LeaseRevoke, map[string]any{"id": a}, nil)
	third := acquire(b, "n2")
	if !third.Succeeded {
		t.Fatalf("acquire after the holder's lease ended: %+v", third)
	}
	if token2 := third.Responses[1].Get.KVs[0].CreateRevision; token2 <= token1 {
		t.Fatalf("fencing token %d after %d", token2, token1)
	}
	// A lease compare: only the holder (lease b) may release.
	release := func(lease int64) schema.KVTxnReply {
		return c.txn(map[string]any{
			"compare": []any{map[string]any{"key": "locks.build", "target": "lease", "op": "==", "value": lease}},
			"success": []any{map[string]any{"delete": map[string]any{"key": "locks.build"}}},
		})
	}
	if r := release(a); r.Succeeded {
		t.Fatal("a stale holder released the lock")
	}
	if r := release(b); !r.Succeeded || r.Responses[0].Delete.Deleted != 1 {
		t.Fatalf("the holder's release: %+v", r)
	}
}

// A retry with the same idempotency key after the first reply was lost
// applies once and gets the first reply; the key with another request is
// refused with 409.
func TestTxnRetryAfterLostReplyAppliesOnce(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	w := c.watch("concord.watch.idem.>")
	req := `{"compare":[{"key":"idem.counter","target":"exists","op":"==","value":false}],
		"success":[{"put":{"key":"idem.counter","value":1}}],
		"failure":[{"put":{"key":"idem.counter","value":2}}],
		"idempotency_key":"n1:req-1842"}`
	// The first attempt's reply goes to an inbox nobody reads: lost.
	if err := c.nc.PublishRequest(c.names.Request(subjects.KVTxn), nats.NewInbox(), []byte(req)); err != nil {
		t.Fatal(err)
	}
	checkFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if len(c.get(map[string]any{"key": "idem.counter"}).KVs) == 0 {
			return fmt.Errorf("first attempt not applied yet")
		}
		return nil
	})
	rev := c.revision()
	retry := c.txn(req)
	if !retry.Succeeded || retry.Revision != rev {
		t.Fatalf("retry = %+v, want the first reply (succeeded at revision %d)", retry, rev)
	}
	kv := c.get(map[string]any{"key": "idem.counter"}).KVs[0]
	if string(kv.Value) != "1" || kv.Version != 1 || c.revision() != rev {
		t.Fatalf("after the retry the key is %+v at revision %d: applied twice", kv, c.revision())
	}
	e := c.fails(subjects.KVTxn, strings.Replace(req, `"value":1`, `"value":3`, 1), schema.ErrIdempotencyConflict)
	if e.Code != 409 {
		t.Fatalf("conflict code %d", e.Code)
	}
	// Only one event was published for the one application.
	time.Sleep(200 * time.Millisecond)
	if evs := w.snapshot(); len(evs) != 1 {
		t.Fatalf("%d events, want 1", len(evs))
	}
}

// The Concord-Idempotency-Key header works on every mutating subject.
func TestIdempotencyHeader(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	send := func(ep subjects.Endpoint, key, body string) reply {
		msg := nats.NewMsg(c.names.Request(ep))
		msg.Header.Set(schema.HeaderIdempotencyKey, key)
		msg.Data = []byte(body)
		resp, err := c.nc.RequestMsg(msg, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Get(schema.HeaderErrorCode) != "" {
			var er schema.ErrorReply
			mustUnmarshal(t, resp.Data, &er)
			return reply{data: resp.Data, err: er.Error}
		}
		if err := schema.Validate(string(ep)+".reply", resp.Data); err != nil {
			t.Fatalf("%s reply %s: %v", ep, resp.Data, err)
		}
		return reply{data: resp.Data}
	}
	g1 := send(subjects.LeaseGrant, "g-1", `{"ttl":30}`)
	g2 := send(subjects.LeaseGrant, "g-1", `{"ttl":30}`)
	if g1.err != nil || string(g1.data) != string(g2.data) {
		t.Fatalf("grant retried: %s then %s", g1.data, g2.data)
	}
	var l schema.LeaseListReply
	c.ok(subjects.LeaseList, `{}`, &l)
	if len(l.Leases) != 1 {
		t.Fatalf("a retried grant made %d leases", len(l.Leases))
	}
	p1 := send(subjects.KVPut, "p-1", `{"key":"h.k","value":1}`)
	p2 := send(subjects.KVPut, "p-1", `{"key":"h.k","value":1}`)
	if string(p1.data) != string(p2.data) || c.get(map[string]any{"key": "h.k"}).KVs[0].Version != 1 {
		t.Fatalf("put retried: %s then %s", p1.data, p2.data)
	}
	if r := send(subjects.KVPut, "p-1", `{"key":"h.k","value":2}`); r.err == nil || r.err.Name != schema.ErrIdempotencyConflict {
		t.Fatalf("reused key: %+v", r)
	}
	if r := send(subjects.KVPut, "p-2", `{"key":"h.k","value":2,"idempotency_key":"p-3"}`); r.err == nil || r.err.Name != schema.ErrInvalidRequest {
		t.Fatalf("header and body disagreeing: %+v", r)
	}
	d1 := send(subjects.KVDelete, "d-1", `{"key":"h.k"}`)
	d2 := send(subjects.KVDelete, "d-1", `{"key":"h.k"}`)
	if string(d1.data) != string(d2.data) || !strings.Contains(string(d1.data), `"deleted":1`) {
		t.Fatalf("delete retried: %s then %s", d1.data, d2.data)
	}
}

// Operations see earlier writes; the revision advances once; the events
// carry it with op_index in operation order; a put to an unknown lease
// fails the whole transaction.
func TestTxnAtomicAndOrdered(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	w := c.watch("concord.watch.t.>")
	c.put("t.tmp.a", 1, 0)
	c.put("t.tmp.b", 2, 0)
	rev := c.revision()
	r := c.txn(`{"success":[
		{"put":{"key":"t.x","value":{"status":"pending"}}},
		{"get":{"prefix":"t."}},
		{"delete":{"prefix":"t.tmp.","prev_kv":true}},
		{"get":{"prefix":"t.","keys_only":true}}]}`)
	if !r.Succeeded || r.Revision != rev+1 {
		t.Fatalf("txn = %+v, want success at %d", r, rev+1)
	}
	if got := r.Responses[1].Get; got.Count != 3 || got.Revision != rev+1 {
		t.Fatalf("read-your-writes get: %+v", got)
	}
	if d := r.Responses[2].Delete; d.Deleted != 2 || len(d.PrevKVs) != 2 {
		t.Fatalf("delete in txn: %+v", d)
	}
	if got := r.Responses[3].Get; got.Count != 1 || got.KVs[0].Key != "t.x" {
		t.Fatalf("get after delete: %+v", got)
	}
	evs := w.waitFor(5, 5*time.Second)[2:]
	for i, e := range evs {
		if e.Revision != rev+1 || e.OpIndex != i {
			t.Fatalf("event %d: %+v", i, e.Event)
		}
	}
	if evs[0].Key != "t.x" || evs[1].Key != "t.tmp.a" || evs[2].Key != "t.tmp.b" {
		t.Fatalf("event order: %s %s %s", evs[0].Key, evs[1].Key, evs[2].Key)
	}

	// A field compare reads into the value.
	r = c.txn(`{"compare":[{"key":"t.x","target":"field","path":"/status","op":"==","value":"pending"}],
		"success":[{"put":{"key":"t.x","value":{"status":"running"}}}]}`)
	if !r.Succeeded {
		t.Fatal("field compare failed")
	}

	before := c.revision()
	e := c.fails(subjects.KVTxn, `{"success":[{"put":{"key":"t.y","value":1}},{"put":{"key":"t.z","value":1,"lease":4242}}]}`, schema.ErrLeaseNotFound)
	if !strings.Contains(e.Description, "4242") {
		t.Fatalf("description %q", e.Description)
	}
	if c.revision() != before || len(c.get(map[string]any{"key": "t.y"}).KVs) != 0 {
		t.Fatal("a failed transaction applied part of itself")
	}
	// Reads only: the revision stays.
	r = c.txn(`{"compare":[{"key":"t.none","target":"exists","op":"==","value":true}],"failure":[{"get":{"key":"t.x"}}]}`)
	if r.Succeeded || r.Revision != before {
		t.Fatalf("read-only txn = %+v", r)
	}
	// A prefix delete over its limit fails the whole transaction.
	for i := 0; i < 3; i++ {
		c.put(fmt.Sprintf("t.many.%d", i), i, 0)
	}
	before = c.revision()
	c.fails(subjects.KVTxn, `{"success":[{"put":{"key":"t.q","value":1}},{"delete":{"prefix":"t.many.","limit":2}}]}`, schema.ErrTooLarge)
	if c.revision() != before {
		t.Fatal("an over-limit delete applied part of the transaction")
	}
}

// The idempotency cache is replicated state: it survives kill -9 and a
// restart from snapshot + log.
func TestIdempotencySurvivesRestart(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{flags: []string{"--snapshot-threshold", "100", "--snapshot-interval", "200ms", "--trailing-logs", "10"}})
	c := connect(t, n.natsURL)
	req := `{"key":"idem.restart","value":"once","idempotency_key":"restart-1"}`
	var first schema.KVPutReply
	c.ok(subjects.KVPut, req, &first)
	for i := 0; i < 300; i++ { // push the entry into a snapshot
		c.put(fmt.Sprintf("idem.fill.%03d", i), i, 0)
	}
	checkFor(t, 10*time.Second, 100*time.Millisecond, func() error {
		if snaps := finishedSnapshots(n.dataDir); len(snaps) == 0 {
			return fmt.Errorf("no snapshot yet")
		}
		return nil
	})
	n.kill()
	n.restart()
	c = connect(t, n.natsURL)
	var again schema.KVPutReply
	c.ok(subjects.KVPut, req, &again)
	if again != first {
		t.Fatalf("retry after restart = %+v, want the first reply %+v", again, first)
	}
	if kv := c.get(map[string]any{"key": "idem.restart"}).KVs[0]; kv.Version != 1 {
		t.Fatalf("the retry applied again: version %d", kv.Version)
	}
}
