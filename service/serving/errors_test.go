package serving

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/internal/testnats"
)

func TestErrorMapping(t *testing.T) {
	cases := []struct {
		err  error
		name string
	}{
		{fmt.Errorf("x: %w", fsm.ErrLeaseNotFound), schema.ErrLeaseNotFound},
		{fmt.Errorf("x: %w", fsm.ErrLeaseExists), schema.ErrLeaseExists},
		{fmt.Errorf("x: %w", fsm.ErrLeaseConflict), schema.ErrLeaseConflict},
		{fmt.Errorf("x: %w", fsm.ErrLimitExceeded), schema.ErrLimitExceeded},
		{fmt.Errorf("x: %w", fsm.ErrTooLarge), schema.ErrTooLarge},
		{fmt.Errorf("x: %w", fsm.ErrIdempotencyConflict), schema.ErrIdempotencyConflict},
		{fmt.Errorf("x: %w", fsm.ErrCompacted), schema.ErrCompacted},
		{fmt.Errorf("x: %w", fsm.ErrBadCommand), schema.ErrInternal},
		{fmt.Errorf("x: %w", fsm.ErrBadSnapshot), schema.ErrInternal},
		{errors.New("anything else"), schema.ErrInternal},
	}
	for _, c := range cases {
		got := errorFor(c.err)
		spec, _ := schema.LookupError(c.name)
		if got.Name != c.name || got.Code != spec.Code || got.Description != c.err.Error() {
			t.Errorf("errorFor(%v) = %+v, want %s (%d) with the error's words", c.err, got, c.name, spec.Code)
		}
	}
	// An error that is already a reply goes out as it is.
	reply := schema.Errorf(schema.ErrTooLarge, "big")
	if got := errorFor(fmt.Errorf("x: %w", reply)); got != reply {
		t.Errorf("errorFor of a wrapped reply = %v, want %v", got, reply)
	}
	// Raft's errors: 503 only where the entry never reached the log; where
	// it may be there, 504 outcome_unknown, which says so.
	for err, name := range map[error]string{
		raft.ErrNotLeader:           schema.ErrNotLeader,
		raft.ErrEnqueueTimeout:      schema.ErrUnavailable,
		raft.ErrLeadershipLost:      schema.ErrOutcomeUnknown,
		raft.ErrRaftShutdown:        schema.ErrOutcomeUnknown,
		errors.New("something new"): schema.ErrOutcomeUnknown,
	} {
		got := RaftError(err)
		spec, _ := schema.LookupError(name)
		if got.Name != name || got.Code != spec.Code {
			t.Errorf("raftError(%v) = %v, want %s", err, got, name)
		}
		if name == schema.ErrOutcomeUnknown && !strings.Contains(got.Description, "may or may not") {
			t.Errorf("raftError(%v): %q does not say the outcome is unknown", err, got.Description)
		}
	}
}

// A request over NATS to a node whose lease clock has stopped (as when it
// loses leadership, before it unsubscribes) gets a 503 not_leader reply
// through the real reply path. The other 503s come from Raft's errors,
// mapped in TestErrorMapping.
func TestRetryableErrorReplies(t *testing.T) {
	_, nc, n := startServer(t, nil)
	n.clockStopped.Store(true)
	e := testnats.Request(t, nc, "concord.lease.grant", map[string]any{"ttl": 5}, nil)
	if e == nil || e.Name != schema.ErrNotLeader || e.Code != 503 || !e.Retryable() {
		t.Fatalf("grant on a node that is not leading: %v", e)
	}
	e = testnats.Request(t, nc, "concord.kv.get", map[string]any{"key": "a", "serializable": true}, nil)
	if e == nil || e.Name != schema.ErrNotLeader {
		t.Fatalf("read on a node that is not leading: %v", e)
	}
	e = testnats.Request(t, nc, "concord.lease.keepalive", map[string]any{"id": 1}, nil)
	if e == nil || e.Name != schema.ErrNotLeader {
		t.Fatalf("keepalive on a node that is not leading: %v", e)
	}
}
