package replica

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// Raft's repeated warnings and errors (one per election round while a
// peer is cut off) come out once per window, with the count held back;
// so do the info lines of an election round; its other info lines are
// never held back.
func TestRaftLoggerHoldsBackRepeats(t *testing.T) {
	var out strings.Builder
	hl := NewRaftLogger(slog.New(slog.NewTextHandler(&out, nil)))
	for i := 0; i < 50; i++ {
		hl.Error("failed to make requestVote RPC", "target", fmt.Sprintf("n%d", i%2+2), "error", "dial tcp: i/o timeout")
		hl.Info("entering candidate state", "term", i)
		hl.Info("pre-vote campaign failed, waiting for election timeout", "term", i)
		hl.Info("starting snapshot up to", "index", i)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	errors, rounds, others := 0, 0, 0
	for _, line := range lines {
		switch {
		case strings.Contains(line, "requestVote"):
			errors++
		case strings.Contains(line, "entering candidate state"), strings.Contains(line, "pre-vote campaign failed"):
			rounds++
		case strings.Contains(line, "starting snapshot"):
			others++
		}
	}
	if errors != 1 || rounds != 2 || others != 50 {
		t.Fatalf("%d error lines (want 1 per window), %d election round lines (want 1 of each kind) and %d other info lines (want all 50):\n%s", errors, rounds, others, out.String())
	}
}
