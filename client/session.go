package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// ErrSessionClosed is what Session.Err reports for a session ended by its
// owner: Session.Close, or Client.Close, which stops the keep-alives
// without revoking the lease.
var ErrSessionClosed = errors.New("concord: session closed")

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
	// Expired: the session has ended: its deadline passed, the server said
	// the lease is gone or refused its renewal, or it was closed. Done is
	// closed and Err says why.
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
//
// A session ends once, for one reason, and stays ended: Done closes, State
// reports Expired and Err says why. It ends when its local deadline passes
// with no keep-alive answered since (whatever the failures were: a cluster
// that does not answer, 503s, timeouts), when the server answers that the
// lease is gone or refuses the renewal (a 4xx reply), or when it is closed.
type Session struct {
	c   *Client
	id  int64
	ttl time.Duration
	mu  sync.Mutex
	// until is the conservative local deadline.
	until time.Time
	// err is why the session ended; nil while it holds its lease.
	err error
	// failed is the last renewal failure since the last success, and
	// waiting the send time of a renewal still unanswered (zero if none):
	// what err tells should the deadline pass.
	failed  error
	waiting time.Time
	done    chan struct{}
}

// NewSession grants a lease of ttl (whole seconds, at least 1) and keeps it
// alive at about ttl/3 with jitter. Sessions of one Client share batched
// keep-alive requests: keepalive_many, up to schema.MaxKeepAliveMany leases
// each.
func (c *Client) NewSession(ctx context.Context, ttl time.Duration) (*Session, error) {
	secs := int64(ttl / time.Second)
	if secs < 1 {
		secs = 1
	}
	sent := time.Now()
	req := schema.LeaseGrantRequest{TTL: secs}
	key := nuid.Next()
	var g schema.LeaseGrantReply
	if err := c.callKeyed(ctx, subjects.LeaseGrant, req, key, &g); err != nil {
		if errors.Is(err, ErrOutcomeUnknown) {
			go c.revokeUnknownGrant(req, key)
		}
		return nil, err
	}
	s := &Session{c: c, id: g.ID, ttl: time.Duration(secs) * time.Second, until: sent.Add(time.Duration(secs) * time.Second), done: make(chan struct{})}
	c.keepAliver().add(s)
	return s, nil
}

// revokeUnknownGrant revokes the lease a session's grant may have made
// when the grant's outcome was unknown: it sends the grant again with the
// same idempotency key, which answers with the lease the first one made
// or makes it now, and revokes that lease. Each call retries by itself
// until it is answered; both give up once the lease's ttl has passed twice
// over (by then an unrenewed lease has expired anyway) or the client's
// connection is closed.
func (c *Client) revokeUnknownGrant(req schema.LeaseGrantRequest, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Duration(req.TTL)*time.Second+30*time.Second)
	defer cancel()
	var g schema.LeaseGrantReply
	if err := c.callKeyed(ctx, subjects.LeaseGrant, req, key, &g); err != nil {
		return // refused (so the first grant made nothing either), or given up
	}
	_, _ = c.Revoke(ctx, schema.LeaseRevokeRequest{ID: g.ID})
}

// Lease returns the session's lease id.
func (s *Session) Lease() int64 { return s.id }

// TTL returns the lease's ttl.
func (s *Session) TTL() time.Duration { return s.ttl }

// Done is closed when the session has lost its lease (or was closed); Err
// then says why.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err returns nil while the session holds its lease, and why it ended once
// it has. A lost lease matches ErrSessionExpired with errors.Is, and the
// cause too: ErrLeaseNotFound when the server no longer had the lease, the
// sentinel of the server's refusal (ErrInvalidRequest, ...), or, when the
// local deadline passed, the last renewal failure (ErrUnavailable, ...), if
// one failed rather than went unanswered. A closed session matches
// ErrSessionClosed.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checkDeadlineLocked(time.Now())
	return s.err
}

// State reports Safe, Jeopardy or Expired from the local deadline.
func (s *Session) State() SessionState {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.checkDeadlineLocked(now)
	switch {
	case s.err != nil:
		return Expired
	case s.until.Sub(now) <= s.ttl/3:
		return Jeopardy
	}
	return Safe
}

