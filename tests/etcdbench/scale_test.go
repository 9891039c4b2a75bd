package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestStatusKB(t *testing.T) {
	status := "Name:\tetcd\nVmPeak:\t 2000000 kB\nVmHWM:\t  812345 kB\nVmRSS:\t  756789 kB\nThreads:\t12\n"
	for field, want := range map[string]int64{"VmRSS": 756789, "VmHWM": 812345, "VmPeak": 2000000} {
		got, err := statusKB(status, field)
		if err != nil || got != want {
			t.Errorf("statusKB(%s) = %d, %v; want %d", field, got, err, want)
		}
	}
	for _, tc := range []struct{ status, want string }{
		{"Name:\tx\n", "no VmRSS line"},
		{"VmRSS:\t12 MB\n", `"12 MB" is not a number of kB`},
		{"VmRSS:\tmany kB\n", `"many kB" is not a number of kB`},
		{"VmRSS:\t-3 kB\n", `"-3 kB" is not a number of kB`},
		{"VmRSS:\n", `"" is not a number of kB`},
		// A field whose name only starts like the one asked for is not it.
		{"VmRSSX:\t5 kB\n", "no VmRSS line"},
	} {
		if _, err := statusKB(tc.status, "VmRSS"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("statusKB(%q): %v, want an error with %q", tc.status, err, tc.want)
		}
	}
}

