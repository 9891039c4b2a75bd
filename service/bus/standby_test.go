package bus

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/concord-io/concord/schema"
)

// The standby says "nothing changed; retry" only where no other node can
// take the request; a write another node may receive is outcome_unknown,
// with the deadline after which it is settled when the request gave one.
func TestStandbyReplyTellsTheTruthAboutTheOutcome(t *testing.T) {
	act := "node n3 cannot serve requests yet: waiting for a leader"
	e := standbyReply(act, false, time.Time{})
	if e.Name != schema.ErrUnavailable || e.Code != 503 || e.Description != act+"; nothing was changed; retry" {
		t.Fatalf("nowhere else: %+v", e)
	}
	e = standbyReply(act, true, time.Time{})
	if e.Name != schema.ErrOutcomeUnknown || e.Code != 504 || !strings.HasPrefix(e.Description, act+"; another node may still receive this request") ||
		!strings.Contains(e.Description, "give requests a Concord-Deadline header") || !strings.Contains(e.Description, "same Concord-Idempotency-Key") {
		t.Fatalf("elsewhere, no deadline: %+v", e)
	}
	d := time.UnixMilli(1_800_000_000_250)
	e = standbyReply(act, true, d)
	if e.Name != schema.ErrOutcomeUnknown || !strings.Contains(e.Description, "no node starts it after its deadline, 2027-01-15T08:00:00.25Z") {
		t.Fatalf("elsewhere, with a deadline: %+v", e)
	}
	if strings.Contains(e.Description, "nothing was changed") {
		t.Fatalf("an outcome_unknown says nothing changed: %q", e.Description)
	}
}

// What the standby does without Raft: nothing until the bus has been
// asked since it settled; then it subscribes unless a leader was heard
// lately; never while this node serves; it answers what it holds even
// when a leader was heard since (that leader need not have the request);
// and it leaves a request to this node's leader subscription when that
// was up before the request came.
func TestStandbyDecides(t *testing.T) {
	node := &fakeNode{}
	s := NewStandby(StandbyOptions{NodeID: "n1"}, node, nil)
	now := time.Now().UnixNano()
	if s.wanted(0) {
		t.Error("wanted before the bus settled")
	}
	s.probedAt.Store(now - int64(time.Second))
	if s.wanted(now) {
		t.Error("wanted with no question to the bus since it settled")
	}
	s.probedAt.Store(now)
	if !s.wanted(now) {
		t.Error("not wanted on a settled bus where no one leads")
	}
	held := time.Now() // a request comes while no one is known to lead
	s.leaderHeard.Store(time.Now().UnixNano())
	if s.wanted(now) {
		t.Error("wanted while another node was heard leading")
	}
	// The leader heard now was not serving when the request came (or its
	// subscription had not reached the requester's server): silence would
	// leave the requester waiting out its whole attempt timeout.
	if !s.answers(held) {
		t.Error("a held request was left unanswered because a leader turned up meanwhile")
	}
	s.leaderHeard.Store(time.Now().Add(-leaderHeardFor - time.Second).UnixNano())
	if !s.wanted(now) || !s.answers(time.Now()) {
		t.Error("a leader heard long ago still silences the standby")
	}
	before := time.Now()
	node.servingSince.Store(time.Now().UnixNano())
	if s.wanted(now) {
		t.Error("wanted while this node serves")
	}
	if !s.answers(before) {
		t.Error("a request that came before the leader subscription was left unanswered")
	}
	if s.answers(time.Now().Add(time.Millisecond)) {
		t.Error("a request the leader subscription has too was answered")
	}
}

// fakeNode is a node that does not run Raft yet: it serves from
// servingSince on (0: not), and has no other state.
type fakeNode struct{ servingSince atomic.Int64 }

func (n *fakeNode) ServingSince() int64          { return n.servingSince.Load() }
func (n *fakeNode) Stopping() bool               { return false }
func (n *fakeNode) RaftLeader() (string, bool)   { return "", false }
func (n *fakeNode) LoneMember() bool             { return false }
func (n *fakeNode) Activity() string             { return "starting" }
func (n *fakeNode) ConflictError() *schema.Error { return nil }
