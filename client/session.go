package client

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/concord-io/concord/schema"
)

// SessionState is how sure a session is that it still holds its lease.
type SessionState int

// Session states, from the client's conservative local deadline: the send
// time of the last successful keep-alive plus the ttl. The server never
// expires a lease before that, so while the deadline is ahead the lease is
// held, whatever the network is doing.
const (
	// Safe: more than a third of the ttl is left.
	Safe SessionState = iota
	// Jeopardy: keep-alives are failing and a third of the ttl or less is
	// left; stop starting work that needs the lease.
	Jeopardy
	// Expired: the deadline has passed or the server said the lease is
	// gone; Done is closed.
	Expired
)

func (s SessionState) String() string {
	switch s {
	case Safe:
		return "safe"
	case Jeopardy:
		return "jeopardy"
	}
	return "expired"
}

// Session is a lease kept alive in the background. Keys written with
// Lease() live as long as the session; locks and elections build on it.
type Session struct {
	c     *Client
	id    int64
	ttl   time.Duration
	mu    sync.Mutex
	until time.Time // conservative local deadline
	lost  bool
	done  chan struct{}
}

// NewSession grants a lease of ttl (whole seconds, at least 1) and keeps it
// alive at about ttl/3 with jitter. Sessions of one Client share one
// batched keep-alive request.
func (c *Client) NewSession(ctx context.Context, ttl time.Duration) (*Session, error) {
	secs := int64(ttl / time.Second)
	if secs < 1 {
		secs = 1
	}
	sent := time.Now()
	g, err := c.Grant(ctx, schema.LeaseGrantRequest{TTL: secs})
	if err != nil {
		return nil, err
	}
	s := &Session{c: c, id: g.ID, ttl: time.Duration(secs) * time.Second, until: sent.Add(time.Duration(secs) * time.Second), done: make(chan struct{})}
	c.keepAliver().add(s)
	return s, nil
}

// Lease returns the session's lease id.
func (s *Session) Lease() int64 { return s.id }

// TTL returns the lease's ttl.
func (s *Session) TTL() time.Duration { return s.ttl }

// Done is closed when the session has lost its lease (or was closed).
func (s *Session) Done() <-chan struct{} { return s.done }

// State reports Safe, Jeopardy or Expired from the local deadline.
func (s *Session) State() SessionState {
	s.mu.Lock()
	defer s.mu.Unlock()
	left := time.Until(s.until)
	switch {
	case s.lost || left <= 0:
		return Expired
	case left <= s.ttl/3:
		return Jeopardy
	}
	return Safe
}

// Deadline returns the local deadline: the lease is held at least until then.
func (s *Session) Deadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.until
}

// Close stops keeping the lease alive and revokes it, deleting its keys.
func (s *Session) Close(ctx context.Context) error {
	s.c.kaMu.Lock()
	if ka := s.c.ka; ka != nil {
		ka.remove(s)
	}
	s.c.kaMu.Unlock()
	s.expire()
	_, err := s.c.Revoke(ctx, schema.LeaseRevokeRequest{ID: s.id})
	if err != nil && !errorsIsLeaseNotFound(err) {
		return err
	}
	return nil
}

func (s *Session) renewed(sent time.Time, ttl int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if until := sent.Add(time.Duration(ttl) * time.Second); until.After(s.until) {
		s.until = until
	}
}

// expire marks the lease lost and closes Done once.
func (s *Session) expire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.lost {
		s.lost = true
		close(s.done)
	}
}

// keepAliver renews every session of a client with one keepalive_many
// request per interval.
type keepAliver struct {
	c        *Client
	mu       sync.Mutex
	sessions map[int64]*Session
	wake     chan struct{}
	quit     chan struct{}
	wg       sync.WaitGroup
}

func (c *Client) keepAliver() *keepAliver {
	c.kaMu.Lock()
	defer c.kaMu.Unlock()
	if c.ka == nil {
		c.ka = &keepAliver{c: c, sessions: map[int64]*Session{}, wake: make(chan struct{}, 1), quit: make(chan struct{})}
		c.ka.wg.Add(1)
		go c.ka.run()
	}
	return c.ka
}

func (k *keepAliver) add(s *Session) {
	k.mu.Lock()
	k.sessions[s.id] = s
	k.mu.Unlock()
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

func (k *keepAliver) remove(s *Session) {
	k.mu.Lock()
	delete(k.sessions, s.id)
	k.mu.Unlock()
}

func (k *keepAliver) stop() {
	close(k.quit)
	k.wg.Wait()
}

func (k *keepAliver) run() {
	defer k.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		k.mu.Lock()
		interval := time.Hour
		ids := make([]int64, 0, len(k.sessions))
		for id, s := range k.sessions {
			ids = append(ids, id)
			interval = min(interval, s.ttl/3)
		}
		k.mu.Unlock()
		// Jitter spreads many clients' renewals; it only ever shortens the
		// interval.
		timer.Reset(interval - rand.N(interval/5+1))
		// Wake at the earliest local deadline too, so Done closes no later
		// than the server could expire the lease.
		deadline := k.earliestDeadline()
		select {
		case <-k.quit:
			return
		case <-k.wake:
			continue
		case <-deadline:
			k.checkDeadlines()
			continue
		case <-timer.C:
		}
		if len(ids) > 0 {
			k.renew(ids, interval)
		}
		k.checkDeadlines()
	}
}

func (k *keepAliver) renew(ids []int64, interval time.Duration) {
	// Give up by the earliest local deadline, so Done closes on time even
	// while the cluster does not answer.
	timeout := interval
	if first := k.firstDeadline(); !first.IsZero() {
		timeout = min(timeout, time.Until(first))
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	sent := time.Now()
	reply, err := k.c.KeepAliveMany(ctx, schema.LeaseKeepAliveManyRequest{IDs: ids})
	if err != nil {
		return // retried next interval; the local deadline decides meanwhile
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, l := range reply.Leases {
		if s := k.sessions[l.ID]; s != nil {
			s.renewed(sent, l.TTL)
		}
	}
	for _, id := range reply.NotFound {
		if s := k.sessions[id]; s != nil {
			delete(k.sessions, id)
			s.expire()
		}
	}
}

func (k *keepAliver) earliestDeadline() <-chan time.Time {
	first := k.firstDeadline()
	if first.IsZero() {
		return nil
	}
	return time.After(time.Until(first))
}

func (k *keepAliver) firstDeadline() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	var first time.Time
	for _, s := range k.sessions {
		if d := s.Deadline(); first.IsZero() || d.Before(first) {
			first = d
		}
	}
	return first
}

func (k *keepAliver) checkDeadlines() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for id, s := range k.sessions {
		if s.State() == Expired {
			delete(k.sessions, id)
			s.expire()
		}
	}
}
