package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseHistoryFlags(t *testing.T) {
	cfg, err := parseHistoryFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.fill != 1_000_000 {
		t.Errorf("--fill defaults to %d, want the default retention", cfg.fill)
	}
	if cfg.minimal != 1 || cfg.baseline != "" || cfg.rounds != 6 || cfg.duration != 10*time.Second || cfg.clients != 32 || cfg.valueBytes != 64 {
		t.Errorf("defaults: %+v", cfg)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--minimal-revisions", "0"}, "--minimal-revisions: 0"},
		{[]string{"--fill", "-1"}, "--fill: -1"},
		{[]string{"--clients", "0"}, "--clients: 0"},
		{[]string{"--duration", "0s"}, "--duration: 0s"},
		{[]string{"--warmup", "-1s"}, "--warmup: -1s"},
		{[]string{"--rounds", "0"}, "--rounds: 0"},
		{[]string{"--value-bytes", "1"}, "--value-bytes: 1"},
		{[]string{"extra"}, "unexpected arguments"},
	} {
		if _, err := parseHistoryFlags(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseHistoryFlags(%q): %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}

// The table shows every round of both servers, the medians, the ratios
// and what each server kept.
func TestHistoryReportPrint(t *testing.T) {
	cfg, err := parseHistoryFlags([]string{"--rounds", "2"})
	if err != nil {
		t.Fatal(err)
	}
	a := &historyServer{Name: "default", Binary: "/bin/concord", Version: "v1", Revision: 200_000, CompactRevision: 0, RSSBytes: 300 << 20,
		Rounds: []result{{OpsPerS: 9000, P50ms: 3, P99ms: 10}, {OpsPerS: 11000, P50ms: 2.5, P99ms: 8}}}
	b := &historyServer{Name: "minimal", Binary: "/bin/concord", Version: "v1", Args: []string{"--history-revisions", "1"},
		Revision: 210_000, CompactRevision: 209_999, RSSBytes: 60 << 20,
		Rounds: []result{{OpsPerS: 10000, P50ms: 2.8, P99ms: 8}, {OpsPerS: 10000, P50ms: 2.6, P99ms: 8}}}
	a.Median, b.Median = medianOf(a.Rounds), medianOf(b.Rounds)
	a.FilledIn, b.FilledIn = 70, 65
	rep := &historyReport{Date: "2026-12-04 10:00 UTC", Machine: machine{CPU: "AMD EPYC", Cores: 2, MemGiB: 24, Kernel: "6.1", LoadAvg1: "0.5"},
		Elapsed: 150, Clients: 32, Rounds: 2, Fill: 1_000_000, Order: [][]string{{"default", "minimal"}, {"minimal", "default"}}, Servers: []*historyServer{a, b},
		OpsRatios: []float64{0.9, 1.1}, P99Ratios: []float64{1.25, 1}, OpsRatio: 1, P99Ratio: 1.125}
	var buf bytes.Buffer
	rep.print(&buf, cfg)
	out := buf.String()
	for _, want := range []string{"against minimal (--history-revisions 1), on 2026-12-04 10:00 UTC; the run took 2m30s",
		"machine: 2 × AMD EPYC", "brought each server to revision 1,000,000 (default: 70 s, minimal: 65 s)", "default retention (the last 1,000,000 revisions, none older than 24h0m0s)",
		"1      default            9,000      3.00     10.00         10,000      2.80      8.00      0.900      1.250",
		"2      minimal           11,000      2.50      8.00         10,000      2.60      8.00      1.100      1.000",
		"median                   10,000      2.75      9.00         10,000      2.70      8.00      1.000      1.125",
		"an ops/s ratio of 0.90 or more: 1.000", "default  revision 200000, history floor 0 (the last 200,000 revisions kept), resident memory 300 MiB",
		"minimal  revision 210000, history floor 209999 (the last revision kept), resident memory 60.0 MiB"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// fill keeps every op busy until the revision reaches the target, and
// stops on the first failed request.
func TestFill(t *testing.T) {
	var rev atomic.Int64
	ops := make([]opFunc, 8)
	for i := range ops {
		ops[i] = func(ctx context.Context, n int) error { rev.Add(1); return nil }
	}
	revision := func(context.Context) (int64, error) { return rev.Load(), nil }
	if err := fill(context.Background(), ops, revision, 50_000); err != nil {
		t.Fatal(err)
	}
	if got := rev.Load(); got < 50_000 || got > 50_000+2_000+int64(len(ops)) {
		t.Fatalf("filled to %d, want 50,000 and at most one check's worth more", got)
	}
	before := rev.Load()
	if err := fill(context.Background(), ops, revision, 10); err != nil || rev.Load() != before {
		t.Fatalf("a server past the target got %d more puts (err %v)", rev.Load()-before, err)
	}

	boom := errors.New("boom")
	ops[3] = func(ctx context.Context, n int) error {
		if n == 100 {
			return boom
		}
		return nil
	}
	if err := fill(context.Background(), ops, revision, 1<<62); !errors.Is(err, boom) {
		t.Fatalf("fill = %v, want the failed request's error", err)
	}
	broken := func(context.Context) (int64, error) { return 0, boom }
	if err := fill(context.Background(), ops, broken, 10); !errors.Is(err, boom) {
		t.Fatalf("fill = %v, want the status error", err)
	}
}
