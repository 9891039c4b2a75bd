package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
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
//     "unsure", and unsure means refuse (Guard.CheckBusFree).
//  2. Every node keeps asking P.cluster.nodes (Fence.Watch). A node that
//     hears another cluster id records a conflict; while it lasts the
//     leader answers every request 503 unavailable, naming both ids, its
//     lease clock stands still and it expires nothing, /readyz and
//     `concord status` show it, and so does concord_cluster_conflict. Both
//     clusters see each other, so neither keeps answering; the conflict
//     ends once one of them is gone for busClearRounds rounds in a row.

// ErrBootstrapRefused reports a bootstrap without positive evidence that the
// bus is free of other clusters.
var ErrBootstrapRefused = errors.New("bootstrap refused")

// ErrForeignCluster reports a node whose data belongs to another cluster,
// or a bootstrap on a bus where a cluster already answers.
var ErrForeignCluster = errors.New("foreign cluster")

// Guard keeps a node from founding or rejoining a cluster on a bus where
// another cluster serves its prefix.
type Guard struct {
	Prober *Prober
	Names  subjects.Names
	// Embedded is the node's embedded server, nil on an external NATS.
	Embedded *Embedded
	// Wait bounds how long a bootstrap waits for evidence that the bus is
	// free (--bootstrap-wait).
	Wait time.Duration
	Log  *slog.Logger
}

// CheckBusFree refuses a bootstrap unless it has positive evidence that
// no other Concord cluster serves this prefix on this bus; it waits at
// most Wait for that evidence. It returns the settle time the probes
// needed to agree over, which CheckAlone takes once the node answers for
// itself: of two nodes bootstrapping at the same time, at most one goes
// on.
func (g Guard) CheckBusFree(ctx context.Context) (settle time.Duration, err error) {
	deadline := time.Now().Add(g.Wait)
	settle = bootstrapSettle // an external bus: other servers may join it
	if g.Embedded != nil {
		links, err := g.waitLinks(ctx, deadline)
		if err != nil {
			return 0, err
		}
		settle = embeddedSettle(g.Embedded.Opts, links)
	}
	return settle, g.checkBusEmpty(ctx, deadline, settle)
}

// checkBusEmpty probes P.cluster.nodes until the bus gives positive
// evidence that no cluster serves it: "no responders" (nobody subscribes),
// or answers only from nodes that belong to no cluster yet (joiners waiting
// for one), in probes that agree over settle (embeddedSettle), for
// interest from other servers to arrive. A probe that gets no answer at
// all is unsure, and unsure means refuse.
func (g Guard) checkBusEmpty(ctx context.Context, deadline time.Time, settle time.Duration) error {
	var first time.Time
	unsure := "no probe has completed"
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("%w: could not confirm within --bootstrap-wait %s that no other Concord cluster serves %q on this NATS bus (%s); unsure means refuse. Start this node with --join to add it to a running cluster, or raise --bootstrap-wait on a busy bus",
				ErrBootstrapRefused, g.Wait, g.Names.Prefix(), unsure)
		}
		r, err := g.Prober.Probe(min(probeTimeout, left))
		if e := g.refuseBootstrap(r); e != nil {
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
			unsure, first = fmt.Sprintf("%s got neither an answer nor \"no responders\" within %s", g.Names.Nodes(), min(probeTimeout, left).Round(time.Millisecond)), time.Time{}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: the node is stopping", ErrBootstrapRefused)
		case <-time.After(min(bootstrapSettle/3, max(time.Until(deadline), 0))):
		}
	}
}

// CheckAlone runs once this node answers P.cluster.nodes as
// "starting": it probes for settle (one gather time on a server without
// links) and refuses if another node is starting without a cluster, or a
// cluster answers. Two nodes bootstrapping at once each see the other at
// least in the later one's window, so at most one goes on.
func (g Guard) CheckAlone(settle time.Duration) error {
	span := max(settle, probeGather)
	r, err := g.Prober.Listen(span, bootstrapSettle/3)
	if e := g.refuseBootstrap(r); e != nil {
		return e
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBootstrapRefused, err)
	}
	return nil
}

