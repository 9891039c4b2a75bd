package service

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/decode"
	"github.com/concord-io/concord/subjects"
)

// The standby: a node that cannot serve is never silent. Only the leader
// serves the request subjects (service/serving), so without it a restarting node
// (restoring its snapshot, replaying its log, waiting for an election)
// left clients with NATS "no responders", which looks the same as no
// cluster at all. The standby answers those requests with 503
// `unavailable` and what the node is doing (activity, startup.go), from
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

// standby is the state of the standby responder.
type standby struct {
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

// heldRequest is a request the standby answers after standbyDelay.
type heldRequest struct {
	ep      subjects.Endpoint
	m       *nats.Msg
	arrived time.Time
}

// runStandby subscribes and unsubscribes the standby as the node's state
// changes, and answers the requests it holds, until ctx ends.
func (s *Service) runStandby(ctx context.Context) {
	// Before the first question to the bus, which must not count as asked
	// before the bus settled when it is settled from the start.
	settled := s.busSettled()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		s.answerHeld(ctx)
	}()
	go func() {
		defer wg.Done()
		s.pollLeader(ctx)
	}()
	defer func() {
		s.setStandby(false)
		wg.Wait()
	}()
	tick := time.NewTicker(standbyCheckEvery)
	defer tick.Stop()
	for {
		if ctx.Err() != nil {
			return
		}
		s.setStandby(s.standbyWanted(settled()))
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// standbyWanted decides whether the standby should be subscribed: not
// while this node serves or stops, nor while another node is known to
// lead. When
// only the bus can tell (Raft does not run yet, or knows no leader), it
// must have been asked since it settled (settledAt, 0 until then).
func (s *Service) standbyWanted(settledAt int64) bool {
	if s.serving() || s.stopping.Load() {
		return false
	}
	if !s.raftKnowsLeader() {
		if settledAt == 0 || s.standby.probedAt.Load() < settledAt {
			return false // the bus has not answered for sure yet
		}
	}
	return !s.leaderElsewhere()
}

// busSettled returns a function that reports when the bus became able to
// show every node on it (unix nanoseconds), or 0 while it is not yet:
// until then, a question nobody answered proves nothing. On the embedded
// server that is once every configured route, leaf node and gateway is
// connected and their interest had time to arrive (embeddedSettle, as a
// bootstrap waits); on an external server, bootstrapSettle after start.
// If the links are not all up within standbyGrace (the other servers are
// down too), the standby no longer waits for them.
func (s *Service) busSettled() func() int64 {
	start := time.Now()
	var settledAt int64
	var linksUp time.Time
	var want natsLinks
	if s.ns != nil {
		want = s.natsLinkTargets()
		if want.total() == 0 && embeddedSettle(s.nsOpts, 0) == 0 {
			// No other server can reach this one: the bus is settled
			// from the start, before the first question to it.
			settledAt = start.UnixNano() - 1
		}
	}
	return func() int64 {
		if settledAt != 0 {
			return settledAt
		}
		now := time.Now()
		switch {
		case now.Sub(start) >= standbyGrace:
			settledAt = now.UnixNano()
		case s.ns == nil:
			if now.Sub(start) >= bootstrapSettle {
				settledAt = now.UnixNano()
			}
		default:
			if linksUp.IsZero() && s.natsLinkCounts().covers(want) {
				linksUp = now
			}
			if !linksUp.IsZero() && now.Sub(linksUp) >= embeddedSettle(s.nsOpts, want.total()) {
				settledAt = now.UnixNano()
			}
		}
		return settledAt
	}
}

// standbyGrace bounds how long the standby waits for the embedded
// server's links before it trusts the bus as it is.
const standbyGrace = seedSettle

// pollLeader asks the bus whether another node leads, every
// standbyProbeEvery while Raft cannot tell, until ctx ends.
func (s *Service) pollLeader(ctx context.Context) {
	tick := time.NewTicker(standbyProbeEvery)
	defer tick.Stop()
	for {
		if !s.serving() && !s.raftKnowsLeader() {
			started := time.Now().UnixNano()
			if s.otherLeaderHeard(ctx, standbyProbeTimeout) {
				s.standby.leaderHeard.Store(time.Now().UnixNano())
			}
			s.standby.probedAt.Store(started)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// serving reports whether this node's leader subscription is up.
func (s *Service) serving() bool { return s.servingSince() != 0 }

// servingSince is when this node's leader subscription came up (unix
// nanoseconds), 0 while it has none.
func (s *Service) servingSince() int64 {
	if s.srv == nil {
		return 0
	}
	return s.srv.ServingSince()
}

// raftKnowsLeader reports whether Raft runs and knows a leader.
func (s *Service) raftKnowsLeader() bool {
	if !s.raftStarted.Load() {
		return false
	}
	_, id := s.raft.LeaderWithID()
	return id != ""
}

// leaderElsewhere reports whether another node is known to lead: Raft's
// word when it knows a leader, else a leader heard on the bus lately.
func (s *Service) leaderElsewhere() bool {
	if s.raftStarted.Load() {
		if _, id := s.raft.LeaderWithID(); id != "" {
			return string(id) != s.cfg.NodeID
		}
	}
	t := s.standby.leaderHeard.Load()
	return t != 0 && time.Since(time.Unix(0, t)) < leaderHeardFor
}

// otherLeaderHeard asks P.cluster.nodes whether another node leads: true as
// soon as one says so; false on "no responders", or when timeout passes
// without such an answer. The reply subject is under s.probePrefix, which
// this node's own node-info subscription does not answer.
func (s *Service) otherLeaderHeard(ctx context.Context, timeout time.Duration) bool {
	inbox := s.probePrefix + "." + nuid.Next()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return false
	}
	defer sub.Unsubscribe()
	if err := s.nc.PublishRequest(s.names.Nodes(), inbox, []byte(`{}`)); err != nil {
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
		info, err := decodeNodeInfo(msg)
		if err == nil && info.State == "leader" && info.ID != s.cfg.NodeID {
			return true
		}
	}
	return false
}

// setStandby subscribes the standby to every request subject, or drops
// its subscriptions.
func (s *Service) setStandby(on bool) {
	sb := &s.standby
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if on == (sb.subs != nil) {
		return
	}
	if !on {
		for _, sub := range sb.subs {
			if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
				s.log.Warn("standby: unsubscribe", "subject", sub.Subject, "err", err)
			}
		}
		sb.subs = nil
		s.log.Info("standby: no longer answering requests")
		return
	}
	subs := make([]*nats.Subscription, 0, len(subjects.Endpoints))
	for _, ep := range s.srv.Endpoints() {
		if ep == subjects.ClusterJoin {
			// A join is a Raft configuration change, which often takes
			// the leader longer than the hold: a 503 would beat its
			// answer, and the joiner, a member by then, would go on
			// without the cluster id the answer carries. A joiner
			// asks again by itself, so silence here costs nothing.
			continue
		}
		sub, err := s.nc.QueueSubscribe(s.names.Request(ep), standbyQueueGroup, func(m *nats.Msg) { s.holdRequest(ep, m) })
		if err != nil {
			s.log.Warn("standby: subscribe", "subject", s.names.Request(ep), "err", err)
			for _, sub := range subs {
				_ = sub.Unsubscribe()
			}
			return // the next check tries again
		}
		subs = append(subs, sub)
	}
	sb.subs = subs
	s.log.Info("standby: answering requests with 503 unavailable until this node serves or another node leads", "activity", s.activity())
}

// holdRequest queues a request for answerHeld; it runs on the
// subscription's goroutine, so it never waits.
func (s *Service) holdRequest(ep subjects.Endpoint, m *nats.Msg) {
	arrived := time.Now()
	if since := s.servingSince(); since != 0 && arrived.UnixNano() > since {
		return // this node's leader subscription has it too
	}
	if m.Reply == "" || !s.srv.ReplyAllowed(m) {
		return
	}
	select {
	case s.standby.held <- heldRequest{ep: ep, m: m, arrived: arrived}:
	default: // full: dropped, and retried by its requester after its timeout
	}
}

// answerHeld answers each held request once it has waited standbyDelay,
// in arrival order, unless a serving node has it (standbyAnswers).
func (s *Service) answerHeld(ctx context.Context) {
	for {
		var h heldRequest
		select {
		case <-ctx.Done():
			return
		case h = <-s.standby.held:
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
		if !s.standbyAnswers(h.arrived) {
			continue
		}
		e := s.conflictError()
		if e == nil {
			deadline, _ := decode.Deadline(h.m, time.Time{})
			e = standbyReply(s.standbyActivity(), h.ep.Writes() && !s.loneMember(), deadline)
		}
		e = s.srv.Respond(h.m, nil, e)
		s.srv.Observe(h.ep, time.Since(h.arrived), e)
	}
}

// standbyAnswers decides, once a request has waited, whether the standby
// answers it: unless this node's leader subscription was up before it
// arrived (that subscription got it too). Whether another node leads by
// now does not matter: nothing says its subscription got the request (see
// the top of this file).
func (s *Service) standbyAnswers(arrived time.Time) bool {
	since := s.servingSince()
	return since == 0 || arrived.UnixNano() <= since
}

// standbyActivity says which node answers and what it is doing.
func (s *Service) standbyActivity() string {
	act := s.activity()
	if act == "" {
		act = "starting to serve"
	}
	return "node " + s.cfg.NodeID + " " + schema.StandbyPhrase + ": " + act
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

// loneMember reports whether Raft runs and this node is the cluster's only
// member, so that no other node can serve a request. Before Raft runs the
// membership is not known yet: it is in the snapshot and the log that
// raft.NewRaft reads.
func (s *Service) loneMember() bool {
	if !s.raftStarted.Load() {
		return false
	}
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	servers := f.Configuration().Servers
	return len(servers) == 1 && string(servers[0].ID) == s.cfg.NodeID
}
