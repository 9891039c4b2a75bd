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
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"no-such-workload"}, `unknown workload "no-such-workload"`},
		{[]string{"--keepalive-batch", "0", "keepalive-batch"}, "--keepalive-batch: 0"},
		{[]string{"--clients", "0"}, "--clients: 0"},
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
