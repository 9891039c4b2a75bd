package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
)

type clientT = client.Client

func clientConnect(url string) (*client.Client, error) { return client.Connect(client.URL(url)) }

// Register a service instance under a lease: its key lives as long as the
// process keeps the session alive.
func ExampleClient_NewSession() {
	c, err := client.Connect(client.URL(serverURL))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()
	s, err := c.NewSession(ctx, 10*time.Second)
	if err != nil {
		panic(err)
	}
	_, err = c.PutKey(ctx, "svc.api.n1", json.RawMessage(`{"addr":"10.0.0.5"}`), client.WithLease(s.Lease()))
	if err != nil {
		panic(err)
	}
	fmt.Println("registered; session", s.State())
	// ... serve; the key goes when the process dies or calls s.Close(ctx)
	s.Close(ctx) // revokes the lease: the key goes with it
	_, err = c.GetKey(ctx, "svc.api.n1")
	fmt.Println("after close:", errors.Is(err, client.ErrKeyNotFound))
	// Output:
	// registered; session safe
	// after close: true
}

// Write, read and delete one key by name. Get, Put and Delete take the
// typed requests, with every other option.
func ExampleClient_GetKey() {
	c, err := client.Connect(client.URL(serverURL))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.PutKey(ctx, "app.x", json.RawMessage(`{"replicas":3}`)); err != nil {
		panic(err)
	}
	kv, err := c.GetKey(ctx, "app.x") // client.ErrKeyNotFound if there is none
	if err != nil {
		panic(err)
	}
	fmt.Println(kv.Key, string(kv.Value), "version", kv.Version)
	if _, err := c.DeleteKey(ctx, "app.x"); err != nil {
		panic(err)
	}
	_, err = c.GetKey(ctx, "app.x")
	fmt.Println("deleted:", errors.Is(err, client.ErrKeyNotFound))
	// Output:
	// app.x {"replicas":3} version 1
	// deleted: true
}

// Keys under a prefix, each with a ttl of its own, listed and then deleted
// together.
func ExampleClient_GetPrefix() {
	c, err := client.Connect(client.URL(serverURL))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()
	for _, n := range []string{"n1", "n2"} {
		if _, err := c.PutKey(ctx, "pool."+n, json.RawMessage(`"ready"`), client.WithTTL(30*time.Second)); err != nil {
			panic(err)
		}
	}
	g, err := c.GetPrefix(ctx, "pool.")
	if err != nil {
		panic(err)
	}
	for _, kv := range g.KVs {
		fmt.Println(kv.Key, string(kv.Value))
	}
	d, err := c.DeletePrefix(ctx, "pool.")
	if err != nil {
		panic(err)
	}
	fmt.Println("deleted", d.Deleted)
	// Output:
	// pool.n1 "ready"
	// pool.n2 "ready"
	// deleted 2
}

// The keys under one token and no others, as a byte-wise range: "web."
// up to "web/" ('/' follows '.'), where the prefix "web" would also match
// "webx.cache". A put's content type and metadata come back with the key.
func ExampleClient_GetRange() {
	c, err := client.Connect(client.URL(serverURL))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()
	for _, k := range []string{"web.api", "web.db", "webx.cache"} {
		if _, err := c.PutKey(ctx, k, json.RawMessage(`"up"`)); err != nil {
			panic(err)
		}
	}
	g, err := c.GetRange(ctx, "web.", "web/") // [web., web/): not webx.cache
	if err != nil {
		panic(err)
	}
	for _, kv := range g.KVs {
		fmt.Println(kv.Key, string(kv.Value))
	}
	_, err = c.PutKey(ctx, "web.api", json.RawMessage(`{"port":8080}`),
		client.WithContentType("application/json"), client.WithMetadata(json.RawMessage(`{"owner":"team-a"}`)))
	if err != nil {
		panic(err)
	}
	kv, err := c.GetKey(ctx, "web.api")
	if err != nil {
		panic(err)
	}
	fmt.Println(kv.ContentType, string(kv.Metadata))
	d, err := c.DeleteRange(ctx, "web.", "web/")
	if err != nil {
		panic(err)
	}
	fmt.Println("deleted", d.Deleted)
	if _, err := c.DeleteKey(ctx, "webx.cache"); err != nil {
		panic(err)
	}
	// Output:
	// web.api "up"
	// web.db "up"
	// application/json {"owner":"team-a"}
	// deleted 2
}

