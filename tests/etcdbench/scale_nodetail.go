package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// The node's own view of a window's put latency (Concord only): the reads
// phase reads concord_request_duration_seconds{endpoint="kv_put"} at the
// window's edges and reports the p99 of the puts the node served in it,
// as the upper bound of the bucket it falls in. Set beside the p99 this
// program measures, it tells how much of a put's tail the node spent from
// taking the request to sending its reply, and how much went to NATS and
// to this program: on one node beside reads that split was 8-11 ms of a
// 16-22 ms p99 (2026-12-05), which the ratio alone does not show.

// metricRequestBucket is the histogram whose kv.put series is read.
const metricRequestBucket = "concord_request_duration_seconds_bucket"

// bucket is one cumulative histogram bucket: the observations at or below
// le seconds.
type bucket struct {
	le    float64
	count float64
}

// readBuckets fetches the node's metrics and returns the buckets of
// metricRequestBucket for endpoint.
func readBuckets(ctx context.Context, url, endpoint string) ([]bucket, error) {
	var out []bucket
	err := fetchMetrics(ctx, url, func(r io.Reader) (err error) {
		out, err = parseBuckets(r, metricRequestBucket, endpoint)
		return err
	})
	return out, err
}

// parseBuckets reads the buckets of the histogram series name{endpoint=…}
// from a Prometheus text exposition, in the order of their bounds; a
// series with no buckets, or a malformed one, is an error.
func parseBuckets(r io.Reader, name, endpoint string) ([]bucket, error) {
	want := `endpoint="` + endpoint + `"`
	var out []bucket
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		labels, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(labels, "} ")
		if !ok {
			return nil, fmt.Errorf("metrics: line %q", line)
		}
		var le string
		found := false
		for _, l := range strings.Split(labels, ",") {
			if l == want {
				found = true
			}
			if v, ok := strings.CutPrefix(l, `le="`); ok {
				le = strings.TrimSuffix(v, `"`)
			}
		}
		if !found {
			continue
		}
		bound, err := strconv.ParseFloat(le, 64) // "+Inf" parses as +Inf
		if err != nil {
			return nil, fmt.Errorf("metrics: line %q: bound: %w", line, err)
		}
		n, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: line %q: %w", line, err)
		}
		if len(out) > 0 && bound <= out[len(out)-1].le {
			return nil, fmt.Errorf("metrics: line %q: bounds out of order", line)
		}
		out = append(out, bucket{le: bound, count: n})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("metrics: no %s series for %s", name, want)
	}
	return out, nil
}

// quantileBound returns the upper bound of the bucket that holds quantile
// q of the observations made between two readings of one histogram, or
// ok false when none were made. The bound may be +Inf.
func quantileBound(before, after []bucket, q float64) (le float64, ok bool) {
	if len(before) != len(after) || len(after) == 0 {
		return 0, false
	}
	total := after[len(after)-1].count - before[len(before)-1].count
	if total <= 0 {
		return 0, false
	}
	for i := range after {
		if after[i].count-before[i].count >= q*total {
			return after[i].le, true
		}
	}
	return math.Inf(1), true
}

// putBuckets reads the node's kv.put buckets; nil without an error when
// the system is not Concord or its node has no metrics listener.
func (ph *phases) putBuckets(ctx context.Context) ([]bucket, error) {
	if _, ok := ph.t.(*concordTarget); !ok || len(ph.s.metrics) == 0 {
		return nil, nil
	}
	b, err := readBuckets(ctx, ph.s.metrics[0], "kv_put")
	if err != nil {
		return nil, fmt.Errorf("node-side put latency: %w", err)
	}
	return b, nil
}

// setNodeP99 records on r the node's p99 over the window between two
// readings of putBuckets, in milliseconds, when there is one.
func setNodeP99(r *result, before, after []bucket) {
	if le, ok := quantileBound(before, after, 0.99); ok {
		r.NodeP99ms = ptr(le * 1000)
	}
}
