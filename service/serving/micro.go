package serving

import (
	"regexp"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// NATS-native discovery. While a node leads, it registers the request
// endpoints as one nats.go micro service, so `nats micro ls|info|stats`
// list it with its version, subjects, JSON Schema ids and counts. Followers
// register nothing: there is one instance, the leader's (none during an
// election). The per-node subjects (P.cluster.node.<id>.info,
// P.cluster.nodes) stay plain subscriptions that every node serves.
//
// micro calls each endpoint's handler serially from one subscription, so
// the handler only hands the request to the worker pool. micro's own stats
// therefore measure that hand-off and never see an error reply; the real
// numbers come from requestStats (requeststats.go), which the workers feed
// and the micro StatsHandler reports as each endpoint's `data`.

// defaultMicroVersion is the version reported to micro when Config.Version
// is empty: micro insists on a semantic version.
const defaultMicroVersion = "0.0.0-dev"

// fallbackMicroVersion is reported when Config.Version is not a semantic
// version even without a leading "v".
const fallbackMicroVersion = "0.0.0-unknown"

// microDescription describes the service in `nats micro info`.
const microDescription = "Concord: leases and a revisioned key-value store; the instance is the Raft leader"

// Metadata keys of the micro service and its endpoints.
const (
	microMetaNodeID        = "node_id"
	microMetaSubjectPrefix = "subject_prefix"
	microMetaRequestSchema = "request_schema"
	microMetaReplySchema   = "reply_schema"
	microMetaErrorSchema   = "error_schema"
)

// semVer is the pattern micro (and the nats CLI's JSON Schema for its
// replies) checks a version against, from semver.org; micro does not
// export its copy.
var semVer = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// microVersion returns the version to register with micro: v itself, or v
// without a leading "v" (as `git describe` prints it), defaultMicroVersion
// for an empty v, and otherwise fallbackMicroVersion with ok false so the
// caller can warn. A bad version must not keep the leader from serving.
func microVersion(v string) (version string, ok bool) {
	switch {
	case v == "":
		return defaultMicroVersion, true
	case semVer.MatchString(v):
		return v, true
	case strings.HasPrefix(v, "v") && semVer.MatchString(v[1:]):
		return v[1:], true
	}
	return fallbackMicroVersion, false
}

// microServiceName derives the micro service name from the subject prefix:
// micro names allow only [A-Za-z0-9_-], so every other byte (the '.'
// between tokens, and anything else a prefix may hold) becomes '_'. The
// default prefix gives "concord". Distinct prefixes can share a name
// ("acme.concord" and "acme_concord"); the service metadata's
// subject_prefix tells their instances apart.
func microServiceName(prefix string) string {
	b := []byte(prefix)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// endpointMetadata points at the JSON Schemas of an endpoint's request,
// reply and error reply, by their $id (the schema/json file of the same
// name holds the document).
func endpointMetadata(ep subjects.Endpoint) map[string]string {
	return map[string]string{
		microMetaRequestSchema: schema.SchemaID(string(ep) + ".request"),
		microMetaReplySchema:   schema.SchemaID(string(ep) + ".reply"),
		microMetaErrorSchema:   schema.SchemaID("error"),
	}
}

// addMicroService registers this node's micro service and one endpoint per
// request handler; the caller holds subsMu and stops the returned service
// (also after an error, when it is not nil) on losing leadership.
func (s *Server) addMicroService(handlers map[subjects.Endpoint]handler) (micro.Service, error) {
	version, ok := microVersion(s.cfg.Version)
	if !ok {
		s.cfg.Log.Warn("the version is not a semantic version; nats micro shows "+fallbackMicroVersion, "version", s.cfg.Version)
	}
	bySubject := make(map[string]subjects.Endpoint, len(handlers))
	for ep := range handlers {
		bySubject[s.cfg.Names.Request(ep)] = ep
	}
	svc, err := micro.AddService(s.cfg.Conn, micro.Config{
		Name:        microServiceName(s.cfg.Names.Prefix()),
		Version:     version,
		Description: microDescription,
		Metadata: map[string]string{
			microMetaNodeID:        s.cfg.NodeID,
			microMetaSubjectPrefix: s.cfg.Names.Prefix(),
		},
		// The same queue group as ever, so that during a hand-over (or a
		// rolling upgrade) the old and the new leader share each request
		// instead of both answering it.
		QueueGroup: queueGroup,
		// Called under micro's lock for every endpoint of a STATS or INFO
		// request; a snapshot is a few atomic loads.
		StatsHandler: func(e *micro.Endpoint) any {
			return s.reqStats.snapshot(bySubject[e.Subject])
		},
		// Asynchronous errors on the service's subscriptions, such as a
		// slow consumer. (nats.go reports a permissions violation, say on
		// $SRV.> with an external NATS, without its subscription, so it
		// never gets here: the service is then not discoverable, but the
		// endpoints still serve.)
		ErrorHandler: func(_ micro.Service, err *micro.NATSError) {
			s.cfg.Log.Warn("nats micro service", "subject", err.Subject, "err", err.Description)
		},
	})
	if err != nil {
		return nil, err
	}
	for _, ep := range endpointOrder(handlers) {
		h := handlers[ep]
		handler := micro.HandlerFunc(func(r micro.Request) {
			// Rebuild the *nats.Msg our handlers take from micro's view of
			// it: the body and headers are shared, not copied. Replies go
			// out with s.cfg.Conn.Publish(m.Reply), so the missing Sub is unused.
			m := &nats.Msg{Subject: r.Subject(), Reply: r.Reply(), Header: nats.Header(r.Headers()), Data: r.Data()}
			if !s.ReplyAllowed(m) {
				return
			}
			s.dispatch(ep, m, h)
		})
		err := svc.AddEndpoint(ep.Name(), handler,
			micro.WithEndpointSubject(s.cfg.Names.Request(ep)),
			micro.WithEndpointMetadata(endpointMetadata(ep)))
		if err != nil {
			return svc, err
		}
	}
	return svc, nil
}

// endpointOrder lists the endpoints of handlers in the order of
// subjects.Endpoints, which `nats micro info` keeps, followed by any
// handler missing from that list (sorted), so that none goes unserved.
// (TestMicroEndpointsMatchHandlers keeps the two in step.)
func endpointOrder(handlers map[subjects.Endpoint]handler) []subjects.Endpoint {
	out := make([]subjects.Endpoint, 0, len(handlers))
	for _, ep := range subjects.Endpoints {
		if _, ok := handlers[ep]; ok {
			out = append(out, ep)
		}
	}
	var rest []subjects.Endpoint
	for ep := range handlers {
		if !slices.Contains(out, ep) {
			rest = append(rest, ep)
		}
	}
	slices.Sort(rest)
	return append(out, rest...)
}
