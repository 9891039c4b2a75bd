package service

import (
	"fmt"
	"testing"
	"time"

	"github.com/concord-io/concord/service/internal/testnats"
)

// A node asks for a snapshot once the commands since the last one reach
// the threshold, though Raft itself would check only after an hour.
func TestSnapshotByCommandCount(t *testing.T) {
	s, nc := startTest(t, func(c *Config) {
		c.SnapshotThreshold = 100
		c.SnapshotInterval = time.Hour
	})
	for i := range 120 {
		if e := testnats.Request(t, nc, "concord.kv.put", map[string]any{"key": fmt.Sprintf("k%03d", i), "value": i}, nil); e != nil {
			t.Fatalf("put: %v", e)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		snaps, err := s.snaps.List()
		if err != nil {
			t.Fatal(err)
		}
		if len(snaps) > 0 {
			if snaps[0].Index < 100 {
				t.Fatalf("snapshot at index %d, before the threshold of 100 commands", snaps[0].Index)
			}
			break
		}
		if time.Now().After(deadline) {
			commands, records := s.sm.ReplayDebt()
			t.Fatalf("no snapshot after 120 puts with a threshold of 100 (debt %d commands, %d records)", commands, records)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if commands, _ := s.sm.ReplayDebt(); commands >= 100 {
		t.Fatalf("replay debt %d after the snapshot", commands)
	}
}
