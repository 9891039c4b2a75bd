package client

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
)

// ErrPermissionDenied matches a call that NATS refused: the connection's
// user may not publish to the request subject, or may not subscribe to the
// subject a watch or the replies need. Calls return it at once and do not
// retry, since no retry can succeed until the user's permissions change.
// The error also matches nats.ErrPermissionViolation and carries the
// server's words.
var ErrPermissionDenied = errors.New("permission denied")

// NATS tells a client about a refused publish or subscription only
// asynchronously, through the connection's error handler, as
// `Permissions Violation for Publish to "SUBJECT"` (or `Subscription
// to`); the request itself would just time out. The client therefore
// watches the error handler and matches the subject to the calls it has in
// flight.
var violationRe = regexp.MustCompile(`(?i)permissions violation for (publish to|subscription to) "([^"]*)"`)

// denials matches the permission violations of a connection to the calls
// and watches that wait on them.
type denials struct {
	// inboxPrefix starts every reply subject of the connection; the reply
	// subscription nats.go makes for requests is inboxPrefix+"<id>.*".
	inboxPrefix string

	mu      sync.Mutex
	waiters map[*denialWaiter]struct{}
	last    error
	// replies is set when the reply subscription was refused: every
	// request would time out until nats.go subscribes again on a
	// reconnect. repliesAt is the reconnect count it belongs to.
	replies   error
	repliesAt uint64
}

// denialWaiter is one call or watch waiting for a refusal of its own
// subjects. fire is called (under denials.mu, so it must not block) when
// err is set.
type denialWaiter struct {
	publish   string // a refused publish to this subject
	subscribe string // a refused subscription to this subject
	replies   bool   // a refused reply subscription
	fire      func()
	err       error
}

// watchDenials hooks the connection's error handler; the handler that was
// set before still gets every error.
func (c *Client) watchDenials() {
	inbox := c.nc.NewInbox()
	c.denied = &denials{inboxPrefix: inbox[:strings.LastIndex(inbox, ".")+1], waiters: map[*denialWaiter]struct{}{}}
	prev := c.nc.ErrorHandler()
	d := c.denied
	c.nc.SetErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
		d.observe(nc, err)
		if prev != nil {
			prev(nc, sub, err)
		}
	})
}

// observe records a permission violation and wakes the waiters it refuses.
func (d *denials) observe(nc *nats.Conn, err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	denied := fmt.Errorf("%w: %w", ErrPermissionDenied, err)
	m := violationRe.FindStringSubmatch(err.Error())
	d.mu.Lock()
	defer d.mu.Unlock()
	d.last = denied
	if m == nil {
		return
	}
	publish := strings.EqualFold(m[1], "publish to")
	subject := m[2]
	replies := !publish && strings.HasPrefix(subject, d.inboxPrefix) && strings.HasSuffix(subject, ".*")
	if replies {
		d.replies, d.repliesAt = denied, nc.Stats().Reconnects
	}
	for w := range d.waiters {
		if w.err != nil {
			continue
		}
		if publish && w.publish == subject || !publish && w.subscribe == subject || replies && w.replies {
			w.err = denied
			if w.fire != nil {
				w.fire()
			}
		}
	}
}

// add registers w; the returned stop unregisters it and returns the
// refusal it saw, if any.
func (d *denials) add(w *denialWaiter) (stop func() error) {
	d.mu.Lock()
	d.waiters[w] = struct{}{}
	d.mu.Unlock()
	return func() error {
		d.mu.Lock()
		defer d.mu.Unlock()
		delete(d.waiters, w)
		return w.err
	}
}

// refused returns w's refusal so far.
func (d *denials) refused(w *denialWaiter) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return w.err
}

// repliesRefused returns the refusal of the reply subscription if it still
// stands: nats.go subscribes again only when it reconnects.
func (d *denials) repliesRefused(nc *nats.Conn) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.replies != nil && nc.Stats().Reconnects == d.repliesAt {
		return d.replies
	}
	return nil
}

// PermissionError returns the last permission violation NATS reported on
// the client's connection (matching ErrPermissionDenied), or nil. Calls
// and watches return their own refusals; this is for code that only sees
// a channel close, such as a loop over Observe.
func (c *Client) PermissionError() error {
	c.denied.mu.Lock()
	defer c.denied.mu.Unlock()
	return c.denied.last
}
