package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	cc "github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// eventPromptness bounds how long after its put is acknowledged a raw
// subscriber may wait for the event: generous for a busy machine, and far
// below the 20 s that held-back events were seen to take.
const eventPromptness = 5 * time.Second

// A raw NATS subscriber (no Go client, nothing that hides duplicates by
// revision) across three restarts of a node with 1,000 changes in its log:
// every revision arrives at most once and in order, the last change before
// each quiet spell arrives promptly, and kv.changes holds every revision the
// subscriber did not see. A restart replays the log; the node must not
// publish the replayed changes again. The node serves through an external
// NATS server, where held-back events were seen.
func TestEventsOnceAcrossRestarts(t *testing.T) {
	t.Parallel()
	ns := startNATSServer(t, &server.Options{})
	// A snapshot threshold above the log's length: every restart replays
	// all of it.
	n := startNode(t, nodeOpts{natsURL: ns.ClientURL(), flags: []string{"--snapshot-threshold", "100000"}})
	c := connect(t, ns.ClientURL())
	w1 := c.watch("concord.watch.once.>")
	w2 := connect(t, ns.ClientURL()).watch("concord.watch.once.>")

	var acked []int64 // every acknowledged put's revision, in order
	putRound := func(round, count int) {
		// Four writers at once, so the log holds batch entries too.
		var mu sync.Mutex
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := g; i < count; i += 4 {
					rev := c.put(fmt.Sprintf("once.%d.%d", round, i), i, 0)
					mu.Lock()
					acked = append(acked, rev)
					mu.Unlock()
				}
			}(g)
		}
		wg.Wait()
		// The quiet spell: the last change must arrive promptly.
		last := c.put(fmt.Sprintf("once.%d.last", round), "last", 0)
		acked = append(acked, last)
		ackedAt := time.Now()
		for _, w := range []*watcher{w1, w2} {
			checkFor(t, eventPromptness, 5*time.Millisecond, func() error {
				for _, ev := range w.snapshot() {
					if ev.Revision == last {
						return nil
					}
				}
				return fmt.Errorf("round %d: the event of the last put (revision %d) has not arrived %s after its acknowledgement", round, last, time.Since(ackedAt).Round(time.Millisecond))
			})
		}
	}

	putRound(0, 1000)
	for r := 1; r <= 3; r++ {
		if r == 2 {
			n.kill() // a crash replays the same log as a clean stop
		} else {
			n.stop()
		}
		n.restart()
		putRound(r, 50)
	}
	// Anything a restart would publish again has had time to arrive.
	time.Sleep(time.Second)

	for i, w := range []*watcher{w1, w2} {
		seen := onceInOrder(t, i+1, w)
		// Every acknowledged revision the subscriber missed is in the
		// change log: a watcher can fill its gaps.
		changes := changedRevisions(c, "once.")
		missed := 0
		for _, rev := range acked {
			if !changes[rev] {
				t.Fatalf("revision %d was acknowledged but kv.changes does not hold it", rev)
			}
			if !seen[rev] {
				missed++
			}
		}
		if len(seen) != len(acked)-missed {
			t.Fatalf("subscriber %d saw %d revisions, of which %d acknowledged", i+1, len(seen), len(acked)-missed)
		}
		t.Logf("subscriber %d: %d of %d revisions arrived, none twice; kv.changes holds all", i+1, len(seen), len(acked))
	}
}

// changedRevisions reads the change log under prefix from the start and
// returns the revisions it holds.
func changedRevisions(c *client, prefix string) map[int64]bool {
	c.t.Helper()
	revs := map[int64]bool{}
	req := schema.KVChangesRequest{Prefix: &prefix, Limit: 1000}
	for {
		var r schema.KVChangesReply
		c.ok(subjects.KVChanges, req, &r)
		for _, ev := range r.Events {
			revs[ev.Revision] = true
		}
		if !r.More {
			return revs
		}
		req.AfterRevision = r.NextRevision
		op := r.NextOpIndex
		req.AfterOpIndex = &op
	}
}

// Across failovers of a 3-node cluster (the leader killed, a new one
// elected, the old one back), raw subscribers on the bus see every
// revision at most once and in order, the last put before each quiet spell
// arrives promptly, and kv.changes holds every acknowledged revision: a
// new leader publishes only its own term's entries, never the older ones
// it applies, and a gap that leaves is in the change log.
func TestEventsOnceAcrossFailovers(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 3)
	subs := []*watcher{}
	for i := 0; i < 2; i++ {
		c := &client{t: t, nc: cl.conn(), names: connect(t, cl.urls[0]).names}
		subs = append(subs, c.watch("concord.watch.fo.>"))
	}
	gc, err := cc.Connect(cc.Conn(cl.conn()), cc.AttemptTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	var acked []int64
	put := func(key string) int64 {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := gc.Put(ctx, schema.KVPutRequest{Key: key, Value: json.RawMessage(`1`)})
		if err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
		acked = append(acked, r.Revision)
		return r.Revision
	}
	for round := 0; round < 3; round++ {
		for i := 0; i < 50; i++ {
			put(fmt.Sprintf("fo.%d.%02d", round, i))
		}
		last := put(fmt.Sprintf("fo.%d.last", round))
		ackedAt := time.Now()
		for j, w := range subs {
			checkFor(t, eventPromptness, 5*time.Millisecond, func() error {
				for _, ev := range w.snapshot() {
					if ev.Revision == last {
						return nil
					}
				}
				return fmt.Errorf("round %d, subscriber %d: the last put's event (revision %d) has not arrived %s after its acknowledgement", round, j+1, last, time.Since(ackedAt).Round(time.Millisecond))
			})
		}
		// The leader dies with its term; the next leader applies what the
		// old one committed and may not have published.
		leader := cl.leaderIndex(gc.NATS())
		cl.nodes[leader].kill()
		put(fmt.Sprintf("fo.%d.after", round))
		cl.nodes[leader].restart()
		cl.waitConverged(3, 60*time.Second)
	}
	time.Sleep(time.Second) // anything published twice has had time to arrive
	changes := changedRevisions(connect(t, cl.urls[0]), "fo.")
	for _, rev := range acked {
		if !changes[rev] {
			t.Fatalf("revision %d was acknowledged but kv.changes does not hold it", rev)
		}
	}
	for i, w := range subs {
		seen := onceInOrder(t, i+1, w)
		t.Logf("subscriber %d: %d of %d acknowledged revisions arrived, none twice, in order; kv.changes holds all", i+1, len(seen), len(acked))
	}
}

// onceInOrder returns the revisions subscriber n saw, and fails the test if
// one arrived twice or out of order.
func onceInOrder(t *testing.T, n int, w *watcher) map[int64]bool {
	t.Helper()
	seen := map[int64]bool{}
	var prev int64
	for _, ev := range w.snapshot() {
		if ev.Revision < prev {
			t.Fatalf("subscriber %d: revision %d after %d: out of order", n, ev.Revision, prev)
		}
		if seen[ev.Revision] {
			t.Fatalf("subscriber %d: revision %d (key %s) arrived twice", n, ev.Revision, ev.Key)
		}
		seen[ev.Revision] = true
		prev = ev.Revision
	}
	return seen
}
