package tests

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
	"github.com/concord-io/concord/tests/freeport"
)

// scrape is one read of a node's /metrics.
type scrape map[string]*dto.MetricFamily

func scrapeMetrics(t testing.TB, addr string) scrape {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s", addr, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics of %s: %v", addr, err)
	}
	return fams
}

// metric finds the sample of name whose labels include the given
// name=value pairs, or nil.
func (s scrape) metric(name string, labels ...string) *dto.Metric {
	f := s[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.Label {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		return m
	}
	return nil
}

// value is a counter's or gauge's value; a missing sample reads 0, as a
// labelled counter that has not counted yet does not appear.
func (s scrape) value(name string, labels ...string) float64 {
	m := s.metric(name, labels...)
	switch {
	case m == nil:
		return 0
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

// histogram returns a histogram's sample count and sum.
func (s scrape) histogram(name string, labels ...string) (count uint64, sum float64) {
	m := s.metric(name, labels...)
	if m == nil || m.Histogram == nil {
		return 0, 0
	}
	return m.Histogram.GetSampleCount(), m.Histogram.GetSampleSum()
}

func httpStatus(addr, path string) (int, string, error) {
	code, body, err := httpGet("http://"+addr+path, "")
	return code, strings.TrimSpace(body), err
}

// httpGet gets url, with an Authorization header when auth is set, and
// returns the status and the body as it came.
func httpGet(url, auth string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(body), nil
}

// A scripted workload moves every lease and request counter by exactly
// what it did, and the gauges show the state it left.
func TestMetricsCountTheWorkload(t *testing.T) {
	t.Parallel()
	addr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	n := startNode(t, nodeOpts{flags: []string{"--metrics-listen", addr, "--tick", "100ms"}})
	c := connect(t, n.natsURL)
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body, err := httpStatus(addr, path); err != nil || code != 200 || body != "ok" {
			t.Fatalf("%s: %d %q %v", path, code, body, err)
		}
	}
	before := scrapeMetrics(t, addr)
	w := c.watch("concord.watch.m.>")

	// 3 grants; the first gets 3 keys and is revoked.
	a, b, d := c.grant(60), c.grant(60), c.grant(60)
	for i := 0; i < 3; i++ {
		c.put(fmt.Sprintf("m.rev.%d", i), i, a)
	}
	c.ok(subjects.LeaseRevoke, map[string]any{"id": a}, nil)
	// 1 anonymous lease, by a put with a ttl.
	c.ok(subjects.KVPut, map[string]any{"key": "m.anon", "value": 1, "ttl": 60}, nil)
	// 4 renewals: two single, two in one batch (one id there is unknown).
	c.ok(subjects.LeaseKeepAlive, map[string]any{"id": b}, nil)
	c.ok(subjects.LeaseKeepAlive, map[string]any{"id": d}, nil)
	c.ok(subjects.LeaseKeepAliveMany, map[string]any{"ids": []int64{b, d, 999999}}, nil)
	// 2 errors.
	c.fails(subjects.LeaseGrant, map[string]any{"ttl": 0}, "invalid_request")
	c.fails(subjects.LeaseKeepAlive, map[string]any{"id": 999999}, "lease_not_found")
	// 1 grant that expires with 2 keys.
	e := c.grant(1)
	c.put("m.exp.1", 1, e)
	c.put("m.exp.2", 2, e)
	// puts: 3 + 1 + 2; deletes: 3 (revoke) + 2 (expiry).
	w.waitFor(11, 10*time.Second)

	var after scrape
	checkFor(t, 10*time.Second, 100*time.Millisecond, func() error {
		after = scrapeMetrics(t, addr)
		if got := after.value("concord_watch_events_published_total") - before.value("concord_watch_events_published_total"); got != 11 {
			return fmt.Errorf("watch events +%v", got)
		}
		return nil
	})
	delta := func(name string, labels ...string) float64 {
		return after.value(name, labels...) - before.value(name, labels...)
	}
	hdelta := func(name string) (uint64, float64) {
		c1, s1 := after.histogram(name)
		c0, s0 := before.histogram(name)
		return c1 - c0, s1 - s0
	}
	want := []struct {
		name   string
		labels []string
		delta  float64
	}{
		{"concord_lease_grants_total", []string{"anonymous", "false"}, 4},
		{"concord_lease_grants_total", []string{"anonymous", "true"}, 1},
		{"concord_lease_renewals_total", nil, 4},
		{"concord_lease_revokes_total", nil, 1},
		{"concord_lease_expirations_total", nil, 1},
		{"concord_requests_total", []string{"endpoint", "lease_grant"}, 5},
		{"concord_requests_total", []string{"endpoint", "lease_keepalive"}, 3},
		{"concord_requests_total", []string{"endpoint", "lease_keepalive_many"}, 1},
		{"concord_requests_total", []string{"endpoint", "kv_put"}, 6},
		{"concord_request_errors_total", []string{"endpoint", "lease_grant", "error", "invalid_request"}, 1},
		{"concord_request_errors_total", []string{"endpoint", "lease_keepalive", "error", "lease_not_found"}, 1},
		{"concord_request_errors_total", []string{"endpoint", "kv_put"}, 0},
	}
	for _, w := range want {
		if got := delta(w.name, w.labels...); got != w.delta {
			t.Errorf("%s%v moved by %v, want %v", w.name, w.labels, got, w.delta)
		}
	}
	if n, sum := hdelta("concord_lease_revoke_keys"); n != 1 || sum != 3 {
		t.Errorf("revoke keys histogram +%d samples, sum +%v; want 1, 3", n, sum)
	}
	if n, sum := hdelta("concord_lease_expiry_keys"); n != 1 || sum != 2 {
		t.Errorf("expiry keys histogram +%d samples, sum +%v; want 1, 2", n, sum)
	}
	// Expiry happens strictly after the deadline on the lease clock, and
	// with a 100ms tick well within a second of it.
	if n, lag := hdelta("concord_lease_expiry_lag_seconds"); n != 1 || lag < 0.001 || lag > 1.5 {
		t.Errorf("expiry lag +%d samples, sum +%vs; want 1 sample in [0.001, 1.5]", n, lag)
	}
	if n, _ := after.histogram("concord_lease_tick_duration_seconds"); n == 0 {
		t.Error("no tick was measured")
	}
	if got := delta("concord_lease_tick_expired_total"); got != 1 {
		t.Errorf("ticks proposed %v expiries, want 1", got)
	}
	if n, _ := after.histogram("concord_lease_clock_extension_seconds"); n != 1 {
		t.Errorf("clock extension measured %d times, want once (one leadership gain)", n)
	}
	if n, _ := hdelta("concord_raft_apply_duration_seconds"); n < 15 {
		t.Errorf("apply latency measured %d times for at least 15 proposals", n)
	}

	// Gauges show the state: leases b and d, the anonymous one; keys
	// m.anon only; the revision is the store's.
	rev := c.revision()
	gauges := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"concord_leases_active", []string{"kind", "explicit"}, 2},
		{"concord_leases_active", []string{"kind", "anonymous"}, 1},
		{"concord_keys", nil, 1},
		{"concord_lease_attached_keys", nil, 1},
		{"concord_revision", nil, float64(rev)},
		{"concord_raft_state", []string{"state", "leader"}, 1},
		{"concord_raft_state", []string{"state", "follower"}, 0},
		{"concord_raft_leader_changes_total", nil, 1},
	}
	for _, g := range gauges {
		if got := after.value(g.name, g.labels...); got != g.want {
			t.Errorf("%s%v = %v, want %v", g.name, g.labels, got, g.want)
		}
	}
	if after.value("concord_raft_term") < 1 || after.value("concord_raft_commit_index") < after.value("concord_raft_applied_index") ||
		after.value("concord_raft_applied_index") < 10 {
		t.Errorf("raft term %v commit %v applied %v", after.value("concord_raft_term"), after.value("concord_raft_commit_index"), after.value("concord_raft_applied_index"))
	}
	// Raft's own measurements come through the go-metrics bridge.
	for _, name := range []string{"raft_commitTime", "raft_leader_dispatchLog", "raft_fsm_applyBatch"} {
		m := after.metric(name)
		if m == nil || m.Summary == nil || m.Summary.GetSampleCount() == 0 {
			t.Errorf("bridged raft metric %s missing or empty: %v", name, m)
		}
	}
	if after["go_goroutines"] == nil || after["process_resident_memory_bytes"] == nil {
		t.Error("runtime and process collectors are missing")
	}
	// What the alert rules read: a lone voter that leads, with its clock
	// running; the lease limit; the data directory's filesystem; the
	// commands a restart would replay (no snapshot yet: all of them).
	for name, want := range map[string]float64{
		"concord_raft_has_leader": 1, "concord_cluster_voters": 1, "concord_lease_clock_running": 1,
		"concord_lease_limit": float64(schema.DefaultMaxLeases), "concord_snapshot_failures_total": 0,
		"concord_snapshot_last_timestamp_seconds": 0,
	} {
		if got := after.value(name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if free, size := after.value("concord_data_dir_free_bytes"), after.value("concord_data_dir_size_bytes"); free <= 0 || size < free {
		t.Errorf("data directory: %v bytes free of %v", free, size)
	}
	if debt, due := after.value("concord_snapshot_replay_commands"), after.value("concord_snapshot_replay_due_commands"); debt < 10 || due != 8192 {
		t.Errorf("replay debt %v commands, due at %v; want the workload's commands (at least 10), due at --snapshot-threshold 8192", debt, due)
	}

	// After a restart, Raft applies the log again; that is not new
	// activity. The leases gained the whole downtime, and the new term's
	// clock extension says so.
	n.stop()
	const down = time.Second
	time.Sleep(down) // the node stays down at least this long
	n.restart()
	var restarted scrape
	checkFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		restarted = scrapeMetrics(t, addr)
		if n, _ := restarted.histogram("concord_lease_clock_extension_seconds"); n != 1 {
			return fmt.Errorf("clock extension measured %d times since the restart", n)
		}
		return nil
	})
	for _, name := range []string{"concord_lease_grants_total", "concord_lease_renewals_total", "concord_lease_revokes_total", "concord_lease_expirations_total"} {
		if v := restarted.value(name) + restarted.value(name, "anonymous", "true"); v != 0 {
			t.Errorf("%s is %v after a restart with no new activity: the log replay was counted", name, v)
		}
	}
	if _, ext := restarted.histogram("concord_lease_clock_extension_seconds"); ext < down.Seconds() {
		t.Errorf("clock extension after %v down: %vs", down, ext)
	}
	if got := restarted.value("concord_revision"); got != float64(rev) {
		t.Errorf("revision after restart %v, want %d", got, rev)
	}
}

