package service

import (
	"testing"
	"time"

	"github.com/concord-io/concord/schema"
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
	if e := request(t, nc, "concord.kv.put", map[string]any{"key": "k", "value": 1}, nil); e != nil {
		t.Fatalf("put: %v", e)
	}
	nc.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, nc = startTest(t, slow)
	var got schema.KVGetReply
	if e := request(t, nc, "concord.kv.get", map[string]any{"key": "k"}, &got); e != nil {
		t.Fatalf("get: %v", e)
	}
	if len(got.KVs) != 1 || string(got.KVs[0].Value) != "1" {
		t.Fatalf("after the restart the key reads %+v, want the value 1", got.KVs)
	}
	if hb := s.raft.ReloadableConfig().HeartbeatTimeout; hb != time.Minute {
		t.Fatalf("heartbeat timeout after the election is %s, want the configured 1m", hb)
	}
}
