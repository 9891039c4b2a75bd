package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
)

// bareBus starts a NATS server with no Concord on it; the tests put their
// own responders there, to make a server's answers (or its silence) on
// demand.
func bareBus(t *testing.T) (*nats.Conn, *client.Client) {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats not ready")
	}
	t.Cleanup(ns.Shutdown)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := client.Connect(client.URL(ns.ClientURL()), client.AttemptTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return nc, c
}

// requests records what a responder received.
type requests struct {
	mu   sync.Mutex
	msgs []*nats.Msg
}

func (r *requests) add(m *nats.Msg) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, m)
}

func (r *requests) all() []*nats.Msg {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*nats.Msg(nil), r.msgs...)
}

// respond subscribes a responder on subject that records each request and
// answers it with answer (nothing when answer returns nil).
func respond(t *testing.T, nc *nats.Conn, subject string, answer func(*nats.Msg) *nats.Msg) *requests {
	t.Helper()
	r := &requests{}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		r.add(m)
		if reply := answer(m); reply != nil {
			reply.Subject = m.Reply
			_ = nc.PublishMsg(reply)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return r
}

// errorReply is an error reply as a node sends it.
func errorReply(name, description string) *nats.Msg {
	e := schema.Errorf(name, "%s", description)
	body, _ := json.Marshal(schema.ErrorReply{Error: e})
	m := nats.NewMsg("")
	m.Data = body
	m.Header.Set(schema.HeaderErrorCode, strconv.Itoa(e.Code))
	m.Header.Set(schema.HeaderError, e.Description)
	return m
}

// A write that reached a server which never answered (a paused node, a
// reply lost on the way) may have been applied: the call ends with
// ErrOutcomeUnknown, which says so in words, and not ErrUnavailable. Every
// attempt carried the same idempotency key and the call's deadline.
func TestSilentWriteIsOutcomeUnknown(t *testing.T) {
	nc, c := bareBus(t)
	got := respond(t, nc, "concord.kv.put", func(*nats.Msg) *nats.Msg { return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	deadline, _ := ctx.Deadline()
	_, err := c.Put(ctx, schema.KVPutRequest{Key: "k", Value: json.RawMessage(`1`)})
	if !errors.Is(err, client.ErrOutcomeUnknown) || errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("a put nobody answered: %v, want ErrOutcomeUnknown", err)
	}
	if !strings.Contains(err.Error(), "may or may not have been applied") || !strings.Contains(err.Error(), "no node starts it after") {
		t.Fatalf("the error does not say what is known: %v", err)
	}
	msgs := got.all()
	if len(msgs) < 2 {
		t.Fatalf("%d attempts in 700 ms with 200 ms each", len(msgs))
	}
	key := msgs[0].Header.Get(schema.HeaderIdempotencyKey)
	for i, m := range msgs {
		if k := m.Header.Get(schema.HeaderIdempotencyKey); k == "" || k != key {
			t.Fatalf("attempt %d: idempotency key %q, the first had %q", i, k, key)
		}
		if d := m.Header.Get(schema.HeaderDeadline); d != schema.FormatDeadline(deadline) {
			t.Fatalf("attempt %d: deadline header %q, want the call's %s", i, d, schema.FormatDeadline(deadline))
		}
	}
}

// A read nobody answered changed nothing: ErrUnavailable.
func TestSilentReadIsUnavailable(t *testing.T) {
	nc, c := bareBus(t)
	respond(t, nc, "concord.kv.get", func(*nats.Msg) *nats.Msg { return nil })
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := c.Get(ctx, schema.KVGetRequest{Key: client.Ptr("k")})
	if !errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("a read nobody answered: %v, want ErrUnavailable", err)
	}
}

// A write that reached nobody (NATS: no responders) or that every node
// answered 503 changed nothing: ErrUnavailable. One answered 504 even once
// is ErrOutcomeUnknown however the later attempts were answered, and is
// retried with the same key.
func TestWriteOutcomeFollowsTheAnswers(t *testing.T) {
	nc, c := bareBus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := c.Revoke(ctx, schema.LeaseRevokeRequest{ID: 1}); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("no responders: %v, want ErrUnavailable", err)
	}

	respond(t, nc, "concord.lease.revoke", func(*nats.Msg) *nats.Msg {
		return errorReply(schema.ErrUnavailable, "node n3 cannot serve requests yet: waiting for a leader; retry")
	})
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := c.Revoke(ctx, schema.LeaseRevokeRequest{ID: 1}); !errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("503s only: %v, want ErrUnavailable", err)
	}

	n := 0
	got := respond(t, nc, "concord.kv.delete", func(*nats.Msg) *nats.Msg {
		n++
		if n == 1 {
			return errorReply(schema.ErrOutcomeUnknown, "leadership was lost while the request was in the log")
		}
		return errorReply(schema.ErrUnavailable, "waiting for a leader; retry")
	})
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.Delete(ctx, schema.KVDeleteRequest{Key: client.Ptr("k")})
	if !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("a 504 then 503s: %v, want ErrOutcomeUnknown", err)
	}
	msgs := got.all()
	if len(msgs) < 2 || msgs[0].Header.Get(schema.HeaderIdempotencyKey) != msgs[len(msgs)-1].Header.Get(schema.HeaderIdempotencyKey) {
		t.Fatalf("%d attempts, not retried with the same key", len(msgs))
	}
}

