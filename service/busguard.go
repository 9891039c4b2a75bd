package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/datadir"
)

// One cluster per bus and prefix. Two clusters answering the same subjects
// would each serve part of the requests from their own state: a client
// would read a key from one and miss it in the other. Two defences:
//
//  1. A node bootstraps a new cluster only on positive evidence that no
//     other cluster serves the prefix: every NATS route, leaf and gateway
//     the embedded server was configured with is connected, and then the
//     bus answers "no responders" (or only nodes that belong to no cluster
//     yet) to P.cluster.nodes, in probes spread over a settle time so that
//     interest from the routes has arrived. A probe that times out is
//     "unsure", and unsure means refuse (checkBootstrap).
//  2. Every node keeps asking P.cluster.nodes (runBusWatch). A node that
//     hears another cluster id records a conflict; while it lasts the
//     leader answers every request 503 unavailable, naming both ids, its
//     lease clock stands still and it expires nothing, /readyz and
//     `concord status` show it, and so does concord_cluster_conflict. Both
//     clusters see each other, so neither keeps answering; the conflict
//     ends once one of them is gone for busClearRounds rounds in a row.

// ErrBootstrapRefused reports a bootstrap without positive evidence that the
// bus is free of other clusters.
var ErrBootstrapRefused = errors.New("bootstrap refused")

// probeTimeout bounds one P.cluster.nodes probe with no answer at all.
const probeTimeout = 2 * time.Second

// probeGather is how long a probe keeps collecting answers after the last
// one: every node answers P.cluster.nodes.
const probeGather = 300 * time.Millisecond

// bootstrapSettle is the span over which a bootstrap's probes must agree
// when the bus has other servers: route interest arrives just after the
// route, so one early "no responders" is not evidence yet.
const bootstrapSettle = time.Second

// busClearRounds is how many rounds in a row without another cluster end a
// conflict.
const busClearRounds = 3

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

// probeNodes asks P.cluster.nodes once and collects the answers: until
// probeGather passes without a new one, or timeout with none. The request
// goes out with a reply subject under s.probePrefix, which this node's own
// node-info subscription does not answer, so only other nodes are heard.
func (s *Service) probeNodes(timeout time.Duration) (probeResult, error) {
	return s.collectNodes(timeout, 0)
}

// listenNodes asks P.cluster.nodes every `every` for span and collects
// every answer that arrives meanwhile, late ones included.
func (s *Service) listenNodes(span, every time.Duration) (probeResult, error) {
	return s.collectNodes(span, every)
}

// collectNodes is probeNodes (every 0) and listenNodes.
func (s *Service) collectNodes(span, every time.Duration) (probeResult, error) {
	var r probeResult
	inbox := s.probePrefix + "." + nuid.Next()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return r, fmt.Errorf("subscribe to the probe inbox: %w", err)
	}
	defer sub.Unsubscribe()
	ask := func() error {
		if err := s.nc.PublishRequest(s.names.Nodes(), inbox, []byte(`{}`)); err != nil {
			return fmt.Errorf("ask %s: %w", s.names.Nodes(), err)
		}
		return nil
	}
	if err := ask(); err != nil {
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
				if err := ask(); err != nil {
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
			return r, fmt.Errorf("read answers to %s: %w", s.names.Nodes(), err)
		}
		info, err := decodeNodeInfo(msg)
		if err != nil {
			continue // not a node report: says nothing about clusters
		}
		r.infos = append(r.infos, info)
	}
}

// isNoResponders reports the status message a NATS server sends to a
// request's reply subject when nothing on the bus subscribes to its subject.
func isNoResponders(m *nats.Msg) bool {
	return len(m.Data) == 0 && m.Header.Get("Status") == "503"
}

// checkBootstrap refuses to bootstrap unless it has positive evidence that
// no other Concord cluster serves this prefix on this bus; it waits at most
// Config.BootstrapWait for that evidence. Then, answering for itself, it
// listens for a node bootstrapping at the same time: of two such nodes at
// most one goes on.
func (s *Service) checkBootstrap() error {
	deadline := time.Now().Add(s.cfg.BootstrapWait)
	settle := bootstrapSettle // an external bus: other servers may join it
	if s.ns != nil {
		links, err := s.waitNATSLinks(deadline)
		if err != nil {
			return err
		}
		settle = embeddedSettle(s.nsOpts, links)
	}
	if err := s.checkBusEmpty(deadline, settle); err != nil {
		return err
	}
	if err := s.serveNodeInfoSubjects(); err != nil {
		return err
	}
	return s.checkBootstrapAlone(settle)
}

