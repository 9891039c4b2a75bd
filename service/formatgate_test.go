package service

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/datadir"
	"github.com/concord-io/concord/service/internal/testnats"
	"github.com/concord-io/concord/service/internal/testwait"
	"github.com/concord-io/concord/service/replica"
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
// reads batch entries. A member that never answered, or that says it runs
// an older release, keeps it off, and is asked again every round; a member
// that answered once and then falls silent (it is down) does not.
func TestFormatGate(t *testing.T) {
	var on bool
	g := newFormatGate(func(b bool) { on = b })
	a := &askLog{
		formats: map[raft.ServerID]int{"n2": fsm.LogFormat, "n3": 0},
		fail:    map[raft.ServerID]bool{},
		asked:   map[raft.ServerID]int{},
	}
	three := servers("n1", "n2", "n3")
	check := func(want bool, srv []raft.Server, why string) {
		t.Helper()
		got, reasons := g.check(srv, "n1", a.ask)
		if got != want || on != want {
			t.Fatalf("check = %v (gate set %v), want %v; reasons %q", got, on, want, reasons)
		}
		if joined := strings.Join(reasons, "; "); !strings.Contains(joined, why) || (want && joined != "") {
			t.Fatalf("reasons %q, want them to say %q", joined, why)
		}
	}

	check(true, servers("n1"), "")
	if len(a.asked) != 0 {
		t.Fatalf("the leader asked %v; it knows its own release", a.asked)
	}
	check(false, three, "node n3 runs a release that reads log format 0")
	a.formats["n3"] = fsm.LogFormatBatch - 1
	check(false, three, "node n3 runs a release that reads log format 2")
	a.formats["n3"], a.fail["n3"] = fsm.LogFormat, true
	check(false, three, "node n3 has not said which log format it reads: no responders")
	a.fail["n3"] = false // upgraded and back
	check(true, three, "")
	if a.asked["n2"] != 4 || a.asked["n3"] != 4 {
		t.Fatalf("asked %v, want every member every round", a.asked)
	}

	// A known member that goes down keeps batching on.
	a.fail["n3"] = true
	check(true, three, "")
	// One that comes back on an older release turns it off.
	a.fail["n3"], a.formats["n3"] = false, 0
	check(false, three, "node n3 runs a release that reads log format 0")
	a.formats["n3"] = fsm.LogFormat
	check(true, three, "")

	// A new member is unknown until it answers or its join is checked.
	four := servers("n1", "n2", "n3", "n4")
	a.fail["n4"] = true
	check(false, four, "node n4 has not said")
	g.learned("n4", fsm.LogFormat) // as checkJoiner learns it
	check(true, four, "")

	// The newest format all read: commands of the history's format wait
	// for the last member on a release that reads batches but not them.
	if !g.allRead(fsm.LogFormatHistory) {
		t.Fatal("every member reads the history's format, the gate says not")
	}
	a.formats["n2"] = fsm.LogFormatBatch
	check(true, four, "")
	if g.allRead(fsm.LogFormatHistory) || !g.allRead(fsm.LogFormatBatch) {
		t.Fatalf("n2 reads format %d: allRead(%d) %v, allRead(%d) %v", fsm.LogFormatBatch,
			fsm.LogFormatHistory, g.allRead(fsm.LogFormatHistory), fsm.LogFormatBatch, g.allRead(fsm.LogFormatBatch))
	}
	a.formats["n2"] = fsm.LogFormat

	// A new term starts from nothing.
	g.reset()
	if on {
		t.Fatal("batching on after reset")
	}
	if g.allRead(fsm.LogFormatBatch) {
		t.Fatal("a new term knows what members read before asking")
	}
	check(false, four, "node n4 has not said")
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
	go func() {
		on, _ := g.check(servers("n1", "n2"), "n1", ask)
		done <- on
	}()
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
	testwait.Until(t, "batching on", s.srv.Batching)
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
	testwait.Until(t, "batching on", s.srv.Batching)
	old, err := nc.Subscribe(s.names.NodeInfo("n9"), func(m *nats.Msg) {
		_ = m.Respond([]byte(`{"id":"n9","cluster_id":"","state":"follower","term":0,"leader":"","last_index":0,"commit_index":0,"applied_index":0,"revision":0}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	join := func(id string) *schema.Error {
		t.Helper()
		return testnats.Request(t, nc, "concord.cluster.join", map[string]any{"id": id, "address": "127.0.0.1:1"}, nil)
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
	if !s.srv.Batching() {
		t.Fatal("a refused join turned batching off")
	}
}

// addOlderMember adds a nonvoter n9 to s's configuration, played by a
// subscriber that answers its node info with the log format in format
// (read at each answer); unsubscribing makes it a member that does not
// answer.
func addOlderMember(t *testing.T, s *Service, nc *nats.Conn, format *atomic.Int64) *nats.Subscription {
	t.Helper()
	sub, err := nc.Subscribe(s.names.NodeInfo("n9"), func(m *nats.Msg) {
		_ = m.Respond(fmt.Appendf(nil, `{"id":"n9","cluster_id":"","state":"follower","term":0,"leader":"","last_index":0,"commit_index":0,"applied_index":0,"revision":0,"log_format":%d}`, format.Load()))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := s.raft.AddNonvoter("n9", "127.0.0.1:1", 0, 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	return sub
}

// A transaction's deletes say "txn" only once every member reads
// LogFormatTxnCause; while a member runs the release before, they say
// "delete", as that release records them, and are not refused. The member
// on the older release is played by a subscriber answering its node info.
func TestTxnDeleteCauseWaitsForEveryMember(t *testing.T) {
	s, nc := startTest(t, func(c *Config) { c.BusCheckInterval = 50 * time.Millisecond })
	var format atomic.Int64
	format.Store(fsm.LogFormatHistory)
	addOlderMember(t, s, nc, &format)
	testwait.Until(t, "the gate hears n9's format", func() bool {
		return !s.formats.allRead(fsm.LogFormatTxnCause) && s.formats.allRead(fsm.LogFormatHistory)
	})

	causeOfTxnDelete := func(key string) string {
		t.Helper()
		if e := testnats.Request(t, nc, "concord.kv.put", map[string]any{"key": key, "value": 1}, nil); e != nil {
			t.Fatalf("put: %v", e)
		}
		if e := testnats.Request(t, nc, "concord.kv.txn", map[string]any{"success": []any{map[string]any{"delete": map[string]any{"key": key}}}}, nil); e != nil {
			t.Fatalf("txn: %v", e)
		}
		var h schema.KVHistoryReply
		if e := testnats.Request(t, nc, "concord.kv.history", map[string]any{"key": key}, &h); e != nil {
			t.Fatalf("history: %v", e)
		}
		if len(h.Records) != 2 {
			t.Fatalf("history of %s: %+v", key, h.Records)
		}
		return h.Records[1].Cause
	}
	if c := causeOfTxnDelete("old"); c != schema.CauseDelete {
		t.Fatalf("with a member on the release before, a txn delete's cause is %q, want %q", c, schema.CauseDelete)
	}
	format.Store(fsm.LogFormatTxnCause)
	testwait.Until(t, "the gate hears n9's new format", func() bool { return s.formats.allRead(fsm.LogFormatTxnCause) })
	if c := causeOfTxnDelete("new"); c != schema.CauseTxn {
		t.Fatalf("with every member on this release, a txn delete's cause is %q, want %q", c, schema.CauseTxn)
	}
}

// snapshotVersionOnDisk reads the version of the node's latest snapshot:
// "concord.fsm v5" opens version 5, a JSON header the JSON versions.
func snapshotVersionOnDisk(t *testing.T, s *Service) int {
	t.Helper()
	metas, err := s.snaps.List()
	if err != nil || len(metas) == 0 {
		t.Fatalf("snapshots: %v, %v", metas, err)
	}
	_, rc, err := s.snaps.Open(metas[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := datadir.ReadSnapshotFrame(rc); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(rc).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if line == fsm.SnapshotFormat+" v5\n" {
		return 5
	}
	var h struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal([]byte(line), &h); err != nil {
		t.Fatalf("snapshot header %q: %v", line, err)
	}
	return h.Version
}

// A snapshot is written in the current version only while every member
// reads it: with a member on the release before, or one that does not
// answer, the version before. Either way the node restores it.
func TestSnapshotVersionWaitsForEveryMember(t *testing.T) {
	s, nc := startTest(t, nil)
	put := func(key string) {
		t.Helper()
		if e := testnats.Request(t, nc, "concord.kv.put", map[string]any{"key": key, "value": 1}, nil); e != nil {
			t.Fatalf("put: %v", e)
		}
	}
	snapshot := func() int {
		t.Helper()
		if err := s.raft.Snapshot().Error(); err != nil {
			t.Fatalf("snapshot: %v", err)
		}
		return snapshotVersionOnDisk(t, s)
	}
	put("alone")
	if v := snapshot(); v != fsm.SnapshotVersion {
		t.Fatalf("a lone node wrote snapshot version %d, want %d", v, fsm.SnapshotVersion)
	}

	var format atomic.Int64
	format.Store(fsm.LogFormatHistory)
	sub := addOlderMember(t, s, nc, &format)
	put("older")
	if v := snapshot(); v != olderSnapshotVersion {
		t.Fatalf("with a member on the release before, snapshot version %d, want %d", v, olderSnapshotVersion)
	}
	format.Store(fsm.LogFormatTxnCause)
	put("current")
	if v := snapshot(); v != fsm.SnapshotVersion {
		t.Fatalf("with every member on this release, snapshot version %d, want %d", v, fsm.SnapshotVersion)
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	put("silent")
	if v := snapshot(); v != olderSnapshotVersion {
		t.Fatalf("with a member that does not answer, snapshot version %d, want %d", v, olderSnapshotVersion)
	}

	// The older version holds the whole state: a node restored from it
	// has every key.
	metas, err := s.snaps.List()
	if err != nil {
		t.Fatal(err)
	}
	_, rc, err := s.snaps.Open(metas[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	restored := replica.NewStateMachine(func(uint64, []schema.Event) {})
	if err := restored.Restore(rc); err != nil {
		t.Fatalf("restore the older version: %v", err)
	}
	for _, key := range []string{"alone", "older", "current", "silent"} {
		if reply := restored.View().Get(fsm.GetQuery{Key: key}, 0); len(reply.KVs) != 1 {
			t.Fatalf("key %s missing after a restore from version %d", key, olderSnapshotVersion)
		}
	}
}
