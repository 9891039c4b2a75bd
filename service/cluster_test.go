package service

import (
	"testing"
	"time"

	"github.com/concord-io/concord/schema"
)

// A node asked over the bus for its own report answers it, with the log
// format it reads.
func TestNodeAnswersForItself(t *testing.T) {
	s, _ := startTest(t, nil)
	info, err := s.prober.AskNode(s.cfg.NodeID, schema.NodeInfoRequest{}, 5*time.Second)
	if err != nil || info.ID != s.cfg.NodeID || info.LogFormat == 0 {
		t.Fatalf("ask itself: %+v, %v", info, err)
	}
}