// seedSettle is the settle time of an embedded server that listens for
// routes, leaf nodes or gateways but dials none: the servers that route to
// it retry about once a second, and until they are back, a cluster behind
// them is unseen. It must outlast their retry.
const seedSettle = 3 * time.Second

// embeddedSettle is how long the probes of a bootstrap on the embedded
// server must agree: not at all on a server with no links and no listener
// for them (interest is local and exact), bootstrapSettle once every link
// it dials is up, seedSettle when other servers may still dial in.
func embeddedSettle(opts *server.Options, links int) time.Duration {
	listens := opts.Cluster.Port != 0 || opts.LeafNode.Port != 0 || opts.Gateway.Port != 0
	switch {
	case links == 0 && !listens:
		return 0
	case links == 0:
		return seedSettle
	}
	return bootstrapSettle
}

// checkBusEmpty probes P.cluster.nodes until the bus gives positive
// evidence that no cluster serves it: "no responders" (nobody subscribes),
// or answers only from nodes that belong to no cluster yet (joiners waiting
// for one), in probes that agree over settle (embeddedSettle), for
// interest from other servers to arrive. A probe that gets no answer at
// all is unsure, and unsure means refuse.
func (s *Service) checkBusEmpty(deadline time.Time, settle time.Duration) error {
	var first time.Time
	unsure := "no probe has completed"
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("%w: could not confirm within --bootstrap-wait %s that no other Concord cluster serves %q on this NATS bus (%s); unsure means refuse. Start this node with --join to add it to a running cluster, or raise --bootstrap-wait on a busy bus",
				ErrBootstrapRefused, s.cfg.BootstrapWait, s.names.Prefix(), unsure)
		}
		r, err := s.probeNodes(min(probeTimeout, left))
		if e := s.refuseBootstrap(r); e != nil {
			return e
		}
		switch {
		case err != nil:
			unsure, first = err.Error(), time.Time{}
		case r.noResponders || len(r.infos) > 0:
			now := time.Now()
			if first.IsZero() {
				first = now
			}
			if now.Sub(first) >= settle {
				return nil
			}
		default:
			unsure, first = fmt.Sprintf("%s got neither an answer nor \"no responders\" within %s", s.names.Nodes(), min(probeTimeout, left).Round(time.Millisecond)), time.Time{}
		}
		select {
		case <-s.ctx.Done():
			return fmt.Errorf("%w: the node is stopping", ErrBootstrapRefused)
		case <-time.After(min(bootstrapSettle/3, max(time.Until(deadline), 0))):
		}
	}
}

// checkBootstrapAlone runs once this node answers P.cluster.nodes as
// "starting": it probes for settle (one gather time on a server without
// links) and refuses if another node is starting without a cluster, or a
// cluster answers. Two nodes bootstrapping at once each see the other at
// least in the later one's window, so at most one goes on.
func (s *Service) checkBootstrapAlone(settle time.Duration) error {
	span := max(settle, probeGather)
	r, err := s.listenNodes(span, bootstrapSettle/3)
	if e := s.refuseBootstrap(r); e != nil {
		return e
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBootstrapRefused, err)
	}
	return nil
}

// refuseBootstrap returns why what a probe heard forbids a bootstrap: a
// node of a cluster, or another node starting without one.
func (s *Service) refuseBootstrap(r probeResult) error {
	if info, ok := r.foreign(""); ok {
		return fmt.Errorf("%w: a Concord cluster (id %q, node %s answering) already serves this NATS bus under %q; start this node with --join to add it to that cluster",
			ErrForeignCluster, info.ClusterID, info.ID, s.names.Prefix())
	}
	for _, info := range r.infos {
		if info.State == schema.NodeStateStarting {
			return fmt.Errorf("%w: node %s is starting on this NATS bus under %q at the same time, without a cluster; only one node may --bootstrap a cluster: start the others with --join",
				ErrBootstrapRefused, info.ID, s.names.Prefix())
		}
	}
	return nil
}

