package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	sel     watchSelection
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
	sel := watchSelection{key: key, prefix: prefix}
	subject := c.names.Watch(key)
	if prefix {
		subject = c.tokenSubject(key)
	}
	return c.watch(ctx, sel, subject, fromRevision)
}

// WatchRange is Watch for the keys in the byte-wise, half-open range
// [start, end) (end "" means to the end of the keyspace), as GetRange
// reads them: the range [svc., svc/) is every key under "svc." and no
// other. It listens on the narrowest watch subject that holds every key of
// the range (the tokens start and end share), and takes the events
// themselves from the change log, which filters by the range.
func (c *Client) WatchRange(ctx context.Context, start, end string, fromRevision int64) (*Watcher, error) {
	sel := watchSelection{key: start, isRange: true, rangeEnd: end}
	return c.watch(ctx, sel, c.tokenSubject(rangeTokens(start, end)), fromRevision)
}

// watchSelection is what a Watcher asks the change log for: one key, a
// prefix, or the range [key, rangeEnd) ("" meaning no end).
type watchSelection struct {
	key      string
	prefix   bool
	isRange  bool
	rangeEnd string
}

// tokenSubject is the watch subject of every key starting with prefix:
// P.watch.<prefix>> when prefix ends a token, else every watch subject
// (the change log then filters).
func (c *Client) tokenSubject(prefix string) string {
	if prefix == "" || prefix[len(prefix)-1] != '.' {
		return c.names.WatchAll()
	}
	return c.names.Watch(prefix + ">")
}

// rangeTokens is the longest run of whole tokens ("a.b.", or "") that
// every key in [start, end) starts with. Such a key starts with the bytes
// p that start and end share: differing from them at an earlier byte, it
// would sort before start or from end on. When end is p and one byte, the
// successor of start's byte after p (the range [svc., svc/)), the key has
// start's byte there too: a larger one sorts from end on. Without an end,
// nothing is shared.
func rangeTokens(start, end string) string {
	if end == "" {
		return ""
	}
	n := 0
	for n < len(start) && n < len(end) && start[n] == end[n] {
		n++
	}
	if n < len(start) && len(end) == n+1 && end[n] == start[n]+1 {
		n++
	}
	return start[:strings.LastIndexByte(start[:n], '.')+1]
}

// watch starts a Watcher of sel that listens on subject.
func (c *Client) watch(ctx context.Context, sel watchSelection, subject string, fromRevision int64) (*Watcher, error) {
	w := &Watcher{c: c, events: make(chan schema.Event, 256), done: make(chan struct{}), signal: make(chan struct{}, 1),
		sel: sel, nextRev: fromRevision, nextOp: -1}
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
		switch {
		case w.sel.isRange:
			req.RangeStart = &w.sel.key
			if w.sel.rangeEnd != "" {
				req.RangeEnd = &w.sel.rangeEnd
			}
		case w.sel.prefix:
			req.Prefix = &w.sel.key
		default:
			req.Key = &w.sel.key
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
