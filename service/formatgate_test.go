package service

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
)

// askLog answers the gate's questions from a table and counts them.
type askLog struct {
	mu      sync.Mutex
	formats map[raft.ServerID]int
	fail    map[raft.ServerID]bool
	asked   map[raft.ServerID]int
}

func (a *askLog) ask(id raft.ServerID) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked[id]++
	if a.fail[id] {
		return 0, errors.New("no responders")
	}
	return a.formats[id], nil
}

func servers(ids ...string) []raft.Server {
	out := make([]raft.Server, len(ids))
	for i, id := range ids {
		out[i] = raft.Server{ID: raft.ServerID(id), Suffrage: raft.Voter}
	}
	return out
}

// The gate turns batching on only when every other member has said it
// reads batch entries; a member that is silent or on an older release
// keeps it off, and is asked again until it says so.
func TestFormatGate(t *testing.T) {
	var on bool
	g := newFormatGate(func(b bool) { on = b })
	a := &askLog{
		formats: map[raft.ServerID]int{"n2": fsm.LogFormat, "n3": 0},
		fail:    map[raft.ServerID]bool{},
		asked:   map[raft.ServerID]int{},
	}
	three := servers("n1", "n2", "n3")

	if g.check(servers("n1"), "n1", a.ask) != true || !on {
		t.Fatal("a one-node cluster does not batch")
	}
	if len(a.asked) != 0 {
		t.Fatalf("the leader asked %v; it knows its own release", a.asked)
	}
	if g.check(three, "n1", a.ask) || on {
		t.Fatal("batching with n3 on an older release (no log_format)")
	}
	a.formats["n3"] = fsm.LogFormatBatch - 1
	if g.check(three, "n1", a.ask) || on {
		t.Fatal("batching with n3 reading format 2")
	}
	a.formats["n3"], a.fail["n3"] = fsm.LogFormat, true
	if g.check(three, "n1", a.ask) || on {
		t.Fatal("batching with n3 silent")
	}
	a.fail["n3"] = false // upgraded and back
	if !g.check(three, "n1", a.ask) || !on {
		t.Fatal("no batching once every member reads batch entries")
	}
	// n2 is known since its first answer; n3 was asked every round.
	if a.asked["n2"] != 1 || a.asked["n3"] != 4 {
		t.Fatalf("asked %v, want n2 once and n3 four times", a.asked)
	}
	if !g.check(three, "n1", a.ask) || a.asked["n3"] != 4 {
		t.Fatalf("a known member asked again: %v", a.asked)
	}

	// A new member is unknown until it answers.
	four := servers("n1", "n2", "n3", "n4")
	a.fail["n4"] = true
	if g.check(four, "n1", a.ask) || on {
		t.Fatal("batching with a new member that has not answered")
	}
	g.learned("n4", fsm.LogFormat) // as checkJoiner learns it
	if !g.check(four, "n1", a.ask) || !on {
		t.Fatal("no batching after the joiner was checked")
	}

	// A new term starts from nothing.
	g.reset()
	if on {
		t.Fatal("batching on after reset")
	}
	a.fail["n4"] = false
	a.formats["n4"] = 0
	if g.check(four, "n1", a.ask) || on {
		t.Fatal("a new term kept what the last one knew")
	}
}

// A reset while members are being asked wins: the check that began
// before it cannot turn batching on.
func TestFormatGateResetDuringCheck(t *testing.T) {
	var mu sync.Mutex
	on := false
	g := newFormatGate(func(b bool) { mu.Lock(); on = b; mu.Unlock() })
	asking, resetDone := make(chan struct{}), make(chan struct{})
	ask := func(raft.ServerID) (int, error) {
		close(asking)
		<-resetDone
		return fsm.LogFormat, nil
	}
	done := make(chan bool)
	go func() { done <- g.check(servers("n1", "n2"), "n1", ask) }()
	<-asking
	g.reset()
	close(resetDone)
	if <-done {
		t.Fatal("check reported batching on after a reset")
	}
	mu.Lock()
	defer mu.Unlock()
	if on {
		t.Fatal("a check from before the reset turned batching on")
	}
}

// A single node batches once it leads, and says in its node info which
// log format it reads.
func TestLeaderBatchesAndReportsLogFormat(t *testing.T) {
	s, nc := startTest(t, nil)
	waitUntil(t, "batching on", s.proposer.batching.Load)
	var info schema.NodeInfo
	msg, err := nc.Request(s.names.NodeInfo(s.cfg.NodeID), []byte(`{}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := schema.Validate("cluster.node.info.reply", msg.Data); err != nil {
		t.Fatalf("node info %s: %v", msg.Data, err)
	}
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		t.Fatal(err)
	}
	if info.LogFormat != fsm.LogFormat {
		t.Fatalf("log_format %d, want %d", info.LogFormat, fsm.LogFormat)
	}
}

// A node that asks to join is admitted only if its release reads batch
// entries; one that does not say (an older release) or cannot be asked is
// refused, and the configuration does not change. The older release is
// played by a subscriber that answers its node info as that release did.
func TestJoinRefusesOlderRelease(t *testing.T) {
	s, nc := startTest(t, nil)
	waitUntil(t, "batching on", s.proposer.batching.Load)
	old, err := nc.Subscribe(s.names.NodeInfo("n9"), func(m *nats.Msg) {
		_ = m.Respond([]byte(`{"id":"n9","cluster_id":"","state":"follower","term":0,"leader":"","last_index":0,"commit_index":0,"applied_index":0,"revision":0}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	join := func(id string) *schema.Error {
		t.Helper()
		return request(t, nc, "concord.cluster.join", map[string]any{"id": id, "address": "127.0.0.1:1"}, nil)
	}
	e := join("n9")
	if e == nil || e.Name != schema.ErrClusterMismatch || !strings.Contains(e.Description, "older release") {
		t.Fatalf("join of an older release: %v", e)
	}
	if err := old.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	e = join("n8") // nobody answers for n8
	if e == nil || e.Name != schema.ErrUnavailable || !strings.Contains(e.Description, "which release node n8 runs") {
		t.Fatalf("join of a silent node: %v", e)
	}
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	if got := f.Configuration().Servers; len(got) != 1 {
		t.Fatalf("configuration after refused joins: %+v", got)
	}
	if !s.proposer.batching.Load() {
		t.Fatal("a refused join turned batching off")
	}
}