// waitNATSLinks waits until every route, leaf node remote and gateway the
// embedded server was configured with is connected, and returns how many
// links that is: until they are, interest from the servers behind them is
// unknown, and a quiet bus proves nothing.
func (s *Service) waitNATSLinks(deadline time.Time) (int, error) {
	want := s.natsLinkTargets()
	routes, leafs, gateways := want.routes, want.leafs, want.gateways
	for {
		have := s.natsLinkCounts()
		if have.covers(want) {
			return want.total(), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%w: the embedded NATS server is linked to %d of the %d other servers in --nats-routes, %d of %d leaf node remotes and %d of %d gateways after --bootstrap-wait %s; until every configured link is up, another cluster behind one could go unseen. Wait for the other servers (start them, or check the addresses), start this node with --join, or raise --bootstrap-wait",
				ErrBootstrapRefused, have.routes, routes, have.leafs, leafs, have.gateways, gateways, s.cfg.BootstrapWait)
		}
		select {
		case <-s.ctx.Done():
			return 0, fmt.Errorf("%w: the node is stopping", ErrBootstrapRefused)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// natsLinks counts an embedded server's links to other servers.
type natsLinks struct{ routes, leafs, gateways int }

func (l natsLinks) total() int { return l.routes + l.leafs + l.gateways }

func (l natsLinks) covers(want natsLinks) bool {
	return l.routes >= want.routes && l.leafs >= want.leafs && l.gateways >= want.gateways
}

// natsLinkTargets counts the links the embedded server was configured
// with (a route to itself excluded).
func (s *Service) natsLinkTargets() natsLinks {
	opts := s.nsOpts
	l := natsLinks{routes: remoteRoutes(opts.Routes, opts.Cluster.Host, opts.Cluster.Port), leafs: len(opts.LeafNode.Remotes)}
	for _, g := range opts.Gateway.Gateways {
		if g.Name != opts.Gateway.Name {
			l.gateways++
		}
	}
	return l
}

// natsLinkCounts counts the embedded server's connected links.
func (s *Service) natsLinkCounts() natsLinks {
	return natsLinks{routes: s.routedServers(), leafs: s.ns.NumLeafNodes(), gateways: s.ns.NumOutboundGateways()}
}

// routedServers counts the distinct servers the embedded server has a
// route to (with route pooling there are several connections to each).
func (s *Service) routedServers() int {
	rz, err := s.ns.Routez(nil)
	if err != nil {
		return 0
	}
	ids := make(map[string]bool, len(rz.Routes))
	for _, r := range rz.Routes {
		ids[r.RemoteID] = true
	}
	return len(ids)
}

// remoteRoutes counts the configured routes that lead to another server:
// the usual configuration lists every server, this one included, and NATS
// skips the route to itself. A route is to this server when its port is
// the route listener's and its host is one of this machine's addresses.
func remoteRoutes(routes []*url.URL, host string, port int) int {
	local := localAddrs()
	n := 0
	for _, u := range routes {
		p, err := strconv.Atoi(u.Port())
		if err == nil && p == port && isLocalHost(u.Hostname(), host, local) {
			continue
		}
		n++
	}
	return n
}

func localAddrs() map[string]bool {
	out := map[string]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return out
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			out[ipn.IP.String()] = true
		}
	}
	return out
}

// isLocalHost reports whether h names this machine: the route listener's
// own host, a loopback name, or a name that resolves to a local address.
func isLocalHost(h, listenHost string, local map[string]bool) bool {
	if h == listenHost || h == "localhost" {
		return true
	}
	ips, err := net.LookupIP(h)
	if err != nil {
		return false
	}
	for _, ip := range ips {
		if ip.IsLoopback() || local[ip.String()] {
			return true
		}
	}
	return false
}

// busConflict is another cluster seen on the bus under this prefix.
type busConflict struct {
	ours   string
	theirs []string // sorted cluster ids
	node   string   // a node of theirs that answered
	since  time.Time
}

// String says what is wrong and what to do, for error replies, /readyz and
// `concord status`.
func (c *busConflict) String() string {
	return fmt.Sprintf("two Concord clusters serve this subject prefix on one NATS bus: this cluster %s and cluster %s (node %s answered), seen since %s; this cluster stopped serving requests so that clients never get answers from both. Stop one of the clusters, or give one another --subject-prefix; service resumes by itself once only one remains",
		c.ours, strings.Join(c.theirs, ", "), c.node, c.since.UTC().Format(time.RFC3339))
}

// conflictError is the reply to every request while a conflict lasts.
func (s *Service) conflictError() *schema.Error {
	if c := s.conflict.Load(); c != nil {
		return schema.Errorf(schema.ErrUnavailable, "%s", c.String())
	}
	return nil
}

