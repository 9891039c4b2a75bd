package service

import (
	"testing"
	"time"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/internal/testnats"
	"github.com/concord-io/concord/service/replica"
)

// Before Raft runs, a node's activity is the restore's progress while one
// runs, and its start-up phase otherwise.
func TestActivityBeforeRaft(t *testing.T) {
	var p replica.RestoreProgress
	p.Begin(2000)
	if got := activityBeforeRaft(p.Describe(), phaseStartingRaft); got != "restoring snapshot, 0 B of 2.0 kB" {
		t.Errorf("activity during a restore: %q", got)
	}
	p.End()
	if got := activityBeforeRaft(p.Describe(), phaseCheckingBus); got != "checking the NATS bus for other clusters" {
		t.Errorf("activity while checking the bus: %q", got)
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
	if s.standby.Subscribed() {
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
