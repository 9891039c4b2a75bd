package service

import (
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"

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
// numbers come from requestStats, which the workers feed and the micro
// StatsHandler reports as each endpoint's `data`.

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

// microEndpointName names an endpoint in micro: "lease.grant" becomes
// "lease_grant", since micro endpoint names allow no '.'. The subject is
// registered separately and stays the real one.
func microEndpointName(ep subjects.Endpoint) string {
	return strings.ReplaceAll(string(ep), ".", "_")
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
func (s *Service) addMicroService(handlers map[subjects.Endpoint]handlerFunc) (micro.Service, error) {
	version, ok := microVersion(s.cfg.Version)
	if !ok {
		s.log.Warn("the version is not a semantic version; nats micro shows "+fallbackMicroVersion, "version", s.cfg.Version)
	}
	bySubject := make(map[string]subjects.Endpoint, len(handlers))
	for ep := range handlers {
		bySubject[s.names.Request(ep)] = ep
	}
	svc, err := micro.AddService(s.nc, micro.Config{
		Name:        microServiceName(s.names.Prefix()),
		Version:     version,
		Description: microDescription,
		Metadata: map[string]string{
			microMetaNodeID:        s.cfg.NodeID,
			microMetaSubjectPrefix: s.names.Prefix(),
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
			s.log.Warn("nats micro service", "subject", err.Subject, "err", err.Description)
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
			// out with s.nc.Publish(m.Reply), so the missing Sub is unused.
			m := &nats.Msg{Subject: r.Subject(), Reply: r.Reply(), Header: nats.Header(r.Headers()), Data: r.Data()}
			if !s.replyAllowed(m) {
				return
			}
			s.dispatch(ep, m, h)
		})
		err := svc.AddEndpoint(microEndpointName(ep), handler,
			micro.WithEndpointSubject(s.names.Request(ep)),
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
func endpointOrder(handlers map[subjects.Endpoint]handlerFunc) []subjects.Endpoint {
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

// requestStats holds the counts of every request endpoint. It is made once
// per Service, so the counts cover the process's life across leadership
// terms, and the map is never written after that, so concurrent lookups
// are safe. It is the one source for request counts: the micro stats'
// `data` today, and a Prometheus collector can read the same snapshots.
type requestStats map[subjects.Endpoint]*endpointStats

// newRequestStats makes the counters of eps.
func newRequestStats(eps []subjects.Endpoint) requestStats {
	rs := make(requestStats, len(eps))
	for _, ep := range eps {
		rs[ep] = newEndpointStats()
	}
	return rs
}

// observe records one request of ep; an endpoint without counters is
// ignored.
func (rs requestStats) observe(ep subjects.Endpoint, d time.Duration, e *schema.Error) {
	if st := rs[ep]; st != nil {
		st.observe(d, e)
	}
}

// snapshot returns ep's counts, zero for an endpoint without counters.
func (rs requestStats) snapshot(ep subjects.Endpoint) endpointSnapshot {
	if st := rs[ep]; st != nil {
		return st.snapshot()
	}
	return endpointSnapshot{Errors: map[string]uint64{}}
}

// errorIndex maps each error name of schema.ErrorTable to its counter; a
// name outside the table counts as schema.ErrInternal (schema.Errorf makes
// such a name internal too).
var errorIndex = func() map[string]int {
	m := make(map[string]int, len(schema.ErrorTable))
	for i, spec := range schema.ErrorTable {
		m[spec.Name] = i
	}
	return m
}()

// endpointStats counts one endpoint's requests as the workers finish them:
// how many, their time in serve and respond, and the error replies by error
// name. It is lock-free and safe for concurrent use; make it with
// newEndpointStats.
type endpointStats struct {
	requests atomic.Uint64
	nanos    atomic.Int64
	// errors is indexed like schema.ErrorTable, so the set of error names
	// (a metric's label values) is fixed.
	errors []atomic.Uint64
}

// newEndpointStats makes zeroed counters.
func newEndpointStats() *endpointStats {
	return &endpointStats{errors: make([]atomic.Uint64, len(schema.ErrorTable))}
}

// observe records one request that took d and ended in e (nil: success).
func (st *endpointStats) observe(d time.Duration, e *schema.Error) {
	// The request is counted before its time and error, and snapshot reads
	// in the opposite order, so a snapshot never shows more errors than
	// requests.
	st.requests.Add(1)
	st.nanos.Add(int64(d))
	if e != nil {
		i, ok := errorIndex[e.Name]
		if !ok {
			i = errorIndex[schema.ErrInternal]
		}
		st.errors[i].Add(1)
	}
}

// endpointSnapshot is one endpoint's counts at one moment; it is the `data`
// of the endpoint in micro's STATS reply, in micro's own field names and
// units (durations in nanoseconds).
type endpointSnapshot struct {
	// Requests is how many requests the workers finished.
	Requests uint64 `json:"num_requests"`
	// NumErrors is how many of them got an error reply, and Errors how
	// many by error name (names with no errors are left out).
	NumErrors uint64            `json:"num_errors"`
	Errors    map[string]uint64 `json:"errors"`
	// ProcessingTime is the total time from a worker taking a request to
	// its reply being sent, and AverageProcessingTime that per request.
	ProcessingTime        time.Duration `json:"processing_time"`
	AverageProcessingTime time.Duration `json:"average_processing_time"`
}

// snapshot reads the counters.
func (st *endpointStats) snapshot() endpointSnapshot {
	out := endpointSnapshot{Errors: map[string]uint64{}}
	for i, spec := range schema.ErrorTable {
		if n := st.errors[i].Load(); n > 0 {
			out.Errors[spec.Name] = n
			out.NumErrors += n
		}
	}
	out.ProcessingTime = time.Duration(st.nanos.Load())
	out.Requests = st.requests.Load()
	if out.Requests > 0 {
		out.AverageProcessingTime = out.ProcessingTime / time.Duration(out.Requests)
	}
	return out
}
