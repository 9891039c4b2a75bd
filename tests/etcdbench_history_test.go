package tests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ebHistoryReport is the part of `etcdbench history --json-file` these
// tests read.
type ebHistoryReport struct {
	Rounds    int        `json:"rounds"`
	Fill      int64      `json:"fill_revision"`
	Order     [][]string `json:"order_by_round"`
	OpsRatios []float64  `json:"ops_ratio_by_round"`
	P99Ratios []float64  `json:"p99_ratio_by_round"`
	OpsRatio  float64    `json:"ops_ratio"`
	P99Ratio  float64    `json:"p99_ratio"`
	Servers   []struct {
		Name            string     `json:"name"`
		FilledIn        float64    `json:"fill_s"`
		Args            []string   `json:"extra_args"`
		Rounds          []ebResult `json:"rounds"`
		Revision        int64      `json:"revision_after"`
		CompactRevision int64      `json:"compact_revision_after"`
		RSSBytes        int64      `json:"rss_bytes_after"`
	} `json:"servers"`
}

// historyFill is the --fill of the runs here: small, but more than the
// rounds write.
const historyFill = 3000

// runHistoryBench runs `etcdbench history` (make bench-history) small and
// returns its report and its table; nothing may be left running.
func runHistoryBench(t *testing.T, rounds int, args ...string) (*ebHistoryReport, string) {
	t.Helper()
	jsonFile := filepath.Join(t.TempDir(), "history.json")
	r := startEtcdbench(t, append([]string{"history", "--concord", binPath, "--json-file", jsonFile, "--clients", "2",
		"--duration", "300ms", "--warmup", "100ms", "--rounds", strconv.Itoa(rounds), "--fill", strconv.Itoa(historyFill)}, args...)...)
	if code := r.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("exit code %d\nstdout:\n%s", code, r.stdout.Bytes())
	}
	r.checkNothingLeft(t, 2)
	data, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	var rep ebHistoryReport
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("--json-file: %v\n%s", err, data)
	}
	if rep.Rounds != rounds || len(rep.Servers) != 2 || len(rep.OpsRatios) != rounds || len(rep.P99Ratios) != rounds {
		t.Fatalf("report: %s", data)
	}
	a, b := rep.Servers[0], rep.Servers[1]
	for i := range rounds {
		want := []string{a.Name, b.Name}
		if i%2 == 1 {
			want = []string{b.Name, a.Name}
		}
		if !slices.Equal(rep.Order[i], want) {
			t.Errorf("round %d: order %v, want %v", i+1, rep.Order[i], want)
		}
		if len(a.Rounds) != rounds || len(b.Rounds) != rounds {
			t.Fatalf("rounds: %d and %d", len(a.Rounds), len(b.Rounds))
		}
		x, y := a.Rounds[i], b.Rounds[i]
		for _, r := range []ebResult{x, y} {
			if r.Workload != "put" || r.Ops < 1 || r.Errors != 0 || !(r.P50ms > 0 && r.P50ms <= r.P99ms) {
				t.Errorf("round %d %s: %+v", i+1, r.System, r)
			}
		}
		if x.System != a.Name || y.System != b.Name ||
			!benchNear(rep.OpsRatios[i], x.OpsPerS/y.OpsPerS) || !benchNear(rep.P99Ratios[i], x.P99ms/y.P99ms) {
			t.Errorf("round %d: ratios %.4f, %.4f from %+v and %+v", i+1, rep.OpsRatios[i], rep.P99Ratios[i], x, y)
		}
	}
	if rep.Fill != historyFill {
		t.Errorf("fill_revision %d, want %d", rep.Fill, historyFill)
	}
	for _, s := range rep.Servers {
		// Filled before the rounds, then written to in every round.
		if s.Revision <= historyFill || s.FilledIn <= 0 || s.RSSBytes < 1<<20 {
			t.Errorf("%s after the rounds: revision %d (filled to %d in %.1f s), rss %d", s.Name, s.Revision, historyFill, s.FilledIn, s.RSSBytes)
		}
	}
	return &rep, r.stdout.String()
}

// `etcdbench history` at a tiny size: both servers take every round, the
// order alternates, the ratios are those of the rounds, the second server
// really kept one revision of history while the first kept all of it, and
// the table says so.
func TestEtcdbenchHistorySmoke(t *testing.T) {
	t.Parallel()
	rep, out := runHistoryBench(t, 2)
	a, b := rep.Servers[0], rep.Servers[1]
	if a.Name != "default" || len(a.Args) != 0 || b.Name != "minimal" || !slices.Equal(b.Args, []string{"--history-revisions", "1"}) {
		t.Errorf("servers: %s %v, %s %v", a.Name, a.Args, b.Name, b.Args)
	}
	if a.CompactRevision != 0 || b.CompactRevision != b.Revision-1 {
		t.Errorf("history floors: default %d at revision %d (want 0), minimal %d at revision %d (want one below)",
			a.CompactRevision, a.Revision, b.CompactRevision, b.Revision)
	}
	if !benchNear(rep.OpsRatio, (rep.OpsRatios[0]+rep.OpsRatios[1])/2) || !benchNear(rep.P99Ratio, (rep.P99Ratios[0]+rep.P99Ratios[1])/2) {
		t.Errorf("medians %.4f, %.4f of %v, %v", rep.OpsRatio, rep.P99Ratio, rep.OpsRatios, rep.P99Ratios)
	}
	for _, want := range []string{"Put throughput with the key history kept (default) against minimal (--history-revisions 1)",
		"machine: ", "default retention (the last 1,000,000 revisions", "brought each server to revision 3,000", "in each of 2 rounds", "2 closed-loop clients",
		"default ÷ minimal", "issue 15's bar", "(the last revision kept)", "records every put in its history"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
}

// --baseline runs another binary, with its default flags, as the second
// server (here the same build, for the test's sake).
func TestEtcdbenchHistoryBaseline(t *testing.T) {
	t.Parallel()
	rep, out := runHistoryBench(t, 1, "--baseline", binPath)
	if b := rep.Servers[1]; b.Name != "baseline" || len(b.Args) != 0 || b.CompactRevision != 0 {
		t.Errorf("second server: %s %v, floor %d", b.Name, b.Args, b.CompactRevision)
	}
	if !strings.Contains(out, "against baseline ("+binPath) {
		t.Errorf("the table does not name the baseline:\n%s", out)
	}
}

// Bad flags stop it before any server starts.
func TestEtcdbenchHistoryRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"history", "--concord", binPath, "--minimal-revisions", "0"}, "--minimal-revisions: 0"},
		{[]string{"history", "--concord", binPath, "--rounds", "0"}, "--rounds: 0"},
		{[]string{"history", "--concord", binPath, "--baseline", "/nonexistent/concord"}, "--baseline: concord binary"},
	} {
		r := startEtcdbench(t, tc.args...)
		if code := r.wait(t, time.Minute); code == 0 {
			t.Errorf("%q: exit code 0", tc.args)
		}
		if out := r.errText(); !strings.Contains(out, tc.want) || strings.Contains(out, "started") || r.stdout.Len() > 0 {
			t.Errorf("%q: stderr %q, stdout %q; want %q and nothing started", tc.args, out, r.stdout.Bytes(), tc.want)
		}
	}
}
