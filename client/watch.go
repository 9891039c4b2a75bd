package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
)

// Watcher delivers the events of a key or a prefix in revision order, with
// no gaps and no duplicates, across reconnects and leader changes.
//
// Watch events on NATS are at most once, and a prefix's events do not
// number densely (other keys take revisions in between), so a missing
// event cannot be told from the live stream alone. The watcher therefore
// treats live events as a signal and delivers from the change log
// (P.kv.changes), which is ordered and complete: every live event, every
// reconnect and a periodic poll make it read the log from the last event
// it delivered. Events are identified by (revision, op_index).
type Watcher struct {
	c       *Client
	events  chan schema.Event
	err     error
	done    chan struct{}
	signal  chan struct{}
	key     string
	prefix  bool
	nextRev int64
	nextOp  int
}

// pollInterval bounds how late an event whose live message was lost is
// delivered.
const pollInterval = time.Second

// Watch starts watching key (or every key starting with it when prefix is
// true) after fromRevision: the first event delivered has a revision above
// it. It ends when ctx ends, or with Err() == ErrCompacted when the change
// log no longer holds what the watcher needs; then read the current state
// and watch again from its revision. When NATS refuses the subscription or
// a change log request, it ends with Err() matching ErrPermissionDenied.
func (c *Client) Watch(ctx context.Context, key string, prefix bool, fromRevision int64) (*Watcher, error) {
	w := &Watcher{c: c, events: make(chan schema.Event, 256), done: make(chan struct{}), signal: make(chan struct{}, 1),
		key: key, prefix: prefix, nextRev: fromRevision, nextOp: -1}
	subject := c.names.Watch(key)
	if prefix {
		subject = c.names.Watch(key + ">")
		if key == "" || key[len(key)-1] != '.' {
			// A prefix that ends inside a token: listen to everything and
			// let the change log filter.
			subject = c.names.WatchAll()
		}
	}
	// NATS refuses a subscription asynchronously: the watcher ends with
	// ErrPermissionDenied when it hears of it, whatever it is doing.
	wctx, cancel := context.WithCancel(ctx)
	dw := &denialWaiter{subscribe: subject, fire: cancel}
	stop := c.denied.add(dw)
	sub, err := c.nc.Subscribe(subject, func(*nats.Msg) { w.poke() })
	if err != nil {
		stop()
		cancel()
		return nil, fmt.Errorf("subscribe %s: %w", subject, err)
	}
	go func() {
		defer stop()
		defer cancel()
		err := w.run(wctx, sub)
		if denied := c.denied.refused(dw); denied != nil {
			err = fmt.Errorf("watch %s: %w", subject, denied)
		}
		w.err = err
		close(w.events)
		close(w.done)
	}()
	return w, nil
}

// Events returns the channel of events; it is closed when the watcher ends.
func (w *Watcher) Events() <-chan schema.Event { return w.events }

// Err returns why the watcher ended (after Events is closed).
func (w *Watcher) Err() error {
	<-w.done
	return w.err
}

func (w *Watcher) poke() {
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

// run delivers events until ctx ends or catching up fails, and returns why.
func (w *Watcher) run(ctx context.Context, sub *nats.Subscription) error {
	defer sub.Unsubscribe()
	poll := time.NewTicker(pollInterval)
	defer poll.Stop()
	w.poke() // read the backlog at once
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.signal:
		case <-poll.C:
		}
		if err := w.catchUp(ctx); err != nil {
			return err
		}
	}
}

// catchUp reads the change log from the last delivered event until it has
// read everything the leader has.
func (w *Watcher) catchUp(ctx context.Context) error {
	for {
		req := schema.KVChangesRequest{AfterRevision: w.nextRev, Limit: 1000}
		if w.prefix {
			req.Prefix = &w.key
		} else {
			req.Key = &w.key
		}
		if w.nextOp >= 0 {
			req.AfterOpIndex = Ptr(w.nextOp)
		}
		r, err := w.c.Changes(ctx, req)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, ErrUnavailable) {
				return nil // no leader for now: again on the next signal or poll
			}
			return err // compacted, a bad key, a closed connection: the end
		}
		for _, e := range r.Events {
			select {
			case w.events <- e:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		w.nextRev, w.nextOp = r.NextRevision, r.NextOpIndex
		if !r.More {
			return nil
		}
	}
}
