package service

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/internal/testnats"
)

// A lone voter elects itself without first waiting out a heartbeat
// timeout, on its first start and on a restart. The timeouts here are a
// minute, so a node that waited (one to two of them) could not serve
// within startTest's 15 seconds; and the configured timeout is in force
// again afterwards.
func TestLoneVoterStandsAtOnce(t *testing.T) {
	dir := t.TempDir()
	slow := func(c *Config) {
		c.DataDir = dir
		c.RaftHeartbeatTimeout = time.Minute
		c.RaftElectionTimeout = time.Minute
	}
	s, nc := startTest(t, slow)
	if e := testnats.Request(t, nc, "concord.kv.put", map[string]any{"key": "k", "value": 1}, nil); e != nil {
		t.Fatalf("put: %v", e)
	}
	nc.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, nc = startTest(t, slow)
	var got schema.KVGetReply
	if e := testnats.Request(t, nc, "concord.kv.get", map[string]any{"key": "k"}, &got); e != nil {
		t.Fatalf("get: %v", e)
	}
	if len(got.KVs) != 1 || string(got.KVs[0].Value) != "1" {
		t.Fatalf("after the restart the key reads %+v, want the value 1", got.KVs)
	}
	if hb := s.raft.ReloadableConfig().HeartbeatTimeout; hb != time.Minute {
		t.Fatalf("heartbeat timeout after the election is %s, want the configured 1m", hb)
	}
}

// caughtUp closes once a restarted node has applied the log it started
// with, on top of its snapshot (here none: every command is replayed),
// and at once for a new node, which has none.
func TestCaughtUpAfterReplay(t *testing.T) {
	dir := t.TempDir()
	noSnapshots := func(c *Config) {
		c.DataDir = dir
		c.SnapshotThreshold = 1 << 40
		c.SnapshotInterval = time.Hour
	}
	s, nc := startTest(t, noSnapshots)
	waitCaughtUp(t, s)
	for i := range 50 {
		if e := testnats.Request(t, nc, "concord.kv.put", map[string]any{"key": fmt.Sprintf("k%02d", i), "value": i}, nil); e != nil {
			t.Fatalf("put: %v", e)
		}
	}
	nc.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Not startTest, which waits until the node serves: what the state
	// holds is read the moment caughtUp closes.
	cfg := DefaultConfig()
	cfg.NATSListen, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	noSnapshots(&cfg)
	s, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	waitCaughtUp(t, s)
	var keys int
	s.sm.Read(func(st *fsm.State) { keys = st.KeyCount() })
	if keys != 50 {
		t.Fatalf("caught up with %d keys, want the 50 the log held", keys)
	}
}

func waitCaughtUp(t *testing.T, s *Service) {
	t.Helper()
	select {
	case <-s.caughtUp:
	case <-time.After(30 * time.Second):
		t.Fatal("not caught up after 30 s")
	}
}
