package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	cc "github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// pause stops (SIGSTOP) or resumes (SIGCONT) the node's process, and
// resumes it when the test ends whatever happened.
func (n *node) pause(stop bool) {
	n.t.Helper()
	n.mu.Lock()
	cmd := n.cmd
	n.mu.Unlock()
	if cmd == nil {
		n.t.Fatal("pause: the node is not running")
	}
	sig := syscall.SIGCONT
	if stop {
		sig = syscall.SIGSTOP
		n.t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGCONT) })
	}
	if err := cmd.Process.Signal(sig); err != nil {
		n.t.Fatalf("signal %v: %v", sig, err)
	}
}

// Writes sent to a paused node whose clients gave up on them are not
// applied when the node resumes: each carried its deadline, and the node
// starts no request after it. The clients were told the outcome was
// unknown (not "unavailable, nothing changed"), and a session whose grant
// went unanswered leaves no lease behind. Before deadlines, all of these
// writes were applied seconds later, after the clients had been told
// "unavailable".
func TestPausedNodeDoesNotApplyAbandonedWrites(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c, err := cc.Connect(cc.URL(n.natsURL), cc.AttemptTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw := connect(t, n.natsURL)
	before := raw.put("paused.before", 1, 0)

	n.pause(true)
	for i := 0; i < 4; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
		_, err := c.Put(ctx, schema.KVPutRequest{Key: fmt.Sprintf("paused.%d", i), Value: json.RawMessage(`1`)})
		cancel()
		if !errors.Is(err, cc.ErrOutcomeUnknown) || errors.Is(err, cc.ErrUnavailable) {
			t.Fatalf("put %d to a paused node: %v, want ErrOutcomeUnknown", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	s, err := c.NewSession(ctx, time.Minute)
	cancel()
	if !errors.Is(err, cc.ErrOutcomeUnknown) || s != nil {
		t.Fatalf("a session on a paused node: %v, want ErrOutcomeUnknown", err)
	}
	// A raw request without a deadline is what a deadline protects
	// against: it is still applied when the node resumes.
	if err := raw.nc.Publish("concord.kv.put", []byte(`{"key":"paused.nodeadline","value":1}`)); err != nil {
		t.Fatal(err)
	}
	// (No Flush: its PONG would wait for the paused server.) By the end
	// of the sleep nats.go has written the put to the socket, and every
	// deadline above has passed.
	time.Sleep(300 * time.Millisecond)
	n.pause(false)

	// The undated put lands once the node runs again; by then the others
	// were taken off the queue before it and refused.
	checkFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		got := raw.get(map[string]any{"prefix": "paused."})
		var keys []string
		for _, kv := range got.KVs {
			keys = append(keys, kv.Key)
		}
		if strings.Join(keys, ",") != "paused.before,paused.nodeadline" {
			return fmt.Errorf("keys after the resume: %v, want paused.before and paused.nodeadline", keys)
		}
		return nil
	})
	if rev := raw.revision(); rev != before+1 {
		t.Fatalf("revision %d after the resume, want %d: something more was applied", rev, before+1)
	}
	// The session's grant was dropped for its deadline; the session's
	// clean-up (the same grant again, then a revoke) leaves no lease.
	checkFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		var l schema.LeaseListReply
		raw.ok(subjects.LeaseList, map[string]any{}, &l)
		if len(l.Leases) != 0 {
			return fmt.Errorf("leases after the resume: %+v", l.Leases)
		}
		return nil
	})
}

// The deadline header, as a raw requester gives it: a request whose
// deadline has passed is refused unstarted, with 503 and the words
// "nothing was changed"; a malformed deadline is a 400 that names the
// header; a deadline ahead is served.
func TestDeadlineHeaderOnTheWire(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	send := func(ep subjects.Endpoint, body, deadline string) *nats.Msg {
		t.Helper()
		m := nats.NewMsg("concord." + string(ep))
		m.Data = []byte(body)
		m.Header.Set(schema.HeaderDeadline, deadline)
		resp, err := c.nc.RequestMsg(m, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	rev := c.revision()
	past := schema.FormatDeadline(time.Now().Add(-2 * time.Second))
	for _, ep := range []subjects.Endpoint{subjects.KVPut, subjects.KVGet} {
		resp := send(ep, `{"key":"dl.k","value":1}`, past)
		var er schema.ErrorReply
		if err := json.Unmarshal(resp.Data, &er); err != nil || er.Error == nil || er.Error.Name != schema.ErrUnavailable ||
			!strings.Contains(er.Error.Description, "deadline") || !strings.Contains(er.Error.Description, "nothing was changed") {
			t.Fatalf("%s past its deadline: %s", ep, resp.Data)
		}
	}
	for _, bad := range []string{"tomorrow", "-1", "1.5"} {
		resp := send(subjects.KVPut, `{"key":"dl.k","value":1}`, bad)
		var er schema.ErrorReply
		if err := json.Unmarshal(resp.Data, &er); err != nil || er.Error == nil || er.Error.Name != schema.ErrInvalidRequest ||
			!strings.Contains(er.Error.Description, schema.HeaderDeadline) {
			t.Fatalf("deadline %q: %s", bad, resp.Data)
		}
	}
	if got := c.revision(); got != rev {
		t.Fatalf("refused requests changed the revision from %d to %d", rev, got)
	}
	resp := send(subjects.KVPut, `{"key":"dl.k","value":1}`, schema.FormatDeadline(time.Now().Add(time.Minute)))
	if resp.Header.Get(schema.HeaderErrorCode) != "" {
		t.Fatalf("a put within its deadline: %s", resp.Data)
	}
}
