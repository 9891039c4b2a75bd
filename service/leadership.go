package service

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/service/replica"
)

// leaderTerm is what this node runs while it leads.
type leaderTerm struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// spawn runs f for as long as the term lasts; endTerm waits for it.
func (t *leaderTerm) spawn(ctx context.Context, f func(context.Context)) {
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		f(ctx)
	}()
}

// runLeadership follows Raft's leadership notifications. NotifyCh is
// buffered and delivers every change, unlike LeaderCh, which can drop them.
// It also follows the bus watch: while another cluster serves the same
// prefix (service/bus), a leader runs no term (its lease clock stands still
// and it expires nothing) and answers every request with the conflict.
func (s *Service) runLeadership(ctx context.Context) {
	var term *leaderTerm
	leader := false
	defer func() {
		if term != nil {
			s.stepDown(term)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case leader = <-s.notifyCh:
		case <-s.fenceCh:
		}
		fenced := s.fence.Load() != nil
		switch {
		case leader && !fenced:
			if term == nil {
				term = s.becomeLeader(ctx)
			}
		case leader && fenced:
			if term != nil {
				s.pauseTerm(term)
				term = nil
			}
			// Stay subscribed, so that requests get the conflict as their
			// answer rather than a silence that looks like no cluster.
			if err := s.srv.Subscribe(); err != nil {
				s.log.Error("subscribe to request subjects", "err", err)
			}
		default:
			if term != nil {
				s.stepDown(term)
				term = nil
			} else { // a fenced leader that lost leadership
				s.srv.Unsubscribe()
				s.pub.stop()
			}
		}
	}
}

// becomeLeader makes sure every older entry is applied, starts the lease
// clock where the log left it, and only then starts serving.
func (s *Service) becomeLeader(ctx context.Context) *leaderTerm {
	// Events of the entries of this term are ours to publish; older
	// terms' entries, applied again or for the first time, are not
	// (publisher.go).
	s.pub.lead(s.raft.CurrentTerm())
	applied := false
	retry(ctx, 100*time.Millisecond, 100*time.Millisecond, func() bool {
		err := replica.Await(ctx, s.raft.Barrier(s.cfg.ApplyTimeout))
		if err == nil {
			applied = true
			return true
		}
		if s.raft.State() != raft.Leader || ctx.Err() != nil {
			return true
		}
		s.log.Warn("leader barrier failed; retrying", "err", err)
		return false
	})
	if !applied {
		s.pub.stop()
		return nil
	}
	var base int64
	var limits fsm.Limits
	s.sm.Read(func(st *fsm.State) { base, limits = st.Now(), st.Limits() })
	// The clock resumes from where the log left it: every lease gained the
	// time it stood still.
	if !s.clock.startAt(base) {
		// Another cluster serves this prefix: the loop pauses, as it
		// does for a term that was running when the conflict began.
		s.pub.stop()
		return nil
	}
	s.metrics.ClockExtension.Observe(s.sm.SinceClockMoved(s.started).Seconds())

	want := fsm.Limits{
		MaxLeases: s.cfg.MaxLeases, MaxKeysPerLease: s.cfg.MaxKeysPerLease,
		IdempotencyEntries: s.cfg.IdempotencyEntries, IdempotencyRevisions: s.cfg.IdempotencyRevisions,
		HistoryRevisions: s.cfg.HistoryRevisions, HistoryAgeMS: s.cfg.HistoryAge.Milliseconds(),
	}
	if limits != want {
		if _, e := s.srv.Propose(&want, ""); e != nil {
			s.log.Error("set replicated limits", "err", e)
		}
	}

	tctx, cancel := context.WithCancel(ctx)
	term := &leaderTerm{cancel: cancel}
	term.spawn(tctx, s.runExpirer)
	term.spawn(tctx, s.formats.Run)
	if err := s.srv.Subscribe(); err != nil {
		s.log.Error("subscribe to request subjects", "err", err)
	}
	s.log.Info("leading: serving requests", "node", s.cfg.NodeID, "lease_clock_ms", base, "subjects", s.names.Prefix()+".lease.*, "+s.names.Prefix()+".kv.*")
	return term
}

// stepDown stops answering first, then stops the leader's background work.
func (s *Service) stepDown(term *leaderTerm) {
	s.srv.Unsubscribe()
	s.endTerm(term)
	s.pub.stop()
	s.log.Info("no longer leading", "node", s.cfg.NodeID)
}

// pauseTerm stops a leader's background work and its lease clock while
// another cluster serves the same prefix; requests already get the
// conflict as their answer (Service.fenced). Leases gain the time the
// clock stands still, as they do while there is no leader. Events stay on:
// entries proposed before the conflict may still apply, and this node is
// the one to publish them.
func (s *Service) pauseTerm(term *leaderTerm) {
	s.endTerm(term)
	s.log.Error("leading, but not serving: another cluster serves this subject prefix on the bus", "node", s.cfg.NodeID)
}

func (s *Service) endTerm(term *leaderTerm) {
	term.cancel()
	term.wg.Wait()
	s.clock.stop()
}
