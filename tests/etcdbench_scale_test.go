package tests

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// ebScaleResult is the part of `etcdbench scale --json-file` these tests
// read: one system's figures.
type ebScaleResult struct {
	System           string    `json:"system"`
	LoadPutsPerS     *float64  `json:"load_puts_per_s"`
	RSSAfterLoad     *int64    `json:"rss_bytes_after_load"`
	RSSPeakLoad      *int64    `json:"rss_peak_bytes_during_load"`
	DiskAfterLoad    *int64    `json:"data_dir_bytes_after_load"`
	RestartS         *float64  `json:"restart_s"`
	RestartTries     []float64 `json:"restart_s_tries"`
	RestartRwTries   []float64 `json:"restart_s_after_rewrites_tries"`
	SnapshotTries    []float64 `json:"snapshot_write_s_tries"`
	SnapshotRwTries  []float64 `json:"snapshot_write_s_after_rewrites_tries"`
	SnapshotS        *float64  `json:"snapshot_write_s"`
	SnapshotReqS     *float64  `json:"snapshot_request_s"`
	SnapshotBytes    *int64    `json:"snapshot_bytes"`
	Count            *int64    `json:"count"`
	CountMS          *float64  `json:"count_ms_median"`
	ReadPasses       *int      `json:"read_passes"`
	PutP99Growth     *float64  `json:"put_p99_with_reads_over_without"`
	PutP99Growths    []float64 `json:"put_p99_with_reads_over_without_rounds"`
	RewritePutsPerS  *float64  `json:"rewrite_puts_per_s"`
	RSSAfterRewrite  *int64    `json:"rss_bytes_after_rewrites"`
	RSSPeakRewrite   *int64    `json:"rss_peak_bytes_restart_and_rewrites"`
	DiskAfterRewrite *int64    `json:"data_dir_bytes_after_rewrites"`
	RestartRewriteS  *float64  `json:"restart_s_after_rewrites"`
	SnapshotRewriteS *float64  `json:"snapshot_write_s_after_rewrites"`
	SnapshotRwReqS   *float64  `json:"snapshot_request_s_after_rewrites"`
	SnapshotRwBytes  *int64    `json:"snapshot_bytes_after_rewrites"`
	ExpiryLagS       *float64  `json:"expiry_lag_s"`
	KeepaliveCPUPct  *float64  `json:"keepalive_server_cpu_pct_of_core"`
	KeepaliveRate    *float64  `json:"keepalive_renewals_per_s"`
}

