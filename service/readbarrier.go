package service

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/schema"
)

// readBarrier makes reads linearizable without writing to the log. Reads
// that arrive while a confirmation is running wait for the next one, so one
// VerifyLeader round serves a whole batch of reads. A confirmation reads the
// commit index after every read of its batch arrived, checks that this node
// is still the leader, and waits until the state machine has applied
// everything up to that index.
type readBarrier struct {
	s *Service

	mu      sync.Mutex
	waiters []chan *schema.Error
	running bool
}

func (b *readBarrier) wait(ctx context.Context) *schema.Error {
	ch := make(chan *schema.Error, 1)
	b.mu.Lock()
	b.waiters = append(b.waiters, ch)
	if !b.running {
		b.running = true
		go b.loop()
	}
	b.mu.Unlock()
	select {
	case e := <-ch:
		return e
	case <-ctx.Done():
		return schema.Errorf(schema.ErrUnavailable, "read timed out confirming leadership")
	}
}

func (b *readBarrier) loop() {
	for {
		b.mu.Lock()
		batch := b.waiters
		b.waiters = nil
		if len(batch) == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		e := b.confirm()
		for _, ch := range batch {
			ch <- e
		}
	}
}

func (b *readBarrier) confirm() *schema.Error {
	commit := b.s.raft.CommitIndex()
	if err := b.s.raft.VerifyLeader().Error(); err != nil {
		return schema.Errorf(schema.ErrNotLeader, "this node is no longer the leader")
	}
	return b.s.waitApplied(commit, b.s.cfg.ApplyTimeout)
}

// waitApplied waits until the state machine has applied every entry up to
// target that it will ever see. Raft does not hand no-op and barrier entries
// to the FSM, so when the tail up to target holds only those, the state is
// already current.
func (s *Service) waitApplied(target uint64, timeout time.Duration) *schema.Error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		applied, changed := s.sm.applied.waitCh()
		if applied >= target {
			return nil
		}
		last, err := s.lastFSMEntry(applied, target)
		if err != nil {
			return schema.Errorf(schema.ErrUnavailable, "read the raft log: %v", err)
		}
		if last <= applied {
			return nil
		}
		target = last
		select {
		case <-changed:
		case <-deadline.C:
			return schema.Errorf(schema.ErrUnavailable, "state machine has not caught up with the commit index")
		}
	}
}

// lastFSMEntry returns the highest index in (from, to] of an entry that the
// FSM applies, or from when there is none.
func (s *Service) lastFSMEntry(from, to uint64) (uint64, error) {
	var l raft.Log
	for i := to; i > from; i-- {
		if err := s.store.GetLog(i, &l); err != nil {
			return 0, err
		}
		if l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			return i, nil
		}
	}
	return from, nil
}
