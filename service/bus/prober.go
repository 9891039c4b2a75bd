package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// probeTimeout bounds one P.cluster.nodes probe with no answer at all.
const probeTimeout = 2 * time.Second

// probeGather is how long a probe keeps collecting answers after the last
// one: every node answers P.cluster.nodes.
const probeGather = 300 * time.Millisecond

// Prober asks the bus which nodes answer P.cluster.nodes, and asks one
// node for its report. Its probes' reply subjects are under a prefix of
// its own, which the node's own node-info responder leaves unanswered
// (OwnProbe), so a probe hears only the other nodes.
type Prober struct {
	nc     *nats.Conn
	names  subjects.Names
	prefix string
}

// NewProber returns a prober that asks on nc under names.
func NewProber(nc *nats.Conn, names subjects.Names) *Prober {
	return &Prober{nc: nc, names: names, prefix: nats.NewInbox()}
}

// OwnProbe reports whether reply is the reply subject of one of this
// prober's probes.
func (p *Prober) OwnProbe(reply string) bool {
	return strings.HasPrefix(reply, p.prefix+".")
}

// askAll asks every node on the bus, on P.cluster.nodes, for its report,
// with the answers going to inbox.
func (p *Prober) askAll(inbox string) error {
	if err := p.nc.PublishRequest(p.names.Nodes(), inbox, []byte(`{}`)); err != nil {
		return fmt.Errorf("ask %s: %w", p.names.Nodes(), err)
	}
	return nil
}

// probeResult is what one P.cluster.nodes probe heard.
type probeResult struct {
	// noResponders: the server knows of no subscriber anywhere on the bus.
	noResponders bool
	infos        []schema.NodeInfo
}

// foreign returns the first answer from a node of another cluster than
// ours ("" for a node that has none yet); nodes without a cluster are not
// foreign.
func (r probeResult) foreign(ours string) (schema.NodeInfo, bool) {
	for _, info := range r.infos {
		if info.ClusterID != "" && info.ClusterID != ours {
			return info, true
		}
	}
	return schema.NodeInfo{}, false
}

// Probe asks P.cluster.nodes once and collects the answers: until
// probeGather passes without a new one, or timeout with none. The request
// goes out with a reply subject under the prober's prefix, which this node's own
// node-info subscription does not answer, so only other nodes are heard.
func (p *Prober) Probe(timeout time.Duration) (probeResult, error) {
	return p.collect(timeout, 0)
}

// Listen asks P.cluster.nodes every `every` for span and collects
// every answer that arrives meanwhile, late ones included.
func (p *Prober) Listen(span, every time.Duration) (probeResult, error) {
	return p.collect(span, every)
}

// collect is Probe (every 0) and Listen.
func (p *Prober) collect(span, every time.Duration) (probeResult, error) {
	var r probeResult
	inbox := p.prefix + "." + nuid.Next()
	sub, err := p.nc.SubscribeSync(inbox)
	if err != nil {
		return r, fmt.Errorf("subscribe to the probe inbox: %w", err)
	}
	defer sub.Unsubscribe()
	if err := p.askAll(inbox); err != nil {
		return r, err
	}
	start := time.Now()
	deadline := start.Add(span)
	next := start.Add(every)
	for {
		wait := time.Until(deadline)
		if every > 0 {
			wait = min(wait, time.Until(next))
		} else if len(r.infos) > 0 {
			wait = min(wait, probeGather)
		}
		if wait <= 0 {
			if every > 0 && time.Now().Before(deadline) {
				if err := p.askAll(inbox); err != nil {
					return r, err
				}
				next = next.Add(every)
				continue
			}
			return r, nil
		}
		msg, err := sub.NextMsg(wait)
		if errors.Is(err, nats.ErrTimeout) {
			if every == 0 {
				return r, nil
			}
			continue
		}
		if errors.Is(err, nats.ErrNoResponders) || err == nil && isNoResponders(msg) {
			r.noResponders = true
			if every == 0 {
				return r, nil
			}
			continue
		}
		if err != nil {
			return r, fmt.Errorf("read answers to %s: %w", p.names.Nodes(), err)
		}
		info, err := parseNodeInfo(msg)
		if err != nil {
			continue // not a node report: says nothing about clusters
		}
		r.infos = append(r.infos, info)
	}
}

// otherLeader asks P.cluster.nodes whether a node other than self leads: true as
// soon as one says so; false on "no responders", or when timeout passes
// without such an answer.
func (p *Prober) otherLeader(ctx context.Context, timeout time.Duration, self string) bool {
	inbox := p.prefix + "." + nuid.Next()
	sub, err := p.nc.SubscribeSync(inbox)
	if err != nil {
		return false
	}
	defer sub.Unsubscribe()
	if err := p.askAll(inbox); err != nil {
		return false
	}
	deadline := time.Now().Add(timeout)
	for ctx.Err() == nil {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		msg, err := sub.NextMsg(min(left, 100*time.Millisecond))
		if errors.Is(err, nats.ErrTimeout) {
			continue
		}
		if err != nil || isNoResponders(msg) {
			return false
		}
		info, err := parseNodeInfo(msg)
		if err == nil && info.State == "leader" && info.ID != self {
			return true
		}
	}
	return false
}

// AskNode asks node id for its own report over the bus: an error
// reply, a body that does not decode, or another node's answer is an error.
func (p *Prober) AskNode(id string, req schema.NodeInfoRequest, timeout time.Duration) (*schema.NodeInfo, error) {
	body, _ := json.Marshal(req)
	msg, err := p.nc.Request(p.names.NodeInfo(id), body, timeout)
	if err != nil {
		return nil, fmt.Errorf("ask node %s for its node info: %w", id, err)
	}
	info, err := parseNodeInfo(msg)
	if err != nil {
		return nil, fmt.Errorf("ask node %s for its node info: %w", id, err)
	}
	if info.ID != id {
		return nil, fmt.Errorf("ask node %s for its node info: node %q answered", id, info.ID)
	}
	return &info, nil
}

// parseNodeInfo reads one node's answer on a node-info subject: its
// report, or an error for an error reply or a body that does not decode.
// Point questions (AskNode) and the bus probes, which collect every
// node's answer to one P.cluster.nodes request (Probe, Listen), read
// answers through it.
func parseNodeInfo(msg *nats.Msg) (schema.NodeInfo, error) {
	var info schema.NodeInfo
	if e := ParseErrorReply(msg); e != nil {
		return info, fmt.Errorf("%s: %s", e.Name, e.Description)
	}
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		return info, err
	}
	return info, nil
}

// ParseErrorReply decodes an error reply, or returns nil for a success.
func ParseErrorReply(m *nats.Msg) *schema.Error {
	if m.Header.Get(schema.HeaderErrorCode) == "" {
		return nil
	}
	var er schema.ErrorReply
	if err := json.Unmarshal(m.Data, &er); err != nil || er.Error == nil {
		return schema.Errorf(schema.ErrInternal, "undecodable error reply %q", m.Data)
	}
	return er.Error
}

// isNoResponders reports the status message a NATS server sends to a
// request's reply subject when nothing on the bus subscribes to its subject.
func isNoResponders(m *nats.Msg) bool {
	return len(m.Data) == 0 && m.Header.Get("Status") == "503"
}
