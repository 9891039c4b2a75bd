package service

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// publisher sends watch events from one goroutine, in the order the state
// machine applied them, so every subscriber sees revisions in order. Only
// the leader publishes; enabled is switched with leadership.
type publisher struct {
	nc      *nats.Conn
	names   subjects.Names
	log     *slog.Logger
	ch      chan []schema.Event
	enabled atomic.Bool
	// published counts events handed to NATS.
	published prometheus.Counter
	done      chan struct{} // closed when run returns
}

func newPublisher(nc *nats.Conn, names subjects.Names, log *slog.Logger, published prometheus.Counter) *publisher {
	// The buffer absorbs bursts; when it is full, Apply waits, which slows
	// writers rather than dropping events.
	return &publisher{nc: nc, names: names, log: log, published: published, ch: make(chan []schema.Event, 4096), done: make(chan struct{})}
}

// enqueue is called by the state machine in log order.
func (p *publisher) enqueue(events []schema.Event) {
	if !p.enabled.Load() {
		return
	}
	select {
	case p.ch <- events:
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
			for i := range batch {
				ev := &batch[i]
				buf = ev.AppendJSON(buf[:0])
				msg.Subject = p.names.Watch(ev.Key)
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
