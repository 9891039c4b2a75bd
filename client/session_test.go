package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service"
)

// ownService starts a node of the test's own, so that many leases or a
// stopped node leave the shared one alone. The test owns it: cleanup
// closes it (Close twice is harmless).
func ownService(t *testing.T) (*service.Service, *client.Client) {
	t.Helper()
	svc, err := startService(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	c, err := client.Connect(client.URL(svc.NATSURL()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return svc, c
}

// newSessions opens n sessions of ttl on c, a few at a time.
func newSessions(t *testing.T, c *client.Client, n int, ttl time.Duration) []*client.Session {
	t.Helper()
	const workers = 64
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sessions := make([]*client.Session, n)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				s, err := c.NewSession(ctx, ttl)
				if err != nil {
					errs <- fmt.Errorf("session %d of %d: %w", i, n, err)
					return
				}
				sessions[i] = s
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return sessions
}

// closed reports whether ch is closed, without waiting.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// One client holds more sessions than one keepalive_many may renew: its
// renewals go in several requests, and every session stays held, renewed,
// across several intervals.
func TestManySessionsStayHeld(t *testing.T) {
	_, c := ownService(t)
	const (
		n = 25_000 // two and a half requests' worth
		// Short, so that the test watches several intervals quickly; long
		// enough that a round of three 10,000-lease requests has seconds
		// to be answered under the race detector on a busy machine.
		ttl = 5 * time.Second
	)
	start := time.Now()
	sessions := newSessions(t, c, n, ttl)
	opened := time.Now()
	t.Logf("%d sessions opened in %s", n, opened.Sub(start).Round(time.Millisecond))

	// Watch them for more than a ttl after the last was opened: every
	// deadline the grants set passes meanwhile, so only renewals keep
	// them held.
	for watchUntil := opened.Add(ttl + ttl/2); time.Now().Before(watchUntil); time.Sleep(200 * time.Millisecond) {
		for _, s := range sessions {
			if err := s.Err(); err != nil {
				t.Fatalf("session %d ended: %v", s.Lease(), err)
			}
			if closed(s.Done()) || s.State() == client.Expired {
				t.Fatalf("session %d reads expired with no error", s.Lease())
			}
		}
	}
	now := time.Now()
	for _, s := range sessions {
		// The grant's deadline was at most opened+ttl, which has passed.
		if d := s.Deadline(); !d.After(now) {
			t.Fatalf("session %d: deadline %s is not ahead: it was not renewed", s.Lease(), now.Sub(d))
		}
	}
	// The server holds every lease.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held := map[int64]bool{}
	for after := int64(0); ; {
		page, err := c.LeaseList(ctx, schema.LeaseListRequest{Limit: schema.MaxListLimit, After: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range page.Leases {
			held[l.ID] = true
			after = l.ID
		}
		if !page.More {
			break
		}
	}
	for _, s := range sessions {
		if !held[s.Lease()] {
			t.Fatalf("the server has no lease %d", s.Lease())
		}
	}
}

// A lease revoked behind its session's back ends that session, at its next
// renewal, with an error that says so; the other sessions renewed in the
// same request stay held.
func TestRenewalNotFoundEndsThatSession(t *testing.T) {
	_, c := ownService(t)
	const ttl = 3 * time.Second
	sessions := newSessions(t, c, 3, ttl)
	victim := sessions[1]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Revoke(ctx, schema.LeaseRevokeRequest{ID: victim.Lease()}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-victim.Done():
	case <-time.After(ttl + 5*time.Second): // a renewal comes every ttl/3
		t.Fatal("the session of a revoked lease did not end")
	}
	err := victim.Err()
	if !errors.Is(err, client.ErrSessionExpired) || !errors.Is(err, client.ErrLeaseNotFound) || !strings.Contains(err.Error(), fmt.Sprint(victim.Lease())) {
		t.Fatalf("the revoked session's error: %v", err)
	}
	if st := victim.State(); st != client.Expired {
		t.Fatalf("the revoked session reads %s", st)
	}
	t.Logf("revoked: %v", err)
	// The others outlive the grant's deadline, renewed.
	time.Sleep(ttl + ttl/3)
	for _, s := range []*client.Session{sessions[0], sessions[2]} {
		if err := s.Err(); err != nil || s.State() == client.Expired || closed(s.Done()) {
			t.Fatalf("session %d beside the revoked one: %s, %v", s.Lease(), s.State(), err)
		}
	}
}

// A keepalive_many the server refuses (here one naming more leases than it
// renews at once) ends exactly the sessions it named, each with the
// server's reason; the session renewed by another request stays held.
func TestRefusedRenewalEndsTheSessionsItNamed(t *testing.T) {
	_, c := ownService(t)
	const ttl = 3 * time.Second
	client.SetRenewBatch(c, schema.MaxKeepAliveMany+1) // one request too many
	sessions := newSessions(t, c, schema.MaxKeepAliveMany+2, ttl)
	opened := time.Now()
	// Once all exist, a round sends one request of MaxKeepAliveMany+1
	// (refused) and one of 1 (renewed). Before that, rounds named fewer
	// and were renewed; a round that named exactly MaxKeepAliveMany+1 was
	// refused and left the last session alone. Either way, one is left.
	var held []*client.Session
	for giveUp := opened.Add(ttl + 10*time.Second); ; time.Sleep(100 * time.Millisecond) {
		held = held[:0]
		for _, s := range sessions {
			if !closed(s.Done()) {
				held = append(held, s)
			}
		}
		if len(held) <= 1 {
			break
		}
		if time.Now().After(giveUp) {
			t.Fatalf("%d sessions still held; want 1", len(held))
		}
	}
	if len(held) != 1 {
		t.Fatalf("%d sessions held; want the one renewed apart", len(held))
	}
	for _, s := range sessions {
		if s == held[0] {
			continue
		}
		err := s.Err()
		if !errors.Is(err, client.ErrSessionExpired) || !errors.Is(err, client.ErrInvalidRequest) || !strings.Contains(err.Error(), "keepalive_many") {
			t.Fatalf("session %d: %v", s.Lease(), err)
		}
		if s.State() != client.Expired {
			t.Fatalf("session %d ended (%v) but reads %s", s.Lease(), err, s.State())
		}
	}
	t.Logf("refused: %v", sessions[0].Err())
	// The one left is renewed past its grant's deadline.
	time.Sleep(time.Until(opened.Add(ttl + ttl/3)))
	if s := held[0]; s.Err() != nil || s.State() == client.Expired || !s.Deadline().After(opened.Add(ttl)) {
		t.Fatalf("the session renewed apart: %s, deadline %s, %v", s.State(), s.Deadline(), s.Err())
	}
}

// While the cluster does not answer, sessions stay held until their local
// deadlines and not one moment past them: no failure ends one early, and
// none reads as held late. Done closes at the deadline whether or not
// anyone asks, and Err says the deadline passed, with the last failure.
func TestSessionsEndAtTheirDeadlineWhenRenewalsTimeOut(t *testing.T) {
	svc, c := ownService(t)
	polled := append(newSessions(t, c, 50, 2*time.Second), newSessions(t, c, 50, 3*time.Second)...)
	waited := newSessions(t, c, 50, 2*time.Second)
	time.Sleep(1500 * time.Millisecond) // a renewal or two
	for _, s := range append(polled, waited...) {
		if err := s.Err(); err != nil {
			t.Fatalf("before the stop: %v", err)
		}
	}
	// Nobody reads the waited sessions' state: their Done must close by
	// the keep-aliver's own clock.
	doneAt := make([]time.Time, len(waited))
	var wg sync.WaitGroup
	for i, s := range waited {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-s.Done():
				doneAt[i] = time.Now()
			case <-time.After(time.Minute):
			}
		}()
	}

	svc.Close() // keep-alives fail from now on
	for giveUp := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		left := 0
		for _, s := range polled {
			before := time.Now()
			st := s.State()
			// The deadline only moves later, so one read after State
			// bounds the deadline State judged by.
			if d := s.Deadline(); st != client.Expired && before.After(d) {
				t.Fatalf("session %d reads %s %s after its local deadline", s.Lease(), st, before.Sub(d))
			}
			d := s.Deadline()
			ended, err := closed(s.Done()), s.Err()
			if after := time.Now(); (ended || err != nil) && after.Before(d) {
				t.Fatalf("session %d ended %s before its local deadline: %v", s.Lease(), d.Sub(after), err)
			}
			if !ended {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(giveUp) {
			t.Fatalf("%d sessions still held 30s after the cluster stopped", left)
		}
	}
	wg.Wait()
	for _, s := range polled {
		// It says the deadline passed, and what became of the renewals.
		if err := s.Err(); !errors.Is(err, client.ErrSessionExpired) || !strings.Contains(err.Error(), "local deadline") ||
			!strings.Contains(err.Error(), "had no answer") && !strings.Contains(err.Error(), "last failure") {
			t.Fatalf("session %d: %v", s.Lease(), err)
		}
	}
	for i, s := range waited {
		if doneAt[i].IsZero() {
			t.Fatalf("session %d: Done did not close", s.Lease())
		}
		if late := doneAt[i].Sub(s.Deadline()); late > 2*time.Second {
			t.Fatalf("session %d: Done closed %s after the local deadline", s.Lease(), late)
		}
		if !errors.Is(s.Err(), client.ErrSessionExpired) {
			t.Fatalf("session %d: %v", s.Lease(), s.Err())
		}
	}
	t.Logf("timed out: %v", polled[0].Err())
}

// Closing the client stops its keep-alives: its sessions end with
// ErrSessionClosed rather than wait unrenewed for their deadlines.
func TestClientCloseEndsItsSessions(t *testing.T) {
	c, err := client.Connect(client.URL(serverURL))
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.NewSession(context.Background(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if s.Err() != nil || s.State() != client.Safe {
		t.Fatalf("a new session: %s, %v", s.State(), s.Err())
	}
	c.Close()
	if !closed(s.Done()) || !errors.Is(s.Err(), client.ErrSessionClosed) || s.State() != client.Expired {
		t.Fatalf("after the client closed: done %v, %s, %v", closed(s.Done()), s.State(), s.Err())
	}
}

// A cluster that stops answering for less than a ttl costs no session:
// the renewals that fail meanwhile are retried until one is answered.
func TestSessionsOutliveAShortOutage(t *testing.T) {
	dir := t.TempDir()
	svc, err := startService(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	u, err := url.Parse(svc.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Connect(client.URL(svc.NATSURL()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	// Renewals every ttl/3: the outage spans one at least, and leaves
	// the rest of the ttl for the node to come back.
	const (
		ttl    = 12 * time.Second
		outage = ttl/3 + 200*time.Millisecond
	)
	sessions := newSessions(t, c, 20, ttl)
	svc.Close()
	down := time.Now()
	time.Sleep(outage)
	// The same node on the same address: the client reconnects, and the
	// lease clock stood still while no node led, so the leases are there.
	svc, err = startServiceAt(dir, u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	t.Logf("the node was down %s", time.Since(down).Round(time.Millisecond))
	for giveUp := time.Now().Add(ttl); ; time.Sleep(50 * time.Millisecond) {
		renewed := 0
		for _, s := range sessions {
			if err := s.Err(); err != nil {
				t.Fatalf("session %d ended over an outage shorter than its ttl: %v", s.Lease(), err)
			}
			// Its deadline is past any the last renewal before the
			// outage could have given.
			if s.Deadline().After(down.Add(ttl)) {
				renewed++
			}
		}
		if renewed == len(sessions) {
			break
		}
		if time.Now().After(giveUp) {
			t.Fatalf("%d of %d sessions renewed since the node came back", renewed, len(sessions))
		}
	}
}
