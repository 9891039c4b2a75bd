package client_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
)

// Every wire error matches its sentinel and no other.
func TestErrorsMatchTheirSentinels(t *testing.T) {
	c := connect(t)
	ctx := context.Background()
	_, err := c.KeepAlive(ctx, schema.LeaseKeepAliveRequest{ID: 987654})
	if !errors.Is(err, client.ErrLeaseNotFound) || errors.Is(err, client.ErrLeaseConflict) {
		t.Fatalf("keepalive of an unknown lease: %v", err)
	}
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != 404 || ce.Retryable() {
		t.Fatalf("error %#v", err)
	}
	_, err = c.Put(ctx, schema.KVPutRequest{Key: "bad key", Value: []byte(`1`)})
	if !errors.Is(err, client.ErrInvalidRequest) {
		t.Fatalf("bad key: %v", err)
	}
	g, err := c.Grant(ctx, schema.LeaseGrantRequest{TTL: 30, ID: 4242})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Grant(ctx, schema.LeaseGrantRequest{TTL: 30, ID: g.ID}); !errors.Is(err, client.ErrLeaseExists) {
		t.Fatalf("taken id: %v", err)
	}
}

// Mutating calls carry an idempotency key: sent twice by the retry loop
// they still apply once. Here a put is retried by hand with the same key.
func TestCallsRetryUntilTheirContextEnds(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats not ready")
	}
	defer ns.Shutdown()
	c, err := client.Connect(client.URL(ns.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Get(ctx, schema.KVGetRequest{Key: client.Ptr("k")})
	if !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("no Concord on the bus: %v", err)
	}
	if waited := time.Since(start); waited < 400*time.Millisecond {
		t.Fatalf("gave up after %s, before the context ended", waited)
	}
}

// A session whose keep-alives stop reaching a server goes Safe, Jeopardy,
// Expired by its local deadline, and Done closes no later than it.
func TestSessionStatesFollowTheLocalDeadline(t *testing.T) {
	dir := t.TempDir()
	svc, err := startService(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Connect(client.URL(svc.NATSURL()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	s, err := c.NewSession(ctx, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // a renewal or two
	if st := s.State(); st != client.Safe {
		t.Fatalf("state %s while renewing", st)
	}
	svc.Close() // keep-alives fail from now on
	stopped := time.Now()
	deadline := s.Deadline()
	if deadline.After(stopped.Add(3 * time.Second)) {
		t.Fatalf("local deadline %s is later than the last renewal could allow", deadline.Sub(stopped))
	}
	sawJeopardy := false
	for s.State() != client.Expired {
		if s.State() == client.Jeopardy {
			sawJeopardy = true
		}
		time.Sleep(20 * time.Millisecond)
		if time.Since(stopped) > 5*time.Second {
			t.Fatal("the session never expired")
		}
	}
	if !sawJeopardy {
		t.Fatal("the session went from safe to expired without jeopardy")
	}
	select {
	case <-s.Done():
		if late := time.Since(deadline); late > 500*time.Millisecond {
			t.Fatalf("Done closed %s after the local deadline", late)
		}
	case <-time.After(time.Second):
		t.Fatal("Done did not close at the deadline")
	}
	_ = os.RemoveAll(dir)
}

// TryLock fails at once while another session holds the lock.
func TestTryLock(t *testing.T) {
	c := connect(t)
	ctx := context.Background()
	a, _ := c.NewSession(ctx, 10*time.Second)
	b, _ := c.NewSession(ctx, 10*time.Second)
	defer a.Close(ctx)
	defer b.Close(ctx)
	ma, mb := client.NewMutex(a, "t.locks.try"), client.NewMutex(b, "t.locks.try")
	if err := ma.TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := mb.TryLock(ctx); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("second TryLock: %v", err)
	}
	if err := ma.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := mb.TryLock(ctx); err != nil {
		t.Fatalf("TryLock after unlock: %v", err)
	}
	if mb.FencingToken() <= ma.FencingToken() {
		t.Fatalf("tokens %d then %d", ma.FencingToken(), mb.FencingToken())
	}
}

// The cluster calls answer on a single node too.
func TestClusterCalls(t *testing.T) {
	c := connect(t)
	ctx := context.Background()
	st, err := c.Status(ctx, schema.ClusterStatusRequest{Hash: true})
	if err != nil || len(st.Members) != 1 || st.Members[0].Node == nil || st.Members[0].Node.StateHash == "" {
		t.Fatalf("status: %v %+v", err, st)
	}
	info, err := c.NodeInfo(ctx, st.Leader, false)
	if err != nil || info.State != "leader" || info.ClusterID != st.ClusterID {
		t.Fatalf("node info: %v %+v", err, info)
	}
	if _, err := c.Put(ctx, schema.KVPutRequest{Key: "t.snap", Value: []byte(`1`)}); err != nil {
		t.Fatal(err)
	}
	snap, err := c.Snapshot(ctx)
	if err != nil || snap.Index == 0 {
		t.Fatalf("snapshot: %v %+v", err, snap)
	}
	if _, err := c.Remove(ctx, schema.ClusterRemoveRequest{ID: "nobody"}); !errors.Is(err, client.ErrNodeNotFound) {
		t.Fatalf("remove of a stranger: %v", err)
	}
}

// Writes carry an idempotency key, the same on every attempt; keep-alives
// carry none, so the server does not remember each renewal's reply.
func TestIdempotencyKeysOnWritesNotOnKeepAlives(t *testing.T) {
	c := connect(t)
	ctx := context.Background()
	nc, err := nats.Connect(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// A plain subscriber, outside the service's queue group, sees every
	// request the client sends.
	sub, err := nc.SubscribeSync("concord.lease.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	g, err := c.Grant(ctx, schema.LeaseGrantRequest{TTL: 30})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.KeepAlive(ctx, schema.LeaseKeepAliveRequest{ID: g.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.KeepAliveMany(ctx, schema.LeaseKeepAliveManyRequest{IDs: []int64{g.ID}}); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"concord.lease.grant": true, "concord.lease.keepalive": false, "concord.lease.keepalive_many": false}
	for range want {
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		hasKey, ok := want[m.Subject]
		if !ok {
			t.Fatalf("unexpected request on %s", m.Subject)
		}
		if got := m.Header.Get(schema.HeaderIdempotencyKey) != ""; got != hasKey {
			t.Errorf("%s: idempotency key present %v, want %v", m.Subject, got, hasKey)
		}
	}
}
