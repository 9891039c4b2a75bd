// Package client is Concord's Go client: typed calls for every subject,
// retries that are safe (every mutating call but a keep-alive carries an
// idempotency key; renewing twice is harmless),
// sessions that know when they are safe, locks with fencing tokens,
// elections, and a watch (of a key, a prefix or a range) that misses no
// event.
//
// Connect with a NATS URL, an existing connection, or the user's nats
// context:
//
//	c, err := client.Connect(client.URL("nats://127.0.0.1:4222"))
//	c, err := client.Connect(client.Conn(nc))
//	c, err := client.Connect(client.NATSContext(""))   // the selected nats context
//
// The common key calls have plain forms that take the key as a string:
//
//	kv, err := c.GetKey(ctx, "app.x")                // ErrKeyNotFound if there is none
//	_, err = c.PutKey(ctx, "app.x", json.RawMessage(`{"replicas":3}`), client.WithLease(s.Lease()))
//	_, err = c.DeleteKey(ctx, "app.x")
//	page, err := c.GetPrefix(ctx, "app.")            // and DeletePrefix
//	page, err = c.GetRange(ctx, "app.", "app/")      // [app., app/), byte-wise; and DeleteRange
//	_, err = c.PutKey(ctx, "app.x", v, client.WithContentType("application/json"),
//		client.WithMetadata(json.RawMessage(`{"owner":"ops"}`))) // returned unchanged; a put without them clears them
//
// Reads at a past revision, a key's history and compaction:
//
//	kv, err := c.GetKey(ctx, "app.x", client.AtRevision(rev)) // as it stood at rev (GetPrefix too)
//	for e, err := range c.HistoryAll(ctx, "app.x", client.FromRevision(rev)) { ... } // every put and delete since
//	_, err = c.Compact(ctx, rev)                              // operators: drop the history below rev
//
// Get, Put and Delete take the typed requests of package schema, with every
// option the API has.
//
// Calls retry 503 not_leader / unavailable and "no responders" with
// jittered backoff until their context ends; errors the server decides are
// returned at once and can be tested with errors.Is against the sentinel
// errors of this package.
package client
