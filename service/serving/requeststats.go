package serving

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// Request counts: one count, two views. The workers record each request
// once, here; the nats micro STATS reply (micro.go) and the Prometheus
// metrics concord_requests_total, concord_request_errors_total and
// concord_request_duration_seconds read these same counters, so the two
// can never disagree.

var (
	descRequests      = prometheus.NewDesc("concord_requests_total", "Requests answered, by endpoint.", []string{"endpoint"}, nil)
	descRequestErrors = prometheus.NewDesc("concord_request_errors_total", "Error replies, by endpoint and error name.", []string{"endpoint", "error"}, nil)
)

// requestDurationBuckets suit request latencies: under a millisecond for a
// read, a Raft round trip for a write, seconds around a failover. Writes
// under load have their tail between 5 and 25 ms (a put's p99 on one node
// beside large reads, docs/performance.md), so the buckets there
// are 2.5-5 ms apart: with only 10 between them, a p99 read from the
// histogram could not tell 11 ms from 24.
var requestDurationBuckets = []float64{.0005, .001, .0025, .005, .0075, .01, .015, .02, .025, .05, .1, .25, .5, 1, 2.5, 5}

// requestStats holds the counts of every request endpoint. It is made once
// per Server, so the counts cover the process's life across leadership
// terms, and its map is never written after that, so concurrent lookups
// are safe. It is a prometheus.Collector of the request metrics.
type requestStats struct {
	endpoints []subjects.Endpoint // in the order given, for Collect
	by        map[subjects.Endpoint]*endpointStats
	// duration is the latency histogram by endpoint; each endpointStats
	// holds its own series.
	duration *prometheus.HistogramVec
	// created is when the counters started, their Prometheus created time.
	created time.Time
}

var _ prometheus.Collector = (*requestStats)(nil)

// newRequestStats makes the counters of eps.
func newRequestStats(eps []subjects.Endpoint) *requestStats {
	rs := &requestStats{
		endpoints: eps,
		by:        make(map[subjects.Endpoint]*endpointStats, len(eps)),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "concord_request_duration_seconds", Help: "Time from taking a request to sending its reply, by endpoint.",
			Buckets: requestDurationBuckets}, []string{"endpoint"}),
		created: time.Now(),
	}
	for _, ep := range eps {
		st := newEndpointStats()
		st.duration = rs.duration.WithLabelValues(ep.Name())
		rs.by[ep] = st
	}
	return rs
}

// observe records one request of ep; an endpoint without counters is
// ignored.
func (rs *requestStats) observe(ep subjects.Endpoint, d time.Duration, e *schema.Error) {
	if st := rs.by[ep]; st != nil {
		st.observe(d, e)
	}
}

// snapshot returns ep's counts, zero for an endpoint without counters.
func (rs *requestStats) snapshot(ep subjects.Endpoint) endpointSnapshot {
	if st := rs.by[ep]; st != nil {
		return st.snapshot()
	}
	return endpointSnapshot{Errors: map[string]uint64{}}
}

// Describe sends the descriptors of the request metrics.
func (rs *requestStats) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRequests
	ch <- descRequestErrors
	rs.duration.Describe(ch)
}

// Collect reads the counters as Prometheus metrics: every endpoint's
// request count, and an error count for each endpoint and error name that
// has had an error.
func (rs *requestStats) Collect(ch chan<- prometheus.Metric) {
	for _, ep := range rs.endpoints {
		snap := rs.by[ep].snapshot()
		ch <- prometheus.MustNewConstMetricWithCreatedTimestamp(descRequests, prometheus.CounterValue, float64(snap.Requests), rs.created, ep.Name())
		for name, n := range snap.Errors {
			ch <- prometheus.MustNewConstMetricWithCreatedTimestamp(descRequestErrors, prometheus.CounterValue, float64(n), rs.created, ep.Name(), name)
		}
	}
	rs.duration.Collect(ch)
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
	// duration is the endpoint's latency histogram series, nil for none.
	duration prometheus.Observer
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
	if st.duration != nil {
		st.duration.Observe(d.Seconds())
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
