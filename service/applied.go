package service

import (
	"context"
	"log/slog"

	"github.com/concord-io/concord/fsm"
)

// observeApplied is the state machine's onResult: it counts what a command
// did and, on the leader, how late the leases it expired went. now is the
// lease-clock time the command applied at (its stamp, or the clock of the
// entry before it if that was later).
//
// The moment an expiry commits is read from the lease clock as the entry
// is applied, after the deletes are in the state; that clock runs only on
// the leader, so only the leader observes the lag. A follower applies the
// same entry at a moment no clock it has relates to the lease clock.
func (s *Service) observeApplied(r *fsm.Result, now int64) {
	s.metrics.ObserveResult(r)
	if len(r.Expired) == 0 || r.Err != nil || r.Cached {
		return
	}
	// Each expiry with its deadline and the clock it applied at: what a
	// lease lost early, or kept late, would show in a node's log.
	if s.log.Enabled(context.Background(), slog.LevelDebug) {
		for _, e := range r.Expired {
			s.log.Debug("lease expired", "id", e.ID, "deadline_ms", e.Deadline, "lease_clock_ms", now, "keys", e.Keys)
		}
	}
	committed, ok := s.clock.now()
	if !ok {
		return
	}
	// The clock read after apply is not behind the command's time: this
	// leader stamped the command from it, and a leader's clock starts at
	// the time of the last applied entry. max states that, rather than
	// trusting it.
	s.metrics.ObserveExpiryLag(r.Expired, max(committed, now))
}
