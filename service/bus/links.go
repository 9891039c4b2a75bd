package bus

import (
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Embedded is the node's embedded NATS server and its options: the routes,
// leaf nodes and gateways it was configured with. A node on an external
// NATS has none (nil).
type Embedded struct {
	Server *server.Server
	Opts   *server.Options
}

// bootstrapSettle is the span over which a bootstrap's probes must agree
// when the bus has other servers: route interest arrives just after the
// route, so one early "no responders" is not evidence yet.
const bootstrapSettle = time.Second

// restartLinkWait bounds how long a restarting node waits for the
// embedded server's configured links before it asks the bus which
// clusters serve it (at most --bootstrap-wait); restartSettle how long it
// asks again while nobody answers behind links that are up, as a
// bootstrap's probes must agree for bootstrapSettle. Both delay only a
// restart whose peers do not answer yet: when a whole cluster starts at
// once, each node starts up to restartSettle later.
const (
	restartLinkWait = 5 * time.Second
	restartSettle   = bootstrapSettle
)

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

// natsLinks counts an embedded server's links to other servers.
type natsLinks struct{ routes, leafs, gateways int }

func (l natsLinks) total() int { return l.routes + l.leafs + l.gateways }

func (l natsLinks) covers(want natsLinks) bool {
	return l.routes >= want.routes && l.leafs >= want.leafs && l.gateways >= want.gateways
}

// targets counts the links the embedded server was configured
// with (a route to itself excluded).
func (e *Embedded) targets() natsLinks {
	opts := e.Opts
	l := natsLinks{routes: remoteRoutes(opts.Routes, opts.Cluster.Host, opts.Cluster.Port), leafs: len(opts.LeafNode.Remotes)}
	for _, g := range opts.Gateway.Gateways {
		if g.Name != opts.Gateway.Name {
			l.gateways++
		}
	}
	return l
}

// counts counts the embedded server's connected links.
func (e *Embedded) counts() natsLinks {
	return natsLinks{routes: e.routedServers(), leafs: e.Server.NumLeafNodes(), gateways: e.Server.NumOutboundGateways()}
}

// routedServers counts the distinct servers the embedded server has a
// route to (with route pooling there are several connections to each).
func (e *Embedded) routedServers() int {
	rz, err := e.Server.Routez(nil)
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

// Settled returns a function that reports when the bus became able to
// show every node on it (unix nanoseconds), or 0 while it is not yet:
// until then, a question nobody answered proves nothing. On the embedded
// server that is once every configured route, leaf node and gateway is
// connected and their interest had time to arrive (embeddedSettle, as a
// bootstrap waits); on an external server, bootstrapSettle after start.
// If the links are not all up within settleGrace (the other servers are
// down too), it no longer waits for them.
func Settled(e *Embedded) func() int64 {
	start := time.Now()
	var settledAt int64
	var linksUp time.Time
	var want natsLinks
	if e != nil {
		want = e.targets()
		if want.total() == 0 && embeddedSettle(e.Opts, 0) == 0 {
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
		case now.Sub(start) >= settleGrace:
			settledAt = now.UnixNano()
		case e == nil:
			if now.Sub(start) >= bootstrapSettle {
				settledAt = now.UnixNano()
			}
		default:
			if linksUp.IsZero() && e.counts().covers(want) {
				linksUp = now
			}
			if !linksUp.IsZero() && now.Sub(linksUp) >= embeddedSettle(e.Opts, want.total()) {
				settledAt = now.UnixNano()
			}
		}
		return settledAt
	}
}

// settleGrace bounds how long Settled waits for the embedded
// server's links before it trusts the bus as it is.
const settleGrace = seedSettle
