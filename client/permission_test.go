package client_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
)

// permServer starts a nats-server (no Concord behind it) with one user
// per set of permissions, named by the map's keys; the password is the
// name.
func permServer(t *testing.T, users map[string]*server.Permissions) string {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true}
	for name, p := range users {
		opts.Users = append(opts.Users, &server.User{Username: name, Password: name, Permissions: p})
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats not ready")
	}
	t.Cleanup(ns.Shutdown)
	return ns.ClientURL()
}

func allow(pub, sub []string) *server.Permissions {
	return &server.Permissions{Publish: &server.SubjectPermission{Allow: pub}, Subscribe: &server.SubjectPermission{Allow: sub}}
}

// A call NATS refuses ends at once with ErrPermissionDenied, whether the
// publish, the reply subscription or a watch's subscription was refused;
// a call that is allowed but unanswered is still retried until its
// context ends.
func TestPermissionDenied(t *testing.T) {
	url := permServer(t, map[string]*server.Permissions{
		"reader":  allow([]string{"concord.kv.get", "concord.kv.changes"}, []string{"_INBOX.>"}),
		"noinbox": allow([]string{"concord.>"}, []string{"concord.watch.>"}),
	})
	// A minute would be waited out by a retry loop; the refusals take
	// milliseconds, and the bound leaves a slow machine a wide margin.
	const bound = 20 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The handler that was set first still sees every error.
	var mu sync.Mutex
	var seen []error
	nc, err := nats.Connect(url, nats.UserInfo("reader", "reader"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		mu.Lock()
		seen = append(seen, err)
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	reader, err := client.Connect(client.Conn(nc), client.AttemptTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if reader.PermissionError() != nil {
		t.Fatalf("a refusal before any call: %v", reader.PermissionError())
	}

	start := time.Now()
	_, err = reader.Put(ctx, schema.KVPutRequest{Key: "k", Value: []byte(`1`)})
	if !errors.Is(err, client.ErrPermissionDenied) || !errors.Is(err, nats.ErrPermissionViolation) ||
		!strings.Contains(err.Error(), `Publish to "concord.kv.put"`) || time.Since(start) > bound {
		t.Fatalf("put by a reader: %v after %s", err, time.Since(start))
	}
	if !errors.Is(reader.PermissionError(), client.ErrPermissionDenied) {
		t.Fatalf("PermissionError: %v", reader.PermissionError())
	}
	checkFor(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 1 && errors.Is(seen[0], nats.ErrPermissionViolation)
	})

	// Allowed, but nobody answers: retried, as before, until ctx ends.
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = reader.Get(short, schema.KVGetRequest{Key: client.Ptr("k")})
	cancelShort()
	if !errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("get with no responder: %v", err)
	}

	// A watch whose subscription is refused ends with the refusal, even
	// while its change log reads find no responder.
	start = time.Now()
	w, err := reader.Watch(ctx, "k", false, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range w.Events() {
		t.Fatal("an event from a refused watch")
	}
	if err := w.Err(); !errors.Is(err, client.ErrPermissionDenied) || !strings.Contains(err.Error(), `Subscription to "concord.watch.k"`) ||
		time.Since(start) > bound {
		t.Fatalf("watch by a user that may not subscribe: %v after %s", err, time.Since(start))
	}

	// Replies that cannot arrive: every call is refused at once, the
	// first when NATS refuses the reply subscription, the next before it
	// is sent.
	noinbox, err := client.Connect(client.URL(url), client.NATSOptions(nats.UserInfo("noinbox", "noinbox")), client.AttemptTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer noinbox.Close()
	for i := range 2 {
		start = time.Now()
		_, err = noinbox.Status(ctx, schema.ClusterStatusRequest{})
		if !errors.Is(err, client.ErrPermissionDenied) || !strings.Contains(err.Error(), `Subscription to "_INBOX.`) || time.Since(start) > bound {
			t.Fatalf("call %d without replies: %v after %s", i+1, err, time.Since(start))
		}
	}
}

// checkFor polls cond for up to 10 s.
func checkFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
	}
}