// busWatch collects the answers to the node's periodic P.cluster.nodes
// probes. Answers may come late, so they go to one long-lived inbox and
// any foreign one counts, whenever it arrives.
type busWatch struct {
	s     *Service
	inbox string

	// ours is this node's cluster id, set before each round's probe.
	ours atomic.Pointer[string]

	mu      sync.Mutex
	heard   bool              // an answer came this round
	foreign map[string]string // cluster id → a node of it, this round
	clean   int               // rounds in a row without a foreign id
}

// runBusWatch probes the bus every BusCheckInterval while the node runs.
func (s *Service) runBusWatch(ctx context.Context) {
	w := &busWatch{s: s, inbox: nats.NewInbox(), foreign: map[string]string{}}
	sub, err := s.nc.Subscribe(w.inbox, w.answer)
	if err != nil {
		s.log.Error("watch the bus for other clusters: subscribe", "err", err)
		return
	}
	defer sub.Unsubscribe()
	ticker := time.NewTicker(s.cfg.BusCheckInterval)
	defer ticker.Stop()
	for {
		ours, err := datadir.ReadClusterID(s.cfg.DataDir)
		if err == nil && ours != "" {
			w.ours.Store(&ours)
			w.endRound(ours)
			if err := s.nc.PublishRequest(s.names.Nodes(), w.inbox, []byte(`{}`)); err != nil {
				s.log.Debug("bus watch: probe", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// answer takes one answer to a probe.
func (w *busWatch) answer(m *nats.Msg) {
	ours := w.ours.Load()
	if ours == nil || isNoResponders(m) {
		return
	}
	info, err := decodeNodeInfo(m)
	if err != nil {
		return
	}
	// Under w.mu, like the end of a round, so that a conflict cleared at
	// the end of a round cannot swallow a foreign answer arriving then.
	w.mu.Lock()
	defer w.mu.Unlock()
	w.heard = true
	if info.ClusterID != "" && info.ClusterID != *ours {
		w.foreign[info.ClusterID] = info.ID
		w.clean = 0
		// At once, not at the end of the round: this is what bounds the
		// time two clusters answer together.
		w.s.setConflict(*ours, info.ClusterID, info.ID)
	}
}

// endRound closes the round that is ending: a round that heard answers
// (this node's own at least) and no foreign one counts towards clearing a
// conflict; a round that heard nothing says nothing.
func (w *busWatch) endRound(ours string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	heard, foreign := w.heard, len(w.foreign) > 0
	w.heard, w.foreign = false, map[string]string{}
	switch {
	case foreign:
		w.clean = 0
	case heard:
		w.clean++
	}
	if w.clean >= busClearRounds {
		w.s.clearConflict(ours)
	}
}

// setConflict records another cluster and, on the first one, stops the
// leader from serving.
func (s *Service) setConflict(ours, theirs, node string) {
	for {
		old := s.conflict.Load()
		c := &busConflict{ours: ours, theirs: []string{theirs}, node: node, since: time.Now()}
		if old != nil {
			if slices.Contains(old.theirs, theirs) {
				return
			}
			c.since, c.node = old.since, old.node
			c.theirs = append(slices.Clone(old.theirs), theirs)
			slices.Sort(c.theirs)
		}
		if s.conflict.CompareAndSwap(old, c) {
			// The lease clock stops now, not when the leadership loop gets
			// round to pausing the term: from this moment keep-alives are
			// refused, so no lease may expire and none may lose time.
			// Proposals and the expirer need the clock and stop with it;
			// becomeLeader starts it again from the log.
			s.clock.hold()
			s.metrics.ClusterConflict.Set(1)
			s.log.Error("another Concord cluster serves this subject prefix on the bus; not serving requests until it is gone",
				"cluster_id", ours, "other_cluster_ids", strings.Join(c.theirs, ","), "other_node", node, "prefix", s.names.Prefix())
			s.signalFence()
			return
		}
	}
}

// clearConflict ends a conflict once no other cluster has answered for
// busClearRounds rounds.
func (s *Service) clearConflict(ours string) {
	old := s.conflict.Load()
	if old == nil || !s.conflict.CompareAndSwap(old, nil) {
		return
	}
	s.clock.release()
	s.metrics.ClusterConflict.Set(0)
	s.log.Warn("no other Concord cluster answers on the bus any more; serving again", "cluster_id", ours, "was", strings.Join(old.theirs, ","))
	s.signalFence()
}

// signalFence wakes the leadership loop to apply a conflict change.
func (s *Service) signalFence() {
	select {
	case s.fenceCh <- struct{}{}:
	default:
	}
}
