package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// benchLine is one --json result line of concord bench.
type benchLine struct {
	Workload string             `json:"workload"`
	Ops      int64              `json:"ops"`
	OpsPerS  float64            `json:"ops_per_s"`
	P50ms    float64            `json:"p50_ms"`
	P99ms    float64            `json:"p99_ms"`
	P999ms   float64            `json:"p999_ms"`
	Errors   int64              `json:"errors"`
	Extra    map[string]float64 `json:"extra"`
}

// runBenchJSON runs concord bench with args and returns its result lines by
// workload; stdout must hold nothing but JSON lines, one per workload.
func runBenchJSON(t *testing.T, args ...string) map[string]benchLine {
	t.Helper()
	var stdout, stderr bytes.Buffer
	p := newProc(t, 2*time.Minute, binPath, append([]string{"bench", "--json"}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = &stdout, &stderr
	if err := p.run(); err != nil {
		t.Fatalf("concord bench %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, stdout.Bytes(), stderr.Bytes())
	}
	if stderr.Len() > 0 {
		t.Errorf("concord bench wrote to stderr:\n%s", stderr.Bytes())
	}
	got := map[string]benchLine{}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var r benchLine
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if _, dup := got[r.Workload]; dup {
			t.Errorf("two results for %s", r.Workload)
		}
		got[r.Workload] = r
	}
	return got
}

// checkThroughput checks what every closed-loop result must satisfy.
func checkThroughput(t *testing.T, r benchLine) {
	t.Helper()
	if r.Ops < 1 || r.Errors != 0 || r.OpsPerS <= 0 {
		t.Errorf("%s: %d ops, %.1f ops/s, %d errors", r.Workload, r.Ops, r.OpsPerS, r.Errors)
	}
	if !(r.P50ms > 0 && r.P50ms <= r.P99ms && r.P99ms <= r.P999ms) {
		t.Errorf("%s: percentiles p50 %.3f, p99 %.3f, p999 %.3f ms", r.Workload, r.P50ms, r.P99ms, r.P999ms)
	}
}

// benchNear reports whether a and b agree to a part in a million.
func benchNear(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(math.Abs(a), math.Abs(b)) }

// concord bench with no workload named runs the whole standard set against
// a node and reports every result with no errors. The figures themselves
// are for people; the asserts check that each workload did what its name
// says.
func TestBenchSmoke(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	const batch = 10
	got := runBenchJSON(t, "--url", n.natsURL, "--duration", "300ms", "--clients", "2", "--keepalive-batch", strconv.Itoa(batch),
		"--revoke-keys", "50", "--expiry-leases", "5", "--expiry-ttl", "1")
	want := []string{"grant", "put", "keepalive", "keepalive-batch", "get", "get-serializable", "txn", "revoke", "expiry"}
	if len(got) != len(want) {
		t.Errorf("%d results, want %d: %v", len(got), len(want), got)
	}
	for _, w := range want {
		r, ok := got[w]
		if !ok {
			t.Errorf("no result for %s", w)
			continue
		}
		switch w {
		case "grant", "put", "get", "get-serializable", "txn":
			checkThroughput(t, r)
		case "keepalive":
			checkThroughput(t, r)
			// One lease per request.
			if !benchNear(r.Extra["leases_per_s"], r.OpsPerS) {
				t.Errorf("keepalive: leases_per_s %.1f, ops_per_s %.1f", r.Extra["leases_per_s"], r.OpsPerS)
			}
		case "keepalive-batch":
			checkThroughput(t, r)
			if r.Extra["batch"] != batch || r.Extra["leases_renewed"] != float64(r.Ops*batch) ||
				!(r.Extra["leases_per_s"] > r.OpsPerS) || !benchNear(r.Extra["leases_per_s"], r.OpsPerS*batch) {
				t.Errorf("keepalive-batch: %d ops, %.1f ops/s, extra %v", r.Ops, r.OpsPerS, r.Extra)
			}
		case "revoke":
			if r.Ops != 1 || r.Errors != 0 || r.Extra["keys"] != 50 || !(r.Extra["reply_ms"] > 0) ||
				!(r.Extra["first_event_ms"] > 0) || !(r.Extra["last_event_ms"] >= r.Extra["first_event_ms"]) {
				t.Errorf("revoke: %+v", r)
			}
		case "expiry":
			if r.Ops != 5 || r.Errors != 0 || r.Extra["early"] != 0 || r.Extra["missing"] != 0 ||
				!(r.Extra["mean_late_ms"] >= 0) || !(r.Extra["max_late_ms"] >= r.Extra["mean_late_ms"]) {
				t.Errorf("expiry: %+v", r)
			}
		}
	}
}

// The table names each workload it ran; bad flags and unknown workloads
// fail with a message before anything is sent.
func TestBenchSmokeTableAndUsage(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	out, err := newProc(t, time.Minute, binPath, "bench", "--url", n.natsURL, "--duration", "100ms", "--clients", "1",
		"--keepalive-batch", "3", "keepalive-batch", "get-serializable").combinedOutput()
	if err != nil {
		t.Fatalf("concord bench: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "workload") ||
		!strings.HasPrefix(lines[1], "keepalive-batch ") || !strings.Contains(lines[1], "batch=3.0") ||
		!strings.HasPrefix(lines[2], "get-serializable ") {
		t.Errorf("table:\n%s", out)
	}
	// get-at-revision says under its rows what it measured.
	out, err = newProc(t, time.Minute, binPath, "bench", "--url", n.natsURL, "--duration", "100ms", "--clients", "1",
		"--rev-keys", "30", "--rev-writes", "20", "--rev-back", "10", "--rev-page", "5", "--rev-rounds", "1", "get-at-revision").combinedOutput()
	if err != nil {
		t.Fatalf("concord bench get-at-revision: %v\n%s", err, out)
	}
	lines = strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 5 || !strings.HasPrefix(lines[1], "rev-key-now ") || !strings.HasPrefix(lines[2], "rev-key-past ") ||
		!strings.HasPrefix(lines[3], "rev-page-now ") || !strings.HasPrefix(lines[4], "rev-page-past ") {
		t.Errorf("table:\n%s", out)
	}
	for _, want := range []string{"get-at-revision: 30 keys under bench.", "then 20 puts round the first 5 of them", "(10 back)",
		"5 of the 5 page keys were written after the past revision", "with limit 5", "1 rounds of 100ms per read",
		"one key, past ÷ present: p50 ", "a 5-key page, past ÷ present: p50 "} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"no-such-workload"}, `unknown workload "no-such-workload"`},
		{[]string{"--keepalive-batch", "0", "keepalive-batch"}, "--keepalive-batch: 0"},
		{[]string{"--clients", "0"}, "--clients: 0"},
		{[]string{"--rev-writes", "10", "--rev-back", "20", "get-at-revision"}, "--rev-writes: 10, want at least --rev-back (20)"},
		{[]string{"--rev-page", "20000", "get-at-revision"}, "--rev-page: 20000"},
		{[]string{"--rev-keys", "5", "--rev-page", "6", "get-at-revision"}, "--rev-keys: 5"},
		{[]string{"--rev-rounds", "0", "get-at-revision"}, "--rev-rounds: 0"},
	} {
		out, err := newProc(t, time.Minute, binPath, append([]string{"bench", "--url", n.natsURL}, tc.args...)...).combinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("concord bench %v: %v, output %q, want an error with %q", tc.args, err, out, tc.want)
		}
	}
}