// A snapshot records its duration and size.
func TestMetricsSnapshot(t *testing.T) {
	t.Parallel()
	addr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	n := startNode(t, nodeOpts{flags: []string{"--metrics-listen", addr}})
	c := connect(t, n.natsURL)
	c.put("snap.a", 1, 0)
	before := time.Now()
	var rep schema.ClusterSnapshotReply
	c.ok(subjects.ClusterSnapshot, map[string]any{}, &rep)
	s := scrapeMetrics(t, addr)
	if n, _ := s.histogram("concord_snapshot_persist_duration_seconds"); n != 1 {
		t.Errorf("snapshot durations: %d samples, want 1", n)
	}
	// A binary snapshot of one key is small, but holds at least its format
	// line and the key.
	if b := s.value("concord_snapshot_bytes"); b < float64(len("concord.fsm v5\n")+len("snap.a")) {
		t.Errorf("snapshot size %v bytes", b)
	}
	if at := s.value("concord_snapshot_last_timestamp_seconds"); at < float64(before.Unix()) || at > float64(time.Now().Unix()+1) {
		t.Errorf("last snapshot at %v, want between %d and now", at, before.Unix())
	}
	if debt := s.value("concord_snapshot_replay_commands"); debt != 0 {
		t.Errorf("replay debt %v commands right after a snapshot, want 0", debt)
	}
}

