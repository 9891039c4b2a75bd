package client_test

import (
	"context"
	"encoding/json"
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
	_, err = c.Put(ctx, schema.KVPutRequest{Key: "example.svc.api.n1", Value: json.RawMessage(`{"addr":"10.0.0.5"}`), Lease: client.Ptr(s.Lease())})
	if err != nil {
		panic(err)
	}
	fmt.Println("registered; session", s.State())
	s.Close(ctx) // revokes the lease: the key goes with it
	g, _ := c.Get(ctx, schema.KVGetRequest{Key: client.Ptr("example.svc.api.n1")})
	fmt.Println("after close:", len(g.KVs), "keys")
	// Output:
	// registered; session safe
	// after close: 0 keys
}

// A lock around work on a shared resource. The fencing token grows with
// every holder; the resource should refuse a token smaller than the
// largest it has seen.
func ExampleMutex() {
	c, _ := client.Connect(client.URL(serverURL))
	defer c.Close()
	ctx := context.Background()
	s, _ := c.NewSession(ctx, 10*time.Second)
	defer s.Close(ctx)
	m := client.NewMutex(s, "example.locks.build")
	if err := m.Lock(ctx); err != nil {
		panic(err)
	}
	fmt.Println("locked with a token:", m.FencingToken() > 0)
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
	c, _ := client.Connect(client.URL(serverURL))
	defer c.Close()
	ctx := context.Background()
	s, _ := c.NewSession(ctx, 10*time.Second)
	defer s.Close(ctx)
	e := client.NewElection(s, "example.elect.scheduler")
	if err := e.Campaign(ctx, json.RawMessage(`"worker-1"`)); err != nil {
		panic(err)
	}
	leader, _ := c.Leader(ctx, "example.elect.scheduler")
	fmt.Println("leader:", string(leader.Value))
	_ = e.Resign(ctx)
	// Output:
	// leader: "worker-1"
}

// Watch a prefix from the current revision: every change, in order, none
// missed, none twice.
func ExampleClient_Watch() {
	c, _ := client.Connect(client.URL(serverURL))
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g, _ := c.Get(ctx, schema.KVGetRequest{Prefix: client.Ptr(""), CountOnly: true})
	w, err := c.Watch(ctx, "example.cfg.", true, g.Revision)
	if err != nil {
		panic(err)
	}
	c.Put(ctx, schema.KVPutRequest{Key: "example.cfg.a", Value: json.RawMessage(`1`)})
	c.Delete(ctx, schema.KVDeleteRequest{Key: client.Ptr("example.cfg.a")})
	for i := 0; i < 2; i++ {
		e := <-w.Events()
		fmt.Println(e.Type, e.Key, string(e.Value))
	}
	// Output:
	// put example.cfg.a 1
	// delete example.cfg.a
}
