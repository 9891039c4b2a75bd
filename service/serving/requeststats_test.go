package serving

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/internal/testnats"
	"github.com/concord-io/concord/subjects"
)

// gatheredValue returns the value of the series of the named metric whose
// labels include every pair of labels (name, value, name, value, ...): a
// counter's value or a histogram's sample count; found is false when there
// is no such series.
func gatheredValue(t *testing.T, g prometheus.Gatherer, name string, labels ...string) (v float64, found bool) {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue(), true
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
			t.Fatalf("%s: unexpected type %v", name, f.GetType())
		}
	}
	return 0, false
}

// The request metrics are the micro counters seen through Prometheus: the
// same series as ever (every endpoint's count and latency from the start,
// an error series once the first error of its name arrives), moved by the
// one observe the workers make.
func TestRequestStatsOneCountTwoViews(t *testing.T) {
	rs := newRequestStats(subjects.Endpoints)
	reg := prometheus.NewRegistry()
	reg.MustRegister(rs)
	for _, ep := range subjects.Endpoints {
		for _, name := range []string{"concord_requests_total", "concord_request_duration_seconds"} {
			if v, ok := gatheredValue(t, reg, name, "endpoint", ep.Name()); !ok || v != 0 {
				t.Fatalf("%s{endpoint=%q} = %v (found %v), want a zero series", name, ep, v, ok)
			}
		}
	}
	if _, ok := gatheredValue(t, reg, "concord_request_errors_total"); ok {
		t.Fatal("an error series before any error")
	}

	rs.observe(subjects.LeaseGrant, 3*time.Millisecond, nil)
	rs.observe(subjects.LeaseGrant, time.Millisecond, schema.Errorf(schema.ErrInvalidRequest, "bad"))
	rs.observe(subjects.KVGet, time.Millisecond, &schema.Error{Code: 599, Name: "not_in_the_table"})

	snap := rs.snapshot(subjects.LeaseGrant)
	if snap.Requests != 2 || snap.NumErrors != 1 || snap.Errors[schema.ErrInvalidRequest] != 1 || snap.ProcessingTime != 4*time.Millisecond {
		t.Fatalf("micro view %+v", snap)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"concord_requests_total", []string{"endpoint", "lease_grant"}, 2},
		{"concord_request_duration_seconds", []string{"endpoint", "lease_grant"}, 2},
		{"concord_request_errors_total", []string{"endpoint", "lease_grant", "error", "invalid_request"}, 1},
		{"concord_requests_total", []string{"endpoint", "kv_get"}, 1},
		{"concord_request_errors_total", []string{"endpoint", "kv_get", "error", "internal"}, 1},
		{"concord_requests_total", []string{"endpoint", "kv_put"}, 0},
	} {
		if v, ok := gatheredValue(t, reg, c.name, c.labels...); !ok || v != c.want {
			t.Errorf("%s%v = %v (found %v), want %v", c.name, c.labels, v, ok, c.want)
		}
	}
	if _, ok := gatheredValue(t, reg, "concord_request_errors_total", "endpoint", "kv_put"); ok {
		t.Error("an error series for an endpoint without errors")
	}
}

// A write's tail under load lies between 5 and 25 ms; the histogram must
// tell its p99 apart there, or an operator (and the reads-beside-writes
// measurement) cannot see whether it doubled: observations of 11 and 22 ms
// land in different buckets, and no bucket in that range is wider than 5 ms.
func TestRequestDurationBucketsResolveWriteTail(t *testing.T) {
	rs := newRequestStats([]subjects.Endpoint{subjects.KVPut})
	reg := prometheus.NewRegistry()
	reg.MustRegister(rs)
	rs.observe(subjects.KVPut, 11*time.Millisecond, nil)
	rs.observe(subjects.KVPut, 22*time.Millisecond, nil)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buckets []*dto.Bucket
	for _, f := range fams {
		if f.GetName() == "concord_request_duration_seconds" {
			buckets = f.GetMetric()[0].GetHistogram().GetBucket()
		}
	}
	if len(buckets) == 0 {
		t.Fatal("no concord_request_duration_seconds buckets gathered")
	}
	var below11, below22 uint64
	prev := 0.0
	for _, b := range buckets {
		ub := b.GetUpperBound()
		if ub > 0.005 && ub <= 0.025 && ub-prev > 0.005+1e-9 {
			t.Errorf("bucket (%g, %g] is wider than 5 ms", prev, ub)
		}
		if ub >= 0.011 && below11 == 0 {
			below11 = b.GetCumulativeCount()
		}
		if ub >= 0.022 && below22 == 0 {
			below22 = b.GetCumulativeCount()
		}
		prev = ub
	}
	if below11 != 1 || below22 != 2 {
		t.Fatalf("the first bucket holding 11 ms counts %d, the first holding 22 ms %d: want 1 and 2 (different buckets)", below11, below22)
	}
}

// On a running server one request moves the micro STATS and the Prometheus
// count by one each, success and error alike.
func TestOneRequestMovesBothViews(t *testing.T) {
	s, nc, _ := startServer(t, nil)
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.RequestStats())
	count := func() (microN, microErr uint64, prom, promErr float64) {
		st := grantStats(t, nc)
		prom, _ = gatheredValue(t, reg, "concord_requests_total", "endpoint", "lease_grant")
		promErr, _ = gatheredValue(t, reg, "concord_request_errors_total", "endpoint", "lease_grant", "error", "invalid_request")
		return st.Requests, st.Errors[schema.ErrInvalidRequest], prom, promErr
	}
	m0, me0, p0, pe0 := count()
	if float64(m0) != p0 || float64(me0) != pe0 {
		t.Fatalf("views differ before: micro %d/%d, prometheus %v/%v", m0, me0, p0, pe0)
	}
	if e := testnats.Request(t, nc, "concord.lease.grant", map[string]any{"ttl": 30}, nil); e != nil {
		t.Fatal(e)
	}
	waitGrantStats(t, nc, m0+1, me0)
	m1, me1, p1, pe1 := count()
	if m1 != m0+1 || p1 != p0+1 || me1 != me0 || pe1 != pe0 {
		t.Fatalf("after a grant: micro %d→%d, prometheus %v→%v; errors micro %d→%d, prometheus %v→%v", m0, m1, p0, p1, me0, me1, pe0, pe1)
	}
	if e := testnats.Request(t, nc, "concord.lease.grant", map[string]any{"ttl": 0}, nil); e == nil || e.Name != schema.ErrInvalidRequest {
		t.Fatalf("bad grant: %v", e)
	}
	waitGrantStats(t, nc, m0+2, me0+1)
	m2, me2, p2, pe2 := count()
	if m2 != m1+1 || p2 != p1+1 || me2 != me1+1 || pe2 != pe1+1 {
		t.Fatalf("after a bad grant: micro %d→%d, prometheus %v→%v; errors micro %d→%d, prometheus %v→%v", m1, m2, p1, p2, me1, me2, pe1, pe2)
	}
}
