package service

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// publisher sends watch events from one goroutine, in the order the state
// machine applied them, so every subscriber sees revisions in order.
//
// An event goes out once. The rule: a node publishes the changes of the
// entries appended in the term it leads, and only while it leads it. Every
// term has one leader, so no change is published by two nodes; and a change
// this node applies again (the log replayed after a restart, or entries of
// an older term that it applies once it leads) was appended in an older
// term, so it is not published again. The price is that a change of an
// older term that its leader did not live to publish goes out from no
// node: a watcher sees the gap in the revisions of the next event and
// fills it from kv.changes (client.Watch does).
type publisher struct {
	nc    *nats.Conn
	names subjects.Names
	log   *slog.Logger
	ch    chan tenantEvents
	// term is the Raft term this node leads and publishes the entries of;
	// 0 while it publishes nothing.
	term atomic.Uint64
	// published counts events handed to NATS.
	published prometheus.Counter
	done      chan struct{} // closed when run returns
}

// tenantEvents are the events of one entry, and their tenant's: a
// tenant's go to its own subjects (subjects.Names.TenantWatch).
type tenantEvents struct {
	tenant string
	events []schema.Event
}

func newPublisher(nc *nats.Conn, names subjects.Names, log *slog.Logger, published prometheus.Counter) *publisher {
	// The buffer absorbs bursts; when it is full, Apply waits, which slows
	// writers rather than dropping events.
	return &publisher{nc: nc, names: names, log: log, published: published, ch: make(chan tenantEvents, 4096), done: make(chan struct{})}
}

// lead makes the publisher send the events of entries appended in term.
func (p *publisher) lead(term uint64) { p.term.Store(term) }

// stop makes the publisher send nothing more.
func (p *publisher) stop() { p.term.Store(0) }

// enqueue is called by the state machine in log order with the events of
// tenant of an entry appended in term.
func (p *publisher) enqueue(term uint64, tenant string, events []schema.Event) {
	if t := p.term.Load(); t == 0 || t != term {
		return
	}
	select {
	case p.ch <- tenantEvents{tenant, events}:
	case <-p.done:
	}
}

func (p *publisher) run(ctx context.Context) {
	defer close(p.done)
	// One message, header map and buffer serve every event: PublishMsg
	// copies them into the connection's buffer before it returns.
	msg := &nats.Msg{Header: nats.Header{schema.HeaderRevision: {""}, schema.HeaderOperation: {""}}}
	var buf []byte
	for {
		select {
		case <-ctx.Done():
			return
		case batch := <-p.ch:
			for i := range batch.events {
				ev := &batch.events[i]
				buf = ev.AppendJSON(buf[:0])
				if batch.tenant == fsm.DefaultTenant {
					msg.Subject = p.names.Watch(ev.Key)
				} else {
					msg.Subject = p.names.TenantWatch(batch.tenant, ev.Key)
				}
				msg.Header[schema.HeaderRevision][0] = strconv.FormatInt(ev.Revision, 10)
				msg.Header[schema.HeaderOperation][0] = ev.Operation()
				msg.Data = buf
				if err := p.nc.PublishMsg(msg); err != nil {
					p.log.Warn("publish watch event", "key", ev.Key, "revision", ev.Revision, "err", err)
					continue
				}
				p.published.Inc()
			}
		}
	}
}