// A call whose context has no deadline sends each attempt with the
// attempt's own end as its deadline, so no node starts an attempt the
// client has given up on.
func TestAttemptDeadlineWithoutContextDeadline(t *testing.T) {
	nc, c := bareBus(t)
	got := respond(t, nc, "concord.kv.put", func(*nats.Msg) *nats.Msg { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	_, err := c.Put(ctx, schema.KVPutRequest{Key: "k", Value: json.RawMessage(`1`)})
	if !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("%v, want ErrOutcomeUnknown", err)
	}
	for i, m := range got.all() {
		d, err := schema.ParseDeadline(m.Header.Get(schema.HeaderDeadline))
		if err != nil || d.IsZero() {
			t.Fatalf("attempt %d: deadline header %q: %v", i, m.Header.Get(schema.HeaderDeadline), err)
		}
		// The attempt timeout is 200 ms; the header is the send time plus
		// it, read here at the receiver a moment later.
		if left := time.Until(d); left > 200*time.Millisecond || left < -time.Second {
			t.Fatalf("attempt %d: deadline %s from its arrival, want the 200 ms attempt", i, left)
		}
	}
}

// A session whose grant's outcome is unknown revokes, once the cluster
// answers, the lease the grant made: the grant is sent again with the same
// idempotency key, answered with that lease, and the lease is revoked. A
// proxy (on its own subject prefix, in front of the shared node) passes
// every request on and drops the grants' replies while told to: the lease
// is made, and the session never hears of it.
func TestSessionRevokesTheLeaseOfAnUnknownGrant(t *testing.T) {
	nc, err := nats.Connect(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var mu sync.Mutex
	dropGrants := true
	var made []int64 // the leases of the grants whose replies were dropped
	sub, err := nc.Subscribe("lost.>", func(m *nats.Msg) {
		fwd := nats.NewMsg("concord." + strings.TrimPrefix(m.Subject, "lost."))
		fwd.Data, fwd.Header = m.Data, m.Header
		resp, err := nc.RequestMsg(fwd, 5*time.Second)
		if err != nil {
			return
		}
		mu.Lock()
		drop := dropGrants && fwd.Subject == "concord.lease.grant"
		if drop {
			var g schema.LeaseGrantReply
			if json.Unmarshal(resp.Data, &g) == nil && g.ID != 0 {
				made = append(made, g.ID)
			}
		}
		mu.Unlock()
		if !drop {
			out := nats.NewMsg(m.Reply)
			out.Data, out.Header = resp.Data, resp.Header
			_ = nc.PublishMsg(out)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	c, err := client.Connect(client.URL(serverURL), client.Prefix("lost"), client.AttemptTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s, err := c.NewSession(ctx, time.Minute)
	if !errors.Is(err, client.ErrOutcomeUnknown) || s != nil {
		t.Fatalf("a session whose grant replies were lost: %v, want ErrOutcomeUnknown", err)
	}
	mu.Lock()
	leases := append([]int64(nil), made...)
	dropGrants = false
	mu.Unlock()
	if len(leases) == 0 || slicesAllEqual(leases) != leases[0] {
		t.Fatalf("the grant attempts made leases %v, want one lease for all (one idempotency key)", leases)
	}
	direct := connect(t)
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := direct.LeaseInfo(context.Background(), schema.LeaseInfoRequest{ID: leases[0]})
		if errors.Is(err, client.ErrLeaseNotFound) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease %d, made by a grant whose outcome the session did not know, still exists 20 s later", leases[0])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// slicesAllEqual returns the value every element of ids has, or 0 when
// they differ.
func slicesAllEqual(ids []int64) int64 {
	for _, id := range ids[1:] {
		if id != ids[0] {
			return 0
		}
	}
	return ids[0]
}
