package bus

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/decode"
	"github.com/concord-io/concord/subjects"
)

// The standby: a node that cannot serve is never silent. Only the leader
// serves the request subjects (service/serving), so without it a restarting node
// (restoring its snapshot, replaying its log, waiting for an election)
// left clients with NATS "no responders", which looks the same as no
// cluster at all. The standby answers those requests with 503
// `unavailable` and what the node is doing (StandbyNode.Activity), from
// the moment the node is connected to NATS until it serves.
//
// It must never take a request that a serving node would have answered:
//
//   - It subscribes in a queue group of its own (standbyQueueGroup), not
//     the leader's "concord": NATS gives every request to one member of
//     each group, so the leader's group still gets every request, and of
//     all the nodes that stand by, one answers.
//   - It subscribes only while no other node is known to lead: as Raft
//     knows it once Raft runs, and before that (and while Raft knows no
//     leader) from the bus, where every node reports its Raft state on
//     P.cluster.nodes (probed at most every standbyProbeEvery; a leader
//     heard there counts for leaderHeardFor). In a cluster where two
//     healthy nodes serve, a restarting node hears their leader before it
//     subscribes, and never does.
//   - What reaches it (a leader elected a moment ago, which the standby
//     has not heard of yet, may have it too) it holds for standbyDelay
//     and then answers unless this node's own leader subscription was up
//     when it came. It answers even when another node leads by then: a
//     new leader gets only what was published after its subscription
//     reached the requester's server, so a request held here since
//     before may have reached no one else, and silence would cost its
//     requester a whole attempt timeout while the new leader's lease
//     clock runs (a keep-alive that cannot get through eats into its
//     lease). A requester keeps the first reply, so a serving leader,
//     which answers within the delay, wins; the 503 that follows it is
//     dropped.
//
// A 503 says nothing was changed, so the standby sends one only where that
// is true: for reads, and for writes while this node is the cluster's only
// member. Any other write may reach a leader too (NATS hands every request
// to the leader's queue group as well, and a leader cut off from this
// node's server gets it when the link heals), so it is answered 504
// outcome_unknown (standbyReply); the Go client retries it with the same
// idempotency key, which applies it once, and no node starts it after its
// deadline (decode.Deadline).
//
// Replies go only where the reply guard allows (service/serving/replyguard.go).

// standbyQueueGroup is the standby subscriptions' queue group.
const standbyQueueGroup = "concord-standby"

// standbyDelay is how long the standby holds a request before answering.
// It is well below the clients' attempt timeout (2 s in the Go client),
// so the 503 reaches them within the attempt.
const standbyDelay = 250 * time.Millisecond

// standbyMaxPending bounds the requests held at once; beyond it a request
// is dropped (its requester times out and retries), so a flood during a
// restart costs bounded memory.
const standbyMaxPending = 4096

// standbyCheckEvery is how often the standby decides whether to subscribe.
const standbyCheckEvery = 100 * time.Millisecond

// standbyProbeEvery is how often, at most, the standby asks the bus
// whether another node leads, while Raft cannot tell it.
const standbyProbeEvery = time.Second

// standbyProbeTimeout bounds one such question.
const standbyProbeTimeout = time.Second

// leaderHeardFor is how long a leader heard on the bus keeps the standby
// quiet: a few probes, so that one probe whose answer was late does not
// make the standby answer beside a leader that serves.
const leaderHeardFor = 3 * time.Second

// StandbyNode is what the standby needs of its node.
type StandbyNode interface {
	// ServingSince is when the node's leader subscription came up (unix
	// nanoseconds), 0 while it has none.
	ServingSince() int64
	// Stopping reports whether the node is shutting down.
	Stopping() bool
	// RaftLeader is the leader Raft knows, "" for none; running is false
	// before Raft runs.
	RaftLeader() (id string, running bool)
	// LoneMember reports whether Raft runs and the node is its cluster's
	// only member, so that no other node can serve a request.
	LoneMember() bool
	// Activity says what keeps the node from serving, "" when it serves.
	Activity() string
	// ConflictError is the reply to every request while another cluster
	// serves the prefix on the bus, nil otherwise.
	ConflictError() *schema.Error
}

// Replier sends the standby's replies and counts them as the node's
// request server does (*serving.Server is one).
type Replier interface {
	ReplyAllowed(m *nats.Msg) bool
	Respond(m *nats.Msg, reply any, e *schema.Error) *schema.Error
	Observe(ep subjects.Endpoint, d time.Duration, e *schema.Error)
}

