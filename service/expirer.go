package service

import (
	"context"
	"time"

	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/service/replica"
)

// runExpirer runs on the leader. It wakes at the earlier of the next tick
// and the first lease deadline; then, while leases exist, it proposes an
// expire command carrying the lease-clock time. With no expired leases that
// command is a tick: it only records the clock in the log, so that after a
// restart or failover a lease has lost at most one tick of its remaining
// time. Expired leases go in batches of ExpireBatch, all proposed at once so
// Raft can write them together; Apply re-checks each deadline, so a
// keep-alive that lands first wins.
func (s *Service) runExpirer(ctx context.Context) {
	tick := s.cfg.TickInterval
	timer := time.NewTimer(0)
	defer timer.Stop()
	var lastProposal time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		now, ok := s.clock.now()
		if !ok {
			return
		}
		start := time.Now()
		var due []fsm.DueLeases
		var haveLeases bool
		var leases int64
		s.sm.Read(func(st *fsm.State) {
			due = st.Due(now)
			_, haveLeases = st.NextDeadline()
			explicit, anon := st.LeaseCount()
			leases = explicit + anon
		})
		expired := 0
		for _, d := range due {
			expired += len(d.IDs)
		}
		wait := tick
		if haveLeases && (expired > 0 || time.Since(lastProposal) >= tick) {
			err := s.proposeExpire(ctx, now, due)
			if err == nil {
				s.metrics.ObserveTick(start, expired, leases, s.cfg.ExpireBatch)
			}
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				s.log.Warn("propose lease expiry", "leases", expired, "err", err)
				wait = 100 * time.Millisecond
			}
			lastProposal = time.Now()
		}
		if !lastProposal.IsZero() {
			if sinceTick := time.Since(lastProposal); sinceTick < tick {
				wait = min(wait, tick-sinceTick)
			}
		}
		// Wake when the first deadline has strictly passed on the lease clock.
		var next int64
		var has bool
		s.sm.Read(func(st *fsm.State) { next, has = st.NextDeadline() })
		if has {
			if cur, ok := s.clock.now(); ok {
				wait = min(wait, time.Duration(next+1-cur)*time.Millisecond)
			}
		}
		timer.Reset(max(wait, time.Millisecond))
	}
}

// proposeExpire proposes the expiry of the due leases, each tenant's in
// its own commands (a tick when there are none), and waits for every batch
// to apply.
func (s *Service) proposeExpire(ctx context.Context, now int64, due []fsm.DueLeases) error {
	var futures []raft.ApplyFuture
	if len(due) == 0 {
		due = []fsm.DueLeases{{Tenant: fsm.DefaultTenant}}
	}
	for _, d := range due {
		ids := d.IDs
		for first := true; first || len(ids) > 0; first = false {
			n := min(len(ids), s.cfg.ExpireBatch)
			data, err := fsm.EncodeFor(now, d.Tenant, "", &fsm.Expire{IDs: ids[:n]})
			if err != nil {
				return err
			}
			ids = ids[n:]
			futures = append(futures, s.raft.Apply(data, s.cfg.ApplyTimeout))
		}
	}
	// Waited for with the term's ctx: an entry Raft had queued but not
	// taken when it shut down is never answered (raft v1.8.0 leaves such a
	// future's ShutdownCh unset), and the node's Close waits for the term.
	var firstErr error
	for _, f := range futures {
		if err := replica.Await(ctx, f); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}