// `etcdbench scale` (make bench-scale) at a tiny size, Concord only: every
// phase runs, restarts included, each figure is there and plausible, the
// table is printed, and nothing is left running. The full-size run is a
// benchmark, outside make test.
func TestEtcdbenchScaleSmokeConcordOnly(t *testing.T) {
	t.Parallel()
	jsonFile := filepath.Join(t.TempDir(), "scale.json")
	r := startEtcdbench(t, "scale", "--concord", binPath, "--only-concord", "--json-file", jsonFile,
		"--keys", "600", "--read-keys", "250", "--page-limit", "100", "--clients", "2", "--inflight", "2", "--count-tries", "2",
		"--restart-tries", "3", "--snapshot-tries", "3",
		"--put-clients", "2", "--put-duration", "300ms", "--warmup", "100ms", "--settle", "0s", "--rewrites", "2",
		"--leases", "30", "--expiry-ttl", "2", "--keepalive-ttl", "3", "--keepalive-window", "1s")
	if code := r.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("exit code %d\nstdout:\n%s", code, r.stdout.Bytes())
	}
	// The first start and three restarts after the load and after the
	// rewrites.
	r.checkNothingLeft(t, 7)
	out := r.stdout.String()
	for _, want := range []string{"Concord against etcd at scale on ", "machine: ", "Concord ÷ etcd",
		"load 600 keys (100-byte values), puts/s", "kill -9, then until a linearizable get answers",
		"put p99, reads of a 250-key prefix back to back", "30 leases expiring: last deadline to none left",
		"Raft snapshot after the load: time to write it", "  restart after the rewrites ÷ after the load",
		"Raft snapshot after the rewrites: its size", "  snapshot write after the rewrites ÷ after the load"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	data, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Concord *ebScaleResult `json:"concord"`
		Etcd    *ebScaleResult `json:"etcd"`
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("--json-file: %v\n%s", err, data)
	}
	c := rep.Concord
	if c == nil || rep.Etcd != nil || c.System != "concord" {
		t.Fatalf("systems: concord %+v, etcd %+v", c, rep.Etcd)
	}
	pos := func(name string, x *float64) {
		if x == nil || *x <= 0 {
			t.Errorf("%s: %v, want a figure above 0", name, x)
		}
	}
	pos("load puts/s", c.LoadPutsPerS)
	// Each timed phase run three times shows every try, and their median.
	for _, m := range []struct {
		name  string
		shown *float64
		tries []float64
	}{{"restart", c.RestartS, c.RestartTries}, {"restart after rewrites", c.RestartRewriteS, c.RestartRwTries},
		{"snapshot", c.SnapshotS, c.SnapshotTries}, {"snapshot after rewrites", c.SnapshotRewriteS, c.SnapshotRwTries}} {
		if len(m.tries) != 3 || m.shown == nil {
			t.Errorf("%s: %v shown, tries %v; want 3 tries", m.name, m.shown, m.tries)
			continue
		}
		s := slices.Sorted(slices.Values(m.tries))
		if *m.shown != s[1] {
			t.Errorf("%s: %v shown, want the median of %v", m.name, *m.shown, m.tries)
		}
	}
	pos("restart s", c.RestartS)
	pos("restart after rewrites s", c.RestartRewriteS)
	pos("count ms", c.CountMS)
	pos("rewrite puts/s", c.RewritePutsPerS)
	pos("snapshot write s", c.SnapshotS)
	pos("snapshot write s after rewrites", c.SnapshotRewriteS)
	// The write is part of the request's round trip.
	if c.SnapshotS != nil && c.SnapshotReqS != nil && *c.SnapshotReqS < *c.SnapshotS {
		t.Errorf("snapshot: written in %.4f s, requested and answered in %.4f s", *c.SnapshotS, *c.SnapshotReqS)
	}
	if c.SnapshotRewriteS != nil && c.SnapshotRwReqS != nil && *c.SnapshotRwReqS < *c.SnapshotRewriteS {
		t.Errorf("snapshot after rewrites: written in %.4f s, requested and answered in %.4f s", *c.SnapshotRewriteS, *c.SnapshotRwReqS)
	}
	// 600 keys with 100-byte values: tens of kB, and more once each has a
	// second version in the history.
	if c.SnapshotBytes == nil || c.SnapshotRwBytes == nil || *c.SnapshotBytes < 600*100 || *c.SnapshotRwBytes <= *c.SnapshotBytes {
		t.Errorf("snapshot sizes: %v after the load, %v after the rewrites", c.SnapshotBytes, c.SnapshotRwBytes)
	}
	pos("keep-alive renewals/s", c.KeepaliveRate)
	for name, b := range map[string]*int64{"rss after load": c.RSSAfterLoad, "disk after load": c.DiskAfterLoad,
		"rss after rewrites": c.RSSAfterRewrite, "disk after rewrites": c.DiskAfterRewrite} {
		if b == nil || *b < 1<<20 {
			t.Errorf("%s: %v bytes", name, b)
		}
	}
	// The most resident memory since the start is at least what is
	// resident now.
	for _, m := range [][2]*int64{{c.RSSPeakLoad, c.RSSAfterLoad}, {c.RSSPeakRewrite, c.RSSAfterRewrite}} {
		if m[0] == nil || m[1] == nil || *m[0] < *m[1] {
			t.Errorf("peak resident memory %v below the resident memory %v measured with it", m[0], m[1])
		}
	}
	// Five rounds of the reads phase by default; the one shown is the
	// median of their ratios.
	if g := c.PutP99Growths; len(g) != 5 || c.PutP99Growth == nil || *c.PutP99Growth != slices.Sorted(slices.Values(g))[2] {
		t.Errorf("put p99 ratio %v, rounds %v: want 5 rounds and their median", c.PutP99Growth, g)
	}
	if c.Count == nil || *c.Count != 600 {
		t.Errorf("count: %v, want 600", c.Count)
	}
	if c.ReadPasses == nil || *c.ReadPasses < 1 {
		t.Errorf("read passes: %v", c.ReadPasses)
	}
	// The leases are asked about from a second before the deadline: none
	// may go before it, and on an idle node they go within a few ticks.
	if c.ExpiryLagS == nil || *c.ExpiryLagS < 0 || *c.ExpiryLagS > 30 {
		t.Errorf("expiry lag: %v s", c.ExpiryLagS)
	}
	if c.KeepaliveCPUPct == nil || *c.KeepaliveCPUPct < 0 {
		t.Errorf("keep-alive CPU: %v", c.KeepaliveCPUPct)
	}
}

// Bad scale flags stop it before any server starts.
func TestEtcdbenchScaleRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"scale", "--concord", binPath, "--only-concord", "--keys", "0"}, "--keys: 0"},
		{[]string{"scale", "--concord", binPath, "--only-concord", "--page-limit", "20000"}, "--page-limit: 20000"},
		{[]string{"scale", "--concord", binPath, "--etcd", "/nonexistent/etcd"}, "apt-get install -y etcd-server"},
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