// StandbyOptions configure a Standby.
type StandbyOptions struct {
	NodeID string
	Conn   *nats.Conn
	Names  subjects.Names
	Log    *slog.Logger
	// Prober asks the bus whether another node leads.
	Prober *Prober
	// Settled reports when the bus became able to show every node on it
	// (Settled), 0 until then.
	Settled func() int64
	// Endpoints are the request endpoints the standby answers on.
	Endpoints []subjects.Endpoint
}

// Standby is the state of the standby responder.
type Standby struct {
	o       StandbyOptions
	node    StandbyNode
	replier Replier

	mu   sync.Mutex
	subs []*nats.Subscription
	// held are the requests waiting out standbyDelay, in arrival order.
	held chan heldRequest
	// leaderHeard is when the bus last reported another node leading
	// (unix nanoseconds), 0 for never.
	leaderHeard atomic.Int64
	// probedAt is when the last finished question to the bus was asked
	// (unix nanoseconds), 0 before the first.
	probedAt atomic.Int64
}

// NewStandby returns the standby of node, which sends replies through r.
// It answers nothing until Run.
func NewStandby(o StandbyOptions, node StandbyNode, r Replier) *Standby {
	return &Standby{o: o, node: node, replier: r, held: make(chan heldRequest, standbyMaxPending)}
}

// Subscribed reports whether the standby listens on the request subjects.
func (sb *Standby) Subscribed() bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.subs != nil
}

// heldRequest is a request the standby answers after standbyDelay.
type heldRequest struct {
	ep      subjects.Endpoint
	m       *nats.Msg
	arrived time.Time
}