// /readyz answers 503 while a cluster has no leader and 200 again once a
// new one is elected; the survivors count the change of leader.
func TestReadyzFlipsDuringElection(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	nc := c.conn()
	defer nc.Close()
	leader := c.leaderIndex(nc)
	for i, addr := range c.metricsAddrs {
		checkFor(t, 10*time.Second, 50*time.Millisecond, func() error {
			code, body, err := httpStatus(addr, "/readyz")
			if err != nil || code != 200 {
				return fmt.Errorf("n%d /readyz: %d %q %v", i+1, code, body, err)
			}
			return nil
		})
	}
	var survivors []int
	changes := map[int]float64{}
	for i := range c.nodes {
		if i != leader {
			survivors = append(survivors, i)
			changes[i] = scrapeMetrics(t, c.metricsAddrs[i]).value("concord_raft_leader_changes_total")
		}
	}
	c.nodes[leader].kill()

	// Poll fast: the leaderless window lasts from the survivors' heartbeat
	// timeout to the end of the election.
	// A survivor that wins the election may be leaderless for only a few
	// milliseconds, so it need not be caught unready; at least one
	// survivor must be, and all must be ready again.
	sawNotReady := map[int]string{}
	checkFor(t, 30*time.Second, 5*time.Millisecond, func() error {
		ready := 0
		for _, i := range survivors {
			code, body, err := httpStatus(c.metricsAddrs[i], "/readyz")
			if err != nil {
				return err
			}
			if code == 503 {
				sawNotReady[i] = body
			}
			if code == 200 {
				ready++
			}
		}
		if len(sawNotReady) == 0 || ready < len(survivors) {
			return fmt.Errorf("not yet: went unready %v, ready %d of %d", sawNotReady, ready, len(survivors))
		}
		return nil
	})
	// Unready because the survivor knows no leader, still trusts the dead
	// one and cannot ask it for its commit index, or won the election and
	// does not serve yet.
	for i, reason := range sawNotReady {
		if !strings.Contains(reason, "waiting for a leader") && !strings.Contains(reason, "cannot ask the leader") && !strings.Contains(reason, "taking over as leader") && !strings.Contains(reason, "replaying log") {
			t.Errorf("n%d was unready with %q, want the reason no leader", i+1, reason)
		}
	}
	// A survivor may still trust the dead leader until its heartbeat
	// timeout; each counts exactly one change once it follows the new one.
	for _, i := range survivors {
		checkFor(t, 20*time.Second, 50*time.Millisecond, func() error {
			if got := scrapeMetrics(t, c.metricsAddrs[i]).value("concord_raft_leader_changes_total"); got != changes[i]+1 {
				return fmt.Errorf("n%d counted %v leader changes after the kill, had %v; want one more", i+1, got, changes[i])
			}
			return nil
		})
	}
	// The new leader measured how long the lease clock stood still.
	newLeader := c.leaderIndex(nc)
	if n, ext := scrapeMetrics(t, c.metricsAddrs[newLeader]).histogram("concord_lease_clock_extension_seconds"); n < 1 || ext <= 0 {
		t.Errorf("new leader n%d: clock extension %d samples, sum %v", newLeader+1, n, ext)
	}
}
