package service

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/bus"
	"github.com/concord-io/concord/service/datadir"
	"github.com/concord-io/concord/service/internal/testnats"
	"github.com/concord-io/concord/service/internal/testwait"
	"github.com/concord-io/concord/service/replica"
)

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
		return !s.formats.AllRead(fsm.LogFormatTxnCause) && s.formats.AllRead(fsm.LogFormatHistory)
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
	testwait.Until(t, "the gate hears n9's new format", func() bool { return s.formats.AllRead(fsm.LogFormatTxnCause) })
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
	if v := snapshot(); v != bus.OlderSnapshotVersion {
		t.Fatalf("with a member on the release before, snapshot version %d, want %d", v, bus.OlderSnapshotVersion)
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
	if v := snapshot(); v != bus.OlderSnapshotVersion {
		t.Fatalf("with a member that does not answer, snapshot version %d, want %d", v, bus.OlderSnapshotVersion)
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
	restored := replica.NewStateMachine(func(uint64, string, []schema.Event) {})
	if err := restored.Restore(rc); err != nil {
		t.Fatalf("restore the older version: %v", err)
	}
	for _, key := range []string{"alone", "older", "current", "silent"} {
		if reply := restored.View(fsm.DefaultTenant).Get(fsm.GetQuery{Key: key}, 0); len(reply.KVs) != 1 {
			t.Fatalf("key %s missing after a restore from version %d", key, bus.OlderSnapshotVersion)
		}
	}
}