// Deadline returns the local deadline: unless the session has ended (Err),
// the lease is held at least until then.
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
	s.end(ErrSessionClosed)
	_, err := s.c.Revoke(ctx, schema.LeaseRevokeRequest{ID: s.id})
	if err != nil && !errorsIsLeaseNotFound(err) {
		return err
	}
	return nil
}

// renewed moves the local deadline to sent+ttl after a keep-alive sent at
// sent succeeded. It reports false, and moves nothing, for a session that
// has ended or whose deadline passed before the answer came: a session
// reported Expired never comes back.
func (s *Session) renewed(sent time.Time, ttl int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.checkDeadlineLocked(time.Now()); s.err != nil {
		return false
	}
	if until := sent.Add(time.Duration(ttl) * time.Second); until.After(s.until) {
		s.until = until
	}
	s.failed, s.waiting = nil, time.Time{}
	return true
}

// renewing records that a renewal was sent at sent.
func (s *Session) renewing(sent time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting = sent
}

// renewFailed remembers a failed renewal that did not end the session.
func (s *Session) renewFailed(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.failed, s.waiting = err, time.Time{}
	}
}

// end ends the session for err and closes Done, unless it has ended
// already: the first reason stays.
func (s *Session) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endLocked(err)
}

func (s *Session) endLocked(err error) {
	if s.err == nil {
		s.err = err
		close(s.done)
	}
}

// deadline returns the local deadline and whether the session has not
// ended (by its own account: it may have passed the deadline unread).
func (s *Session) deadline() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.until, s.err == nil
}

// ended reports whether the session has ended, ending it first if its
// deadline has passed.
func (s *Session) ended(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checkDeadlineLocked(now)
	return s.err != nil
}

// checkDeadlineLocked ends the session if its local deadline is not after
// now. Every reader of the state calls it, so the session never reads as
// held past its deadline, however late the keep-aliver's timer fires.
func (s *Session) checkDeadlineLocked(now time.Time) {
	if s.err != nil || now.Before(s.until) {
		return
	}
	why := fmt.Sprintf("lease %d: its local deadline passed: no keep-alive was answered within the ttl (%s) of the last answered one", s.id, s.ttl)
	if !s.waiting.IsZero() {
		why += fmt.Sprintf("; the renewal sent %s before the deadline had no answer", s.until.Sub(s.waiting).Round(time.Millisecond))
	}
	if s.failed != nil {
		s.endLocked(fmt.Errorf("%w: %s; last failure: %w", ErrSessionExpired, why, s.failed))
		return
	}
	s.endLocked(fmt.Errorf("%w: %s", ErrSessionExpired, why))
}

// Renewal requests. A request names at most renewBatch leases: the
// server's documented limit for keepalive_many, schema.MaxKeepAliveMany,
// since it answers a longer list with 400 invalid_request and renews none
// of it. The limit is a constant of the wire contract, the same on every
// node, so there is nothing to ask the server. A full answer is at most
// about 970 KB (97 bytes a lease with the longest ids and ttls), within
// the max_payload Concord needs of its NATS (1 MiB and more).
//
// renewInFlight bounds the requests of one round sent at once: enough that
// a client with a hundred thousand sessions (ten requests) renews them all
// well inside the interval, few enough that one client does not fill the
// leader's worker pool or its connection with near-megabyte replies.
const (
	renewBatch    = schema.MaxKeepAliveMany
	renewInFlight = 4
)

// keepAliver renews every session of a client, all at each interval (the
// smallest ttl/3 of its sessions), in keepalive_many requests of at most
// renewBatch leases sent concurrently. A request that fails is retried
// until its sessions' local deadlines: a failure that does not end them is
// remembered, for the error they end with should the deadline pass.
type keepAliver struct {
	c        *Client
	batch    int
	mu       sync.Mutex
	sessions map[int64]*Session
	// interval is the smallest ttl/3 of the sessions, as of the last round
	// and the sessions added since; 0 when there were none.
	interval time.Duration
	wake     chan struct{}
	quit     chan struct{}
	wg       sync.WaitGroup
}

