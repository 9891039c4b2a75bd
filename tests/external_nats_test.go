package tests

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// With --nats-url the node embeds no server and serves through the given one.
func TestExternalNATS(t *testing.T) {
	t.Parallel()
	ns := startNATSServer(t, &server.Options{})

	startNode(t, nodeOpts{natsURL: ns.ClientURL()})
	c := connect(t, ns.ClientURL())
	w := c.watch("concord.watch.ext.>")
	id := c.grant(30)
	c.put("ext.k", "v", id)
	if got := c.get(map[string]any{"key": "ext.k"}); len(got.KVs) != 1 || got.KVs[0].Lease != id {
		t.Fatalf("get through external NATS: %+v", got)
	}
	if evs := w.waitFor(1, 5*time.Second); evs[0].Key != "ext.k" {
		t.Fatalf("event %+v", evs[0].Event)
	}
	// The node did not listen for clients itself.
	if ns.NumClients() < 2 {
		t.Fatalf("external server has %d clients; the node should be one", ns.NumClients())
	}

}