// Run subscribes and unsubscribes the standby as the node's state
// changes, and answers the requests it holds, until ctx ends.
func (sb *Standby) Run(ctx context.Context) {
	// Before the first question to the bus, which must not count as asked
	// before the bus settled when it is settled from the start.
	settled := sb.o.Settled
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		sb.answerHeld(ctx)
	}()
	go func() {
		defer wg.Done()
		sb.pollLeader(ctx)
	}()
	defer func() {
		sb.Set(false)
		wg.Wait()
	}()
	tick := time.NewTicker(standbyCheckEvery)
	defer tick.Stop()
	for {
		if ctx.Err() != nil {
			return
		}
		sb.Set(sb.wanted(settled()))
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// wanted decides whether the standby should be subscribed: not
// while this node serves or stops, nor while another node is known to
// lead. When
// only the bus can tell (Raft does not run yet, or knows no leader), it
// must have been asked since it settled (settledAt, 0 until then).
func (sb *Standby) wanted(settledAt int64) bool {
	if sb.serving() || sb.node.Stopping() {
		return false
	}
	if !sb.raftKnowsLeader() {
		if settledAt == 0 || sb.probedAt.Load() < settledAt {
			return false // the bus has not answered for sure yet
		}
	}
	return !sb.leaderElsewhere()
}

// pollLeader asks the bus whether another node leads, every
// standbyProbeEvery while Raft cannot tell, until ctx ends.
func (sb *Standby) pollLeader(ctx context.Context) {
	tick := time.NewTicker(standbyProbeEvery)
	defer tick.Stop()
	for {
		if !sb.serving() && !sb.raftKnowsLeader() {
			started := time.Now().UnixNano()
			if sb.o.Prober.otherLeader(ctx, standbyProbeTimeout, sb.o.NodeID) {
				sb.leaderHeard.Store(time.Now().UnixNano())
			}
			sb.probedAt.Store(started)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// serving reports whether the node's leader subscription is up.
func (sb *Standby) serving() bool { return sb.node.ServingSince() != 0 }

// raftKnowsLeader reports whether Raft runs and knows a leader.
func (sb *Standby) raftKnowsLeader() bool {
	id, running := sb.node.RaftLeader()
	return running && id != ""
}

// leaderElsewhere reports whether another node is known to lead: Raft's
// word when it knows a leader, else a leader heard on the bus lately.
func (sb *Standby) leaderElsewhere() bool {
	if id, running := sb.node.RaftLeader(); running && id != "" {
		return id != sb.o.NodeID
	}
	t := sb.leaderHeard.Load()
	return t != 0 && time.Since(time.Unix(0, t)) < leaderHeardFor
}

// Set subscribes the standby to every request subject, or drops
// its subscriptions.
func (sb *Standby) Set(on bool) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if on == (sb.subs != nil) {
		return
	}
	if !on {
		for _, sub := range sb.subs {
			if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
				sb.o.Log.Warn("standby: unsubscribe", "subject", sub.Subject, "err", err)
			}
		}
		sb.subs = nil
		sb.o.Log.Info("standby: no longer answering requests")
		return
	}
	subs := make([]*nats.Subscription, 0, len(subjects.Endpoints))
	for _, ep := range sb.o.Endpoints {
		if ep == subjects.ClusterJoin {
			// A join is a Raft configuration change, which often takes
			// the leader longer than the hold: a 503 would beat its
			// answer, and the joiner, a member by then, would go on
			// without the cluster id the answer carries. A joiner
			// asks again by itself, so silence here costs nothing.
			continue
		}
		sub, err := sb.o.Conn.QueueSubscribe(sb.o.Names.Request(ep), standbyQueueGroup, func(m *nats.Msg) { sb.holdRequest(ep, m) })
		if err != nil {
			sb.o.Log.Warn("standby: subscribe", "subject", sb.o.Names.Request(ep), "err", err)
			for _, sub := range subs {
				_ = sub.Unsubscribe()
			}
			return // the next check tries again
		}
		subs = append(subs, sub)
	}
	sb.subs = subs
	sb.o.Log.Info("standby: answering requests with 503 unavailable until this node serves or another node leads", "activity", sb.node.Activity())
}

// holdRequest queues a request for answerHeld; it runs on the
// subscription's goroutine, so it never waits.
func (sb *Standby) holdRequest(ep subjects.Endpoint, m *nats.Msg) {
	arrived := time.Now()
	if since := sb.node.ServingSince(); since != 0 && arrived.UnixNano() > since {
		return // this node's leader subscription has it too
	}
	if m.Reply == "" || !sb.replier.ReplyAllowed(m) {
		return
	}
	select {
	case sb.held <- heldRequest{ep: ep, m: m, arrived: arrived}:
	default: // full: dropped, and retried by its requester after its timeout
	}
}

// answerHeld answers each held request once it has waited standbyDelay,
// in arrival order, unless a serving node has it (answers).
func (sb *Standby) answerHeld(ctx context.Context) {
	for {
		var h heldRequest
		select {
		case <-ctx.Done():
			return
		case h = <-sb.held:
		}
		if wait := time.Until(h.arrived.Add(standbyDelay)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		if !sb.answers(h.arrived) {
			continue
		}
		e := sb.node.ConflictError()
		if e == nil {
			deadline, _ := decode.Deadline(h.m, time.Time{})
			e = standbyReply(sb.activity(), h.ep.Writes() && !sb.node.LoneMember(), deadline)
		}
		e = sb.replier.Respond(h.m, nil, e)
		sb.replier.Observe(h.ep, time.Since(h.arrived), e)
	}
}

// answers decides, once a request has waited, whether the standby
// answers it: unless this node's leader subscription was up before it
// arrived (that subscription got it too). Whether another node leads by
// now does not matter: nothing says its subscription got the request (see
// the top of this file).
func (sb *Standby) answers(arrived time.Time) bool {
	since := sb.node.ServingSince()
	return since == 0 || arrived.UnixNano() <= since
}

// activity says which node answers and what it is doing.
func (sb *Standby) activity() string {
	act := sb.node.Activity()
	if act == "" {
		act = "starting to serve"
	}
	return "node " + sb.o.NodeID + " " + schema.StandbyPhrase + ": " + act
}

// standbyReply is the standby's answer: 503 "nothing changed; retry",
// unless the request writes and another node may receive it too
// (elsewhere). NATS hands every request to the leader's queue group as
// well, and a leader this node cannot see (one elected a moment ago, or
// behind a link that is down) may apply it, at once or when the link
// heals; then the truth is 504 outcome_unknown, until the request's
// deadline has passed.
func standbyReply(activity string, elsewhere bool, deadline time.Time) *schema.Error {
	if !elsewhere {
		return schema.Errorf(schema.ErrUnavailable, "%s; nothing was changed; retry", activity)
	}
	until := "give requests a " + schema.HeaderDeadline + " header to bound how long that stays open"
	if !deadline.IsZero() {
		until = "no node starts it after its deadline, " + deadline.UTC().Format(time.RFC3339Nano)
	}
	return schema.Errorf(schema.ErrOutcomeUnknown, "%s; another node may still receive this request and apply it, so its outcome is unknown (%s): "+
		"retry with the same %s, or read before retrying", activity, until, schema.HeaderIdempotencyKey)
}