func (c *Client) keepAliver() *keepAliver {
	c.kaMu.Lock()
	defer c.kaMu.Unlock()
	if c.ka == nil {
		batch := renewBatch
		if c.renewBatch > 0 {
			batch = c.renewBatch
		}
		c.ka = &keepAliver{c: c, batch: batch, sessions: map[int64]*Session{}, wake: make(chan struct{}, 1), quit: make(chan struct{})}
		c.ka.wg.Add(1)
		go c.ka.run()
	}
	return c.ka
}

// add starts renewing s. It wakes the loop only for a first session or a
// shorter interval: any other session added mid-interval is renewed by the
// next round, well before its deadline, and adding many sessions does not
// make the loop scan them all for each.
func (k *keepAliver) add(s *Session) {
	k.mu.Lock()
	k.sessions[s.id] = s
	first := len(k.sessions) == 1
	shorter := k.interval == 0 || s.ttl/3 < k.interval
	if shorter {
		k.interval = s.ttl / 3
	}
	k.mu.Unlock()
	if first || shorter {
		select {
		case k.wake <- struct{}{}:
		default:
		}
	}
}

func (k *keepAliver) remove(s *Session) {
	k.mu.Lock()
	delete(k.sessions, s.id)
	k.mu.Unlock()
}

// stop ends the loop and the round in flight, then ends every session the
// keep-aliver held: nothing renews them any more.
func (k *keepAliver) stop() {
	close(k.quit)
	k.wg.Wait()
	k.mu.Lock()
	defer k.mu.Unlock()
	for id, s := range k.sessions {
		s.end(fmt.Errorf("%w: lease %d: the client was closed, which stops its sessions' keep-alives (the lease was not revoked)", ErrSessionClosed, id))
		delete(k.sessions, id)
	}
}

// run starts a round at each interval (shortened by up to a fifth, at
// random, so that many clients spread their renewals), one at a time, and
// ends sessions at their local deadlines while rounds run.
func (k *keepAliver) run() {
	defer k.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var (
		next      time.Time     // when the next round may start
		roundDone chan struct{} // open while a round runs
	)
	for {
		k.mu.Lock()
		n := len(k.sessions)
		k.mu.Unlock()
		wait := time.Hour
		if n > 0 && roundDone == nil {
			wait = time.Until(next)
		}
		if first, ok := k.firstDeadline(); ok {
			wait = min(wait, time.Until(first))
		}
		timer.Reset(max(wait, 0))
		select {
		case <-k.quit:
			cancel()
			if roundDone != nil {
				<-roundDone
			}
			return
		case <-k.wake:
			// A first session, or a shorter interval: the next round
			// comes no later than one of the new intervals from now. With
			// no sessions before, next is from the past: no round is due.
			k.mu.Lock()
			soon := time.Now().Add(jitter(k.interval))
			k.mu.Unlock()
			if n == 0 || soon.Before(next) {
				next = soon
			}
			continue
		case <-roundDone:
			roundDone = nil
			continue
		case <-timer.C:
		}
		now := time.Now()
		k.endDue(now)
		if roundDone == nil && n > 0 && !now.Before(next) {
			ids, interval := k.due(now)
			next = now.Add(jitter(interval))
			if len(ids) > 0 {
				done := make(chan struct{})
				roundDone = done
				go func() {
					defer close(done)
					k.round(ctx, ids)
				}()
			}
		}
	}
}

// jitter shortens an interval by up to a fifth, at random.
func jitter(d time.Duration) time.Duration { return d - rand.N(d/5+1) }

// due returns the ids of the sessions to renew and the interval they need,
// forgetting sessions that have ended.
func (k *keepAliver) due(now time.Time) ([]int64, time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	ids := make([]int64, 0, len(k.sessions))
	interval := time.Duration(0)
	for id, s := range k.sessions {
		if s.ended(now) {
			delete(k.sessions, id)
			continue
		}
		ids = append(ids, id)
		if interval == 0 || s.ttl/3 < interval {
			interval = s.ttl / 3
		}
	}
	k.interval = interval
	return ids, interval
}

