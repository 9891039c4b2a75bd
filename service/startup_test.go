package service

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/internal/testnats"
	"github.com/concord-io/concord/service/serving"
	"github.com/concord-io/concord/subjects"
)

// Before Raft runs, a node's activity is the restore's progress while one
// runs, and its start-up phase otherwise.
func TestActivityBeforeRaft(t *testing.T) {
	s := &Service{}
	s.restore.Begin(2000)
	if got := s.activity(); got != "restoring snapshot, 0 B of 2.0 kB" {
		t.Errorf("activity during a restore: %q", got)
	}
	s.restore.End()
	s.phase.Store(int32(phaseCheckingBus))
	if got := s.activity(); got != "checking the NATS bus for other clusters" {
		t.Errorf("activity while checking the bus: %q", got)
	}
}

// What the standby does without Raft: nothing until the bus has been
// asked since it settled; then it subscribes unless a leader was heard
// lately; never while this node serves; it answers what it holds even
// when a leader was heard since (that leader need not have the request);
// and it leaves a request to this node's leader subscription when that
// was up before the request came.
func TestStandbyDecides(t *testing.T) {
	s := &Service{cfg: Config{NodeID: "n1"}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	now := time.Now().UnixNano()
	if s.standbyWanted(0) {
		t.Error("wanted before the bus settled")
	}
	s.standby.probedAt.Store(now - int64(time.Second))
	if s.standbyWanted(now) {
		t.Error("wanted with no question to the bus since it settled")
	}
	s.standby.probedAt.Store(now)
	if !s.standbyWanted(now) {
		t.Error("not wanted on a settled bus where no one leads")
	}
	held := time.Now() // a request comes while no one is known to lead
	s.standby.leaderHeard.Store(time.Now().UnixNano())
	if s.standbyWanted(now) {
		t.Error("wanted while another node was heard leading")
	}
	// The leader heard now was not serving when the request came (or its
	// subscription had not reached the requester's server): silence would
	// leave the requester waiting out its whole attempt timeout.
	if !s.standbyAnswers(held) {
		t.Error("a held request was left unanswered because a leader turned up meanwhile")
	}
	s.standby.leaderHeard.Store(time.Now().Add(-leaderHeardFor - time.Second).UnixNano())
	if !s.standbyWanted(now) || !s.standbyAnswers(time.Now()) {
		t.Error("a leader heard long ago still silences the standby")
	}
	before := time.Now()
	names, _ := subjects.New(subjects.DefaultPrefix)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.srv = serving.New(ctx, serving.Options{Conn: testnats.Connect(t), Names: names, Log: s.log, MaxInflight: 1}, nil, nil)
	if err := s.srv.Subscribe(); err != nil {
		t.Fatal(err)
	}
	defer s.srv.Unsubscribe()
	if s.standbyWanted(now) {
		t.Error("wanted while this node serves")
	}
	if !s.standbyAnswers(before) {
		t.Error("a request that came before the leader subscription was left unanswered")
	}
	if s.standbyAnswers(time.Now().Add(time.Millisecond)) {
		t.Error("a request the leader subscription has too was answered")
	}
}

// A node that leads but does not serve (here: it unsubscribed) answers
// through the standby with 503 and what it is doing, as /readyz says it;
// a reply subject the reply guard refuses gets nothing; once it serves
// again, the standby is gone at once and requests succeed.
func TestStandbyAnswersWhileNotServing(t *testing.T) {
	s, nc := startTest(t, nil)
	s.srv.Unsubscribe()
	var e *schema.Error
	deadline := time.Now().Add(10 * time.Second)
	for {
		e = testnats.Request(t, nc, "concord.kv.get", map[string]any{"key": "a"}, nil)
		if e != nil && e.Name == schema.ErrUnavailable {
			break
		}
		if e != nil && e.Name != "transport" {
			t.Fatalf("while not serving: %v", e)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby did not answer: %v", e)
		}
		time.Sleep(20 * time.Millisecond)
	}
	want := "node n1 cannot serve requests yet: taking over as leader; nothing was changed; retry"
	if e.Description != want {
		t.Fatalf("503 from the standby: %q, want %q", e.Description, want)
	}
	if err := s.Ready(); err == nil || err.Error() != "not ready: taking over as leader" {
		t.Fatalf("Ready while not serving: %v", err)
	}

	// A reply subject in Concord's own space: dropped, not answered.
	stray, err := nc.SubscribeSync("concord.watch.stray")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishRequest("concord.kv.get", "concord.watch.stray", []byte(`{"key":"a"}`)); err != nil {
		t.Fatal(err)
	}
	if m, err := stray.NextMsg(time.Second); err == nil {
		t.Fatalf("the standby answered to a refused reply subject: %s", m.Data)
	}

	// A join is left to the leader: a 503 could beat the answer that
	// carries the cluster id.
	if m, err := nc.Request("concord.cluster.join", []byte(`{"id":"n9","address":"127.0.0.1:1"}`), time.Second); err == nil {
		t.Fatalf("the standby answered a join: %s %v", m.Data, m.Header)
	}

	if err := s.srv.Subscribe(); err != nil {
		t.Fatal(err)
	}
	s.standby.mu.Lock()
	subs := s.standby.subs
	s.standby.mu.Unlock()
	if subs != nil {
		t.Fatal("the standby is still subscribed once the node serves")
	}
	for i := 0; i < 20; i++ {
		if e := testnats.Request(t, nc, "concord.kv.get", map[string]any{"key": "a"}, nil); e != nil {
			t.Fatalf("request %d once serving again: %v", i, e)
		}
	}
	if err := s.Ready(); err != nil {
		t.Fatalf("Ready once serving again: %v", err)
	}
}