// A lock around work on a shared resource. The fencing token grows with
// every holder; the resource should refuse a token smaller than the
// largest it has seen.
func ExampleMutex() {
	c, err := client.Connect(client.URL(serverURL))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()
	s, err := c.NewSession(ctx, 10*time.Second)
	if err != nil {
		panic(err)
	}
	defer s.Close(ctx)
	m := client.NewMutex(s, "locks.build")
	if err := m.Lock(ctx); err != nil { // waits until the lock is ours
		panic(err)
	}
	token := m.FencingToken() // hand it to the resource with every write
	fmt.Println("locked with a token:", token > 0)
	// ... work; if s.Done() closes, the lease and the lock are lost: stop
	if err := m.Unlock(ctx); err != nil {
		panic(err)
	}
	fmt.Println("unlocked")
	// Output:
	// locked with a token: true
	// unlocked
}

// A leader-elected worker: Campaign returns once this session leads, and
// observers read the leader's value.
func ExampleElection() {
	c, err := client.Connect(client.URL(serverURL))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()
	s, err := c.NewSession(ctx, 10*time.Second)
	if err != nil {
		panic(err)
	}
	defer s.Close(ctx)
	e := client.NewElection(s, "elect.scheduler")
	if err := e.Campaign(ctx, json.RawMessage(`"worker-1"`)); err != nil { // returns once we lead
		panic(err)
	}
	leader, err := c.Leader(ctx, "elect.scheduler")
	if err != nil {
		panic(err)
	}
	fmt.Println("leader:", string(leader.Value))
	// ... lead until s.Done() closes (the lease is lost) or we resign
	if err := e.Resign(ctx); err != nil {
		panic(err)
	}
	// Output:
	// leader: "worker-1"
}

// Watch a prefix from the state just read: every later change, in order,
// none missed, none twice, across reconnects and leader changes.
func ExampleClient_Watch() {
	c, err := client.Connect(client.URL(serverURL))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g, err := c.GetPrefix(ctx, "cfg.") // the state now, at g.Revision
	if err != nil {
		panic(err)
	}
	w, err := c.Watch(ctx, "cfg.", true, g.Revision) // every change after it
	if err != nil {
		panic(err)
	}
	if _, err := c.PutKey(ctx, "cfg.a", json.RawMessage(`1`)); err != nil {
		panic(err)
	}
	if _, err := c.DeleteKey(ctx, "cfg.a"); err != nil {
		panic(err)
	}
	n := 0
	for e := range w.Events() { // until ctx ends; then w.Err() says why
		fmt.Println(e.Type, e.Key, string(e.Value))
		if n++; n == 2 {
			break
		}
	}
	// Output:
	// put cfg.a 1
	// delete cfg.a
}

// Read a key as it stood at a past revision, and list what happened to it:
// every put with its value, and the delete with its cause.
func ExampleClient_HistoryAll() {
	c, err := client.Connect(client.URL(serverURL))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()
	first, err := c.PutKey(ctx, "config.db", json.RawMessage(`{"host":"db1"}`))
	if err != nil {
		panic(err)
	}
	if _, err := c.PutKey(ctx, "config.db", json.RawMessage(`{"host":"db2"}`)); err != nil {
		panic(err)
	}
	if _, err := c.DeleteKey(ctx, "config.db"); err != nil {
		panic(err)
	}
	then, err := c.GetKey(ctx, "config.db", client.AtRevision(first.Revision)) // as it was then
	if err != nil {
		panic(err)
	}
	fmt.Println("at the first put:", string(then.Value))
	for e, err := range c.HistoryAll(ctx, "config.db", client.FromRevision(first.Revision)) { // every page
		if err != nil {
			panic(err)
		}
		if e.Type == schema.EventPut {
			fmt.Println("put", string(e.Value))
		} else {
			fmt.Println("delete, cause", e.Cause)
		}
	}
	// Output:
	// at the first put: {"host":"db1"}
	// put {"host":"db1"}
	// put {"host":"db2"}
	// delete, cause delete
}