// round renews ids in requests of at most k.batch, renewInFlight at a
// time. Each request is retried (by the client's retry loop) until the
// earliest local deadline of the sessions it names, after which its answer
// could not keep them: a slow cluster that answers late still answers in
// time, where giving up at the next round would start the same slow
// requests over and over. The next round waits for this one to end, so two
// never renew the same sessions at once.
func (k *keepAliver) round(ctx context.Context, ids []int64) {
	slots := make(chan struct{}, renewInFlight)
	var wg sync.WaitGroup
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), k.batch)]
		ids = ids[len(chunk):]
		wg.Add(1)
		go func() {
			defer wg.Done()
			first, ok := k.firstDeadlineOf(chunk)
			if !ok {
				return // every session it named has ended
			}
			ctx, cancel := context.WithDeadline(ctx, first)
			defer cancel()
			select {
			case slots <- struct{}{}:
				defer func() { <-slots }()
				k.renew(ctx, chunk)
			case <-ctx.Done():
				k.failed(chunk, fmt.Errorf("keepalive_many of %d leases not sent: %d requests before it were still waiting for answers: %w", len(chunk), renewInFlight, ctx.Err()))
			}
		}()
	}
	wg.Wait()
}

// firstDeadlineOf returns the earliest local deadline of the sessions of
// ids still held.
func (k *keepAliver) firstDeadlineOf(ids []int64) (time.Time, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var first time.Time
	ok := false
	for _, id := range ids {
		if s := k.sessions[id]; s != nil {
			if d, held := s.deadline(); held && (!ok || d.Before(first)) {
				first, ok = d, true
			}
		}
	}
	return first, ok
}

// renew sends one keepalive_many for ids and tells each session the
// outcome. A refusal (the server's 4xx, or a request NATS will never carry)
// ends the sessions it names; any other failure (503, no answer in time, a
// 500) is remembered, and the next round tries again.
func (k *keepAliver) renew(ctx context.Context, ids []int64) {
	sent := time.Now()
	k.each(ids, func(s *Session) { s.renewing(sent) })
	reply, err := k.c.KeepAliveMany(ctx, schema.LeaseKeepAliveManyRequest{IDs: ids})
	if err != nil {
		if refused(err) {
			k.each(ids, func(s *Session) {
				s.end(fmt.Errorf("%w: lease %d: keepalive_many of %d leases was refused: %w", ErrSessionExpired, s.id, len(ids), err))
			})
			return
		}
		k.failed(ids, fmt.Errorf("keepalive_many of %d leases: %w", len(ids), err))
		return
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
			s.end(fmt.Errorf("%w: lease %d: %w", ErrSessionExpired, id,
				fromWire(schema.Errorf(schema.ErrLeaseNotFound, "keepalive_many found no lease %d: it expired or was revoked", id))))
		}
	}
}

// refused reports whether a renewal's error is final: the server's answer
// to this request (a 4xx; not a 503, which asks to retry, nor a 500), or a
// request that NATS will never carry.
func refused(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Code >= 400 && e.Code < 500
	}
	return errors.Is(err, ErrPermissionDenied) || errors.Is(err, nats.ErrMaxPayload)
}

// failed tells the sessions of ids about a renewal failure that does not
// end them.
func (k *keepAliver) failed(ids []int64, err error) {
	k.each(ids, func(s *Session) { s.renewFailed(err) })
}

// each calls f with the session of each id still renewed.
func (k *keepAliver) each(ids []int64, f func(*Session)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, id := range ids {
		if s := k.sessions[id]; s != nil {
			f(s)
		}
	}
}

// firstDeadline returns the earliest local deadline of the sessions still
// held.
func (k *keepAliver) firstDeadline() (time.Time, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var first time.Time
	ok := false
	for _, s := range k.sessions {
		if d, held := s.deadline(); held && (!ok || d.Before(first)) {
			first, ok = d, true
		}
	}
	return first, ok
}

// endDue ends the sessions whose local deadline has passed, so that Done
// closes on time without anyone reading State, and forgets ended ones.
func (k *keepAliver) endDue(now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for id, s := range k.sessions {
		if s.ended(now) {
			delete(k.sessions, id)
		}
	}
}
