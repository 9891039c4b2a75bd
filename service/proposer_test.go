package service

import (
	"fmt"
	"testing"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/internal/testnats"
	"github.com/concord-io/concord/service/internal/testwait"
)

// On a real node, concurrent requests share log entries: fewer entries
// than commands, every request answered correctly (run with -race).
func TestConcurrentRequestsShareLogEntries(t *testing.T) {
	s, nc := startTest(t, nil)
	testwait.Until(t, "batching on", s.srv.Batching)
	before := s.raft.LastIndex()
	const clients, rounds = 32, 15
	testwait.Concurrently(t, clients, func(c int) error {
		for r := 0; r < rounds; r++ {
			key := fmt.Sprintf("share.c%d.k%d", c, r)
			var p schema.KVPutReply
			if e := testnats.Request(t, nc, "concord.kv.put", map[string]any{"key": key, "value": r}, &p); e != nil {
				return fmt.Errorf("put %s: %v", key, e)
			}
			var got schema.KVGetReply
			if e := testnats.Request(t, nc, "concord.kv.get", map[string]any{"key": key}, &got); e != nil {
				return fmt.Errorf("get %s: %v", key, e)
			}
			if len(got.KVs) != 1 || got.KVs[0].ModRevision != p.Revision || string(got.KVs[0].Value) != fmt.Sprint(r) {
				return fmt.Errorf("%s: put at %d, read %+v", key, p.Revision, got.KVs)
			}
		}
		return nil
	})
	entries := s.raft.LastIndex() - before
	t.Logf("%d puts in %d log entries", clients*rounds, entries)
	if entries >= clients*rounds {
		t.Fatalf("%d puts took %d log entries: no batching", clients*rounds, entries)
	}
}
