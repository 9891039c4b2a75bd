package service

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/concord-io/concord/service/loglimit"
)

// Raft's repeated warnings and errors (one per election round while a
// peer is cut off) come out once per window, with the count held back;
// so do the info lines of an election round; its other info lines are
// never held back.
func TestRaftLoggerHoldsBackRepeats(t *testing.T) {
	var out strings.Builder
	hl := newRaftLogger(slog.New(slog.NewTextHandler(&out, nil)))
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

// The embedded NATS server's repeated warnings and errors (a route
// re-dialled every few seconds) come out once per window; different
// formats are not held back by each other.
func TestNATSLoggerHoldsBackRepeats(t *testing.T) {
	var out strings.Builder
	now := time.Unix(1_800_000_000, 0)
	l := &natsLogger{log: slog.New(slog.NewTextHandler(&out, nil)), repeats: loglimit.NewRepeats(10 * time.Second)}
	l.repeats.Now = func() time.Time { return now }
	for i := 0; i < 6; i++ {
		l.Errorf("Error trying to connect to route (attempt %v): %v", i, "i/o timeout")
		l.Warnf("Stale connection %d", i)
		now = now.Add(2 * time.Second)
	}
	l.Errorf("Error trying to connect to route (attempt %v): %v", 6, "i/o timeout")
	got := out.String()
	if n := strings.Count(got, "Error trying to connect to route"); n != 2 {
		t.Fatalf("%d route errors in 12 s, want 2 (one per 10 s window):\n%s", n, got)
	}
	// Attempts 1 to 4 held back; 5, at 10 s, passes and says so; 6 is held.
	if !strings.Contains(got, `(attempt 5): i/o timeout" repeated=4`) || strings.Contains(got, "attempt 6") {
		t.Fatalf("the line after the window does not say what was held back:\n%s", got)
	}
	if n := strings.Count(got, "Stale connection"); n != 2 {
		t.Fatalf("%d stale-connection warnings in 12 s, want 2:\n%s", n, got)
	}
}
