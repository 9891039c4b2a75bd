package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// The snapshot phase (Concord only): how long the node takes to write a
// Raft snapshot of its state, history included, after the load and after
// the rewrites (issue 15: history must not make a snapshot more than 2×
// slower than with the keys written once). etcd keeps its keys in its
// bbolt file rather than in Raft snapshots and has no request that writes
// one, so it has no figure here.

// The node's metrics the phase reads: the snapshot write time histogram
// (observed once per snapshot persisted) and the last snapshot's size.
const (
	metricSnapshotSum   = "concord_snapshot_persist_duration_seconds_sum"
	metricSnapshotCount = "concord_snapshot_persist_duration_seconds_count"
	metricSnapshotBytes = "concord_snapshot_bytes"
)

// snapshotTimeout bounds the snapshot request: a million keys with their
// history take seconds, not minutes.
const snapshotTimeout = 5 * time.Minute

// snapshot makes the Concord node write --snapshot-tries Raft snapshots,
// one after the other, and keeps the median write time. Each
// (snapshotOnce): one put first, so that there is something new to
// snapshot, then P.cluster.snapshot, which answers once the snapshot is
// written. The write time is what the node's
// concord_snapshot_persist_duration_seconds recorded for it (the sum over
// the count, should a scheduled snapshot have run in between as well); the
// size is concord_snapshot_bytes.
func (ph *phases) snapshot(afterRewrites bool) func(context.Context) error {
	return func(ctx context.Context) error {
		t, ok := ph.t.(*concordTarget)
		if !ok {
			return nil
		}
		if len(ph.s.metrics) == 0 {
			return fmt.Errorf("snapshot: the node has no metrics listener")
		}
		if err := ph.ensureOpen(); err != nil {
			return err
		}
		var writes, reqs []float64
		var size int64
		for range ph.cfg.snapshotTries {
			write, req, n, err := ph.snapshotOnce(ctx, t)
			if err != nil {
				return fmt.Errorf("snapshot: %w", err)
			}
			writes, reqs, size = append(writes, write), append(reqs, req), n
		}
		write, req := median(writes), median(reqs)
		if len(writes) > 1 {
			logf("  %s: snapshots written in %s s, median %.3f s", ph.res.System, joinSeconds(writes), write)
		}
		if afterRewrites {
			ph.res.SnapshotRewriteS, ph.res.SnapshotRewriteReqS, ph.res.SnapshotRewriteBytes = &write, &req, &size
			ph.res.SnapshotRewriteTries = writes
		} else {
			ph.res.SnapshotS, ph.res.SnapshotReqS, ph.res.SnapshotBytes = &write, &req, &size
			ph.res.SnapshotTries = writes
		}
		return nil
	}
}

// snapshotOnce puts one key, has the node write a snapshot and returns
// the write time its metric recorded, the request's round trip (both in
// seconds) and the snapshot's size.
func (ph *phases) snapshotOnce(ctx context.Context, t *concordTarget) (write, req float64, size int64, err error) {
	pctx, cancel := context.WithTimeout(ctx, opTimeout)
	err = t.put(pctx, 0, scaleKey(0, ph.cfg.readKeys))
	cancel()
	if err != nil {
		return 0, 0, 0, err
	}
	before, err := readMetrics(ctx, ph.s.metrics[0])
	if err != nil {
		return 0, 0, 0, err
	}
	sctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
	t0 := time.Now()
	var reply schema.ClusterSnapshotReply
	err = call(sctx, t.conn(0), t.names.Request(subjects.ClusterSnapshot), schema.ClusterSnapshotRequest{}, &reply)
	took := time.Since(t0)
	cancel()
	if err != nil {
		return 0, 0, 0, err
	}
	after, err := readMetrics(ctx, ph.s.metrics[0])
	if err != nil {
		return 0, 0, 0, err
	}
	n := after[metricSnapshotCount] - before[metricSnapshotCount]
	if n < 1 {
		return 0, 0, 0, fmt.Errorf("the node answered (index %d) but %s did not grow: no snapshot was written", reply.Index, metricSnapshotCount)
	}
	write = (after[metricSnapshotSum] - before[metricSnapshotSum]) / n
	size = int64(after[metricSnapshotBytes])
	if n > 1 {
		logf("  %s: %.0f snapshots written meanwhile (a scheduled one too); the write time is their mean", ph.res.System, n)
	}
	logf("  %s: snapshot at index %d written in %.3f s (%s), %.3f s from request to reply", ph.res.System, reply.Index, write, mib(float64(size)), took.Seconds())
	return write, took.Seconds(), size, nil
}

// readMetrics fetches a Prometheus text exposition and returns its samples
// that have no labels, by name.
func readMetrics(ctx context.Context, url string) (map[string]float64, error) {
	var out map[string]float64
	err := fetchMetrics(ctx, url, func(r io.Reader) (err error) {
		out, err = parseMetrics(r)
		return err
	})
	return out, err
}

// fetchMetrics fetches a Prometheus text exposition and hands its body to
// parse.
func fetchMetrics(ctx context.Context, url string, parse func(io.Reader) error) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("metrics: %s answered %s", url, resp.Status)
	}
	return parse(resp.Body)
}

// parseMetrics reads the unlabelled samples of a Prometheus text
// exposition ("name value" lines; comments and labelled samples skipped).
func parseMetrics(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") || strings.Contains(line, "{") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			return nil, fmt.Errorf("metrics: line %q", line)
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: line %q: %w", line, err)
		}
		out[f[0]] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return out, nil
}