// Against three nodes, with every NATS URL given comma-separated: each
// connection picks one of them, and requests reach the leader over the
// NATS routes.
func TestBenchSmokeCluster(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3)
	got := runBenchJSON(t, "--url", strings.Join(c.urls, ","), "--duration", "300ms", "--clients", "3",
		"--keepalive-batch", "5", "keepalive", "keepalive-batch", "get", "get-serializable")
	for _, w := range []string{"keepalive", "keepalive-batch", "get", "get-serializable"} {
		r, ok := got[w]
		if !ok {
			t.Errorf("no result for %s", w)
			continue
		}
		checkThroughput(t, r)
	}
	if r := got["keepalive-batch"]; r.Extra["leases_renewed"] != float64(r.Ops*5) {
		t.Errorf("keepalive-batch: %d ops, extra %v", r.Ops, r.Extra)
	}
}

// get-at-revision, at a small size: the four reads all answer, every reply
// matched the revisions its keys had at the revision asked (a mismatch
// would count as an error), the past reads read the revision --rev-back
// before the present, every key of the page changed after it, and the
// ratios are those of the figures printed beside them.
func TestBenchSmokeGetAtRevision(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	got := runBenchJSON(t, "--url", n.natsURL, "--duration", "400ms", "--clients", "2",
		"--rev-keys", "300", "--rev-writes", "120", "--rev-back", "50", "--rev-page", "20", "--rev-rounds", "2", "get-at-revision")
	if len(got) != 4 {
		t.Errorf("%d results, want 4: %v", len(got), got)
	}
	now, past := got["rev-key-now"], got["rev-key-past"]
	pageNow, pagePast := got["rev-page-now"], got["rev-page-past"]
	for _, r := range []benchLine{now, past, pageNow, pagePast} {
		checkThroughput(t, r)
		if r.Extra["rounds"] != 2 {
			t.Errorf("%s: extra %v, want rounds 2", r.Workload, r.Extra)
		}
	}
	// 300 keys and 120 rewrites, on top of whatever the node had.
	present := now.Extra["revision"]
	if present < 420 || pageNow.Extra["revision"] != present {
		t.Errorf("present revision %v (key) and %v (page), want the same, at least 420", present, pageNow.Extra["revision"])
	}
	for _, r := range []benchLine{past, pagePast} {
		if r.Extra["revision"] != present-50 || r.Extra["back"] != 50 || r.Extra["changed_since"] != 20 {
			t.Errorf("%s: extra %v, want revision %v, back 50, changed_since 20", r.Workload, r.Extra, present-50)
		}
	}
	for _, pair := range [][2]benchLine{{now, past}, {pageNow, pagePast}} {
		n, p := pair[0], pair[1]
		if !benchNear(p.Extra["p50_past_over_now"], p.P50ms/n.P50ms) || !benchNear(p.Extra["p99_past_over_now"], p.P99ms/n.P99ms) ||
			!benchNear(p.Extra["ops_now_over_past"], n.OpsPerS/p.OpsPerS) {
			t.Errorf("%s: extra %v, against p50 %.3f/%.3f, p99 %.3f/%.3f, ops/s %.1f/%.1f", p.Workload, p.Extra, p.P50ms, n.P50ms, p.P99ms, n.P99ms, n.OpsPerS, p.OpsPerS)
		}
	}
	if pageNow.Extra["page"] != 20 || pagePast.Extra["page"] != 20 {
		t.Errorf("page extras: %v, %v", pageNow.Extra, pagePast.Extra)
	}
	// The keys went with their leases at the end.
	out, err := newProc(t, time.Minute, binPath, "kv", "get", "--server", n.natsURL, "--prefix", "bench.", "--count").combinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "0" {
		t.Errorf("keys left after the run: %v, %q", err, out)
	}
}

// keepalive-tenants renews every lease of every tenant, each request one
// tenant's: afterwards each tenant holds its own leases and no other's.
func TestBenchSmokeKeepAliveTenants(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	got := runBenchJSON(t, "--url", n.natsURL, "--duration", "300ms", "--clients", "2", "--keepalive-batch", "4",
		"--tenants", "3", "--tenant-leases", "10", "keepalive-tenants")
	r := got["keepalive-tenants"]
	checkThroughput(t, r)
	if r.Extra["tenants"] != 3 || r.Extra["leases"] != 30 || !(r.Extra["leases_per_s"] > r.OpsPerS) {
		t.Errorf("keepalive-tenants: %+v", r)
	}
	c := connect(t, n.natsURL)
	var st schema.ClusterTenantsReply
	c.ok(subjects.ClusterTenants, map[string]any{}, &st)
	if len(st.Tenants) != 4 {
		t.Fatalf("tenants after the bench: %+v", st.Tenants)
	}
	for _, u := range st.Tenants[1:] {
		if u.Leases != 10 {
			t.Errorf("%s holds %d leases, want its 10", u.Tenant, u.Leases)
		}
	}
}