// vmRSS of this process is what its status file says, in bytes, and a
// process that does not exist is an error.
func TestVmRSSOfSelf(t *testing.T) {
	rss, peak, err := vmRSS(strconv.Itoa(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	if peak < rss {
		t.Errorf("peak resident memory %d below the present %d", peak, rss)
	}
	// A Go test binary holds at least a megabyte and, here, far less than
	// a terabyte.
	if rss < 1<<20 || rss > 1<<40 {
		t.Errorf("resident memory of this test: %d bytes", rss)
	}
	if _, _, err := vmRSS("0"); err == nil {
		t.Error("resident memory of pid 0: no error")
	}
}

// dirUsage counts the blocks files hold, as du does: a file written in
// full counts its size, a sparse file only what it wrote, a hard link
// once, subdirectories too.
func TestDirUsage(t *testing.T) {
	dir := t.TempDir()
	empty, err := dirUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	const mb = 1 << 20
	if err := os.MkdirAll(filepath.Join(dir, "wal", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	full := filepath.Join(dir, "wal", "x", "full")
	if err := os.WriteFile(full, bytes.Repeat([]byte("v"), 2*mb), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(full, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(512 * mb); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, err := dirUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	// 2 MiB of data, once; directories and the sparse file's metadata add
	// a little, never another 2 MiB.
	if d := got - empty; d < 2*mb || d > 3*mb {
		t.Errorf("usage grew by %d bytes for one 2 MiB file, a link to it and a sparse 512 MiB file", d)
	}
	if _, err := dirUsage(filepath.Join(dir, "missing")); err == nil {
		t.Error("usage of a missing directory: no error")
	}
}

func TestUnitFormat(t *testing.T) {
	for _, tc := range []struct {
		u    unit
		x    float64
		want string
	}{
		{perSecond, 10213.4, "10,213"},
		{bytesMiB, 990 << 20, "990 MiB"},
		{bytesMiB, 1234.5 * (1 << 20), "1,235 MiB"},
		{bytesMiB, 36.7 * (1 << 20), "36.7 MiB"},
		{seconds, 9.504, "9.50 s"},
		{millis, 83.04, "83.0 ms"},
		{millis, 1.104, "1.10 ms"},
		{factor, 1.926, "1.93"},
		{pctCore, 2.44, "2.4%"},
		{whole, 12, "12"},
	} {
		if got := tc.u.format(&tc.x); got != tc.want {
			t.Errorf("unit %d, %v: %q, want %q", tc.u, tc.x, got, tc.want)
		}
	}
	if got := seconds.format(nil); got != "-" {
		t.Errorf("a figure not measured: %q, want -", got)
	}
}

func TestScaleRatio(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	for _, tc := range []struct {
		c, e *float64
		want string
	}{
		{f(990), f(739), "1.34"},
		{f(83), f(728), "0.11"},
		{f(0), f(5), "0.00"},
		{f(5), f(0), "-"}, // no ratio to nothing
		{nil, f(5), "-"},
		{f(5), nil, "-"},
	} {
		if got := scaleRatio(tc.c, tc.e); got != tc.want {
			t.Errorf("scaleRatio(%v, %v) = %q, want %q", tc.c, tc.e, got, tc.want)
		}
	}
}

func TestParseScaleFlags(t *testing.T) {
	cfg, err := parseScaleFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.keys != 1_000_000 || cfg.valueBytes != 100 || cfg.rewrites != 0 || cfg.readKeys != 100_000 ||
		cfg.pageLimit != maxPageLimit || cfg.leases != 100_000 || cfg.keepaliveTTL != 60 || cfg.renewEvery() != 20*time.Second ||
		cfg.readRounds != 5 {
		t.Errorf("defaults: %+v", cfg)
	}
	cfg, err = parseScaleFlags([]string{"--keys", "20000", "--leases", "5000", "--rewrites", "5", "--only-concord"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.keys != 20000 || cfg.leases != 5000 || cfg.rewrites != 5 || !cfg.onlyConcord || cfg.readPrefixKeys() != 20000 {
		t.Errorf("--keys 20000 --leases 5000 --rewrites 5 --only-concord: %+v, read prefix %d keys", cfg, cfg.readPrefixKeys())
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--keys", "0"}, "--keys: 0"},
		{[]string{"--keys", "100000000"}, "--keys: 100000000"},
		{[]string{"--value-bytes", "1"}, "--value-bytes: 1"},
		{[]string{"--rewrites", "-1"}, "--rewrites: -1"},
		{[]string{"--clients", "0"}, "--clients: 0"},
		{[]string{"--inflight", "0"}, "--inflight: 0"},
		{[]string{"--count-tries", "0"}, "--count-tries: 0"},
		{[]string{"--restart-tries", "0"}, "--restart-tries: 0"},
		{[]string{"--snapshot-tries", "0"}, "--snapshot-tries: 0"},
		{[]string{"--read-keys", "0"}, "--read-keys: 0"},
		{[]string{"--page-limit", "10001"}, "--page-limit: 10001"},
		{[]string{"--page-limit", "0"}, "--page-limit: 0"},
		{[]string{"--readers", "0"}, "--readers: 0"},
		{[]string{"--read-rounds", "0"}, "--read-rounds: 0"},
		{[]string{"--put-clients", "0"}, "--put-clients: 0"},
		{[]string{"--put-duration", "0s"}, "--put-duration: 0s"},
		{[]string{"--warmup", "-1s"}, "--warmup: -1s"},
		{[]string{"--leases", "-1"}, "--leases: -1"},
		{[]string{"--expiry-ttl", "1"}, "--expiry-ttl: 1"},
		{[]string{"--keepalive-ttl", "2"}, "--keepalive-ttl: 2"},
		{[]string{"--keepalive-window", "0s"}, "--keepalive-window: 0s"},
		{[]string{"--poll", "0s"}, "--poll: 0s"},
		{[]string{"--settle", "-1s"}, "--settle: -1s"},
		{[]string{"--restart-timeout", "0s"}, "--restart-timeout: 0s"},
		{[]string{"--expiry-timeout", "0s"}, "--expiry-timeout: 0s"},
		{[]string{"--keys", "many"}, "invalid value"},
		{[]string{"extra"}, "unexpected arguments"},
	} {
		if _, err := parseScaleFlags(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseScaleFlags(%q): %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}

// The readers' prefix holds exactly the first readKeys keys, and keys sort
// in index order within it, so that a paged read continues where the last
// page ended.
func TestScaleKeys(t *testing.T) {
	const n, group = 2500, 1000
	var in []string
	for i := range n {
		if k := scaleKey(i, group); strings.HasPrefix(k, readPrefix) {
			in = append(in, k)
		}
	}
	if len(in) != group {
		t.Fatalf("%d of %d keys under %s, want %d", len(in), n, readPrefix, group)
	}
	if !sort.StringsAreSorted(in) {
		t.Error("keys under the readers' prefix are not in index order")
	}
	// Group 1 must not be read as a prefix of group 10 and up.
	if strings.HasPrefix(scaleKey(10*group, group), "scale.1.") {
		t.Errorf("key %s of group 10 falls under group 1's prefix", scaleKey(10*group, group))
	}
	if got := scaleKey(maxScaleKeys, 100_000); got != "scale.999.99999999" {
		t.Errorf("largest key: %s", got)
	}
}

func TestChunks(t *testing.T) {
	ids := make([]int64, 25_001)
	for i := range ids {
		ids[i] = int64(i + 1)
	}
	parts := chunks(ids, renewChunk)
	var sizes []int
	var again []int64
	for _, p := range parts {
		sizes = append(sizes, len(p))
		again = append(again, p...)
	}
	if !slices.Equal(sizes, []int{10_000, 10_000, 5_001}) || !slices.Equal(again, ids) {
		t.Errorf("chunks of 25,001 ids: sizes %v, in order: %v", sizes, slices.Equal(again, ids))
	}
	// A chunk cannot grow into the next one's ids.
	parts[0] = append(parts[0], -1)
	if ids[10_000] != 10_001 {
		t.Error("appending to a chunk overwrote the next one")
	}
	if got := chunks(nil, 10); got != nil {
		t.Errorf("chunks of nothing: %v", got)
	}
}

// The table names the machine and the date, shows "-" for a system or a
// phase not run, and has the rewrite and lease rows only when they ran.
func TestScaleReportPrint(t *testing.T) {
	cfg, err := parseScaleFlags([]string{"--keys", "20000", "--leases", "0"})
	if err != nil {
		t.Fatal(err)
	}
	rep := &scaleReport{Date: "2026-12-03 16:05 UTC", Machine: machine{CPU: "AMD EPYC", Cores: 2, MemGiB: 24, Kernel: "6.1", LoadAvg1: "0.5"},
		Elapsed: 65, cfg: cfg,
		Concord: &scaleResult{Version: "v1", LoadPutsPerS: ptr(10200.0), RSSAfterLoad: ptr(int64(990 << 20)), CountMS: ptr(83.0),
			PutAlone: &result{P50ms: 1.1, P99ms: 5}, PutReads: &result{P50ms: 2, P99ms: 10}, PutP99Growth: ptr(2.0)},
		Etcd: &scaleResult{Version: "3.4.23", LoadPutsPerS: ptr(8500.0), RSSAfterLoad: ptr(int64(739 << 20)), CountMS: ptr(728.0)},
	}
	var b bytes.Buffer
	rep.print(&b)
	out := b.String()
	for _, want := range []string{"2026-12-03 16:05 UTC", "the run took 1m5s", "machine: 2 × AMD EPYC, 24 GiB", "concord v1; etcd 3.4.23",
		"Concord ÷ etcd", "load 20,000 keys (100-byte values), puts/s", "10,200", "8,500", "1.20", "990 MiB", "739 MiB", "1.34", "0.11",
		"put p99 with reads ÷ without"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, absent := range []string{"rewrites", "leases expiring"} {
		if strings.Contains(out, absent) {
			t.Errorf("table has %q for a phase not run:\n%s", absent, out)
		}
	}
	// etcd's put latencies were not measured: "-" for them and the ratio.
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "put p99, no reads") {
			if f := strings.Fields(line); f[len(f)-1] != "-" || f[len(f)-2] != "-" {
				t.Errorf("row with no etcd figure: %q", line)
			}
		}
	}

	// After the rewrites: restart and snapshot against the same after the
	// load, for each system.
	cfg.rewrites = 5
	rep.Concord.RestartS, rep.Concord.RestartRewriteS = ptr(4.0), ptr(6.0)
	rep.Concord.SnapshotS, rep.Concord.SnapshotRewriteS = ptr(0.8), ptr(2.0)
	rep.Concord.SnapshotBytes, rep.Concord.SnapshotRewriteBytes = ptr(int64(200<<20)), ptr(int64(500<<20))
	rep.Etcd.RestartS, rep.Etcd.RestartRewriteS = ptr(5.0), ptr(15.0)
	b.Reset()
	rep.print(&b)
	out = b.String()
	for _, want := range []string{
		"Raft snapshot after the load: time to write it                     800.0 ms            -               -",
		"Raft snapshot after the load: its size                              200 MiB            -               -",
		"  restart after the rewrites ÷ after the load                          1.50         3.00            0.50",
		"Raft snapshot after the rewrites: time to write it                2000.0 ms            -               -",
		"Raft snapshot after the rewrites: its size                          500 MiB            -               -",
		"  snapshot write after the rewrites ÷ after the load                   2.50            -               -",
		"snapshot (Concord only; etcd keeps its keys in bbolt", "concord_snapshot_persist_duration_seconds"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}

	cfg.rewrites, cfg.leases, cfg.markdown = 5, 100_000, true
	rep.Etcd = nil
	b.Reset()
	rep.print(&b)
	out = b.String()
	for _, want := range []string{"| | Concord | etcd | Concord ÷ etcd |", "- machine: 2 × AMD EPYC", "etcd not run (--only-concord)",
		"| rewrites (every key 5 times in all), puts/s | - | - | - |", "| 100,000 leases expiring: last deadline to none left | - | - | - |",
		"| resident memory after the load | 990 MiB | - | - |"} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}
}

func TestRestartLogPath(t *testing.T) {
	for _, c := range []struct {
		last string
		kill int
		want string
	}{
		{"/tmp/x/concord/n1.log", 1, "/tmp/x/concord/n1.restart1.log"},
		{"/tmp/x/concord/n1.restart1.log", 2, "/tmp/x/concord/n1.restart2.log"},
		{"/tmp/x/concord/n1.restart12.log", 13, "/tmp/x/concord/n1.restart13.log"},
		{"/tmp/x/etcd/e1.log", 1, "/tmp/x/etcd/e1.restart1.log"},
	} {
		if got := restartLogPath(c.last, c.kill); got != c.want {
			t.Errorf("restartLogPath(%q, %d) = %q, want %q", c.last, c.kill, got, c.want)
		}
	}
}
