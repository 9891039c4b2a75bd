package main

import (
	"math"
	"strings"
	"testing"
)

const bucketText = `# HELP concord_request_duration_seconds Time from taking a request to sending its reply, by endpoint.
# TYPE concord_request_duration_seconds histogram
concord_request_duration_seconds_bucket{endpoint="kv_get",le="0.005"} 7
concord_request_duration_seconds_bucket{endpoint="kv_get",le="+Inf"} 9
concord_request_duration_seconds_bucket{endpoint="kv_put",le="0.005"} 90
concord_request_duration_seconds_bucket{endpoint="kv_put",le="0.01"} 97
concord_request_duration_seconds_bucket{endpoint="kv_put",le="0.025"} 100
concord_request_duration_seconds_bucket{endpoint="kv_put",le="+Inf"} 100
concord_request_duration_seconds_sum{endpoint="kv_put"} 0.5
concord_request_duration_seconds_count{endpoint="kv_put"} 100
concord_snapshot_bytes 12
`

// parseBuckets keeps the one endpoint's buckets in order, +Inf included,
// and refuses what it cannot read as a histogram series.
func TestParseBuckets(t *testing.T) {
	got, err := parseBuckets(strings.NewReader(bucketText), metricRequestBucket, "kv_put")
	if err != nil {
		t.Fatal(err)
	}
	want := []bucket{{0.005, 90}, {0.01, 97}, {0.025, 100}, {math.Inf(1), 100}}
	if len(got) != len(want) {
		t.Fatalf("parseBuckets: %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("parseBuckets: %v, want %v", got, want)
		}
	}
	for name, text := range map[string]string{
		"no series":      `concord_request_duration_seconds_bucket{endpoint="kv_get",le="0.005"} 7` + "\n",
		"bad count":      `concord_request_duration_seconds_bucket{endpoint="kv_put",le="0.005"} many` + "\n",
		"bad bound":      `concord_request_duration_seconds_bucket{endpoint="kv_put",le="soon"} 1` + "\n",
		"no value":       `concord_request_duration_seconds_bucket{endpoint="kv_put",le="0.005"}` + "\n",
		"bounds reverse": `concord_request_duration_seconds_bucket{endpoint="kv_put",le="0.01"} 1` + "\n" + `concord_request_duration_seconds_bucket{endpoint="kv_put",le="0.005"} 1` + "\n",
	} {
		if b, err := parseBuckets(strings.NewReader(text), metricRequestBucket, "kv_put"); err == nil {
			t.Errorf("%s: parseBuckets gave %v, want an error", name, b)
		}
	}
}

// quantileBound reads the quantile of what was observed between two
// readings, not since the start.
func TestQuantileBound(t *testing.T) {
	before := []bucket{{0.005, 1000}, {0.01, 1000}, {0.025, 1000}, {math.Inf(1), 1000}}
	after := []bucket{{0.005, 1090}, {0.01, 1098}, {0.025, 1100}, {math.Inf(1), 1100}}
	for _, c := range []struct {
		q, want float64
	}{{0.5, 0.005}, {0.9, 0.005}, {0.95, 0.01}, {0.98, 0.01}, {0.99, 0.025}, {1, 0.025}} {
		if le, ok := quantileBound(before, after, c.q); !ok || le != c.want {
			t.Errorf("quantileBound(q=%g) = %g, %v; want %g", c.q, le, ok, c.want)
		}
	}
	// Counted since the start instead, the p99 would be the first bucket's.
	zero := []bucket{{0.005, 0}, {0.01, 0}, {0.025, 0}, {math.Inf(1), 0}}
	if le, ok := quantileBound(zero, after, 0.99); !ok || le != 0.005 {
		t.Errorf("quantileBound since the start = %g, %v; want 0.005", le, ok)
	}
	if _, ok := quantileBound(after, after, 0.99); ok {
		t.Error("no observations in between, yet a quantile")
	}
	if _, ok := quantileBound(before[:3], after, 0.99); ok {
		t.Error("readings of different bucket sets, yet a quantile")
	}
	tail := []bucket{{0.005, 1000}, {0.01, 1000}, {0.025, 1000}, {math.Inf(1), 1100}}
	if le, ok := quantileBound(before, tail, 0.99); !ok || !math.IsInf(le, 1) {
		t.Errorf("every observation past the last bound: %g, %v; want +Inf", le, ok)
	}
}