// refuseBootstrap returns why what a probe heard forbids a bootstrap: a
// node of a cluster, or another node starting without one.
func (g Guard) refuseBootstrap(r probeResult) error {
	if info, ok := r.foreign(""); ok {
		return fmt.Errorf("%w: a Concord cluster (id %q, node %s answering) already serves this NATS bus under %q; start this node with --join to add it to that cluster",
			ErrForeignCluster, info.ClusterID, info.ID, g.Names.Prefix())
	}
	for _, info := range r.infos {
		if info.State == schema.NodeStateStarting {
			return fmt.Errorf("%w: node %s is starting on this NATS bus under %q at the same time, without a cluster; only one node may --bootstrap a cluster: start the others with --join",
				ErrBootstrapRefused, info.ID, g.Names.Prefix())
		}
	}
	return nil
}

// waitLinks waits until every route, leaf node remote and gateway the
// embedded server was configured with is connected, and returns how many
// links that is: until they are, interest from the servers behind them is
// unknown, and a quiet bus proves nothing.
func (g Guard) waitLinks(ctx context.Context, deadline time.Time) (int, error) {
	want := g.Embedded.targets()
	routes, leafs, gateways := want.routes, want.leafs, want.gateways
	for {
		have := g.Embedded.counts()
		if have.covers(want) {
			return want.total(), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%w: the embedded NATS server is linked to %d of the %d other servers in --nats-routes, %d of %d leaf node remotes and %d of %d gateways after --bootstrap-wait %s; until every configured link is up, another cluster behind one could go unseen. Wait for the other servers (start them, or check the addresses), start this node with --join, or raise --bootstrap-wait",
				ErrBootstrapRefused, have.routes, routes, have.leafs, leafs, have.gateways, gateways, g.Wait)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w: the node is stopping", ErrBootstrapRefused)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// CheckRestart refuses to start a node of cluster ours on a bus where
// another cluster answers: its data belongs elsewhere. Nodes answer
// P.cluster.nodes whether or not there is a leader, so the check works
// while a cluster is down to a minority. Unlike a bootstrap, a restart
// creates no cluster, so a bus that does not answer in time is no reason to
// refuse; the bus watch (Fence.Watch) keeps looking afterwards.
//
// On the embedded server it first waits a while (restartLinkWait) for the
// links it was configured with: before they are up, the nodes behind them
// cannot be heard. And "no responders" just after a link came up may only
// mean that the interest of the servers behind it has not arrived yet,
// so while nobody answers it asks again, for restartSettle: with one
// probe, a node of another cluster that started with --join beside other
// tests' load was let through in one run of two, to be stopped later by
// the fence with a less direct message.
func (g Guard) CheckRestart(ctx context.Context, ours string) error {
	links := 0
	if g.Embedded != nil {
		var err error
		if links, err = g.waitLinks(ctx, time.Now().Add(min(g.Wait, restartLinkWait))); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("ask the bus which clusters serve it: %w", ctx.Err())
			}
			have := g.Embedded.counts()
			links = have.total()
			g.Log.Warn("not every configured NATS link is up; asking the bus which clusters serve it through those that are",
				"routes", have.routes, "leafs", have.leafs, "gateways", have.gateways)
		}
	}
	deadline := time.Now().Add(restartSettle)
	for {
		r, err := g.Prober.Probe(probeTimeout)
		if err != nil {
			g.Log.Warn("could not ask the bus which clusters serve it", "err", err)
			return nil
		}
		if info, ok := r.foreign(ours); ok {
			return fmt.Errorf("%w: this node belongs to cluster %q, but cluster %q (node %s answering) serves this NATS bus under %q; give the node an empty data directory to join that cluster",
				ErrForeignCluster, ours, info.ClusterID, info.ID, g.Names.Prefix())
		}
		if len(r.infos) > 0 || links == 0 || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ask the bus which clusters serve it: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
