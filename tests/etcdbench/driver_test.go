package main

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// procCPU reads this process's own CPU time: it grows by about what a
// busy loop burns, never by more than the wall time it ran.
func TestProcCPUCountsBusyTime(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	before, err := procCPU(self)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	x := 0
	for time.Since(start) < 300*time.Millisecond {
		x++
	}
	wall := time.Since(start)
	after, err := procCPU(self)
	if err != nil {
		t.Fatal(err)
	}
	used := after - before
	// One goroutine spun for 300 ms of wall time: the shared machine may
	// have lent it much less of a core, but some, and the clock tick is 10 ms.
	if used <= 0 || used > wall+2*ticks(1)+100*time.Millisecond {
		t.Errorf("busy loop of %s wall time (x=%d): cpu time grew by %s", wall, x, used)
	}
	if _, err := procCPU("0"); err == nil {
		t.Error("cpu time of pid 0: no error")
	}
}

// machineCPU counts at least what this process used.
func TestMachineCPU(t *testing.T) {
	m0, err := machineCPU()
	if err != nil {
		t.Fatal(err)
	}
	self := strconv.Itoa(os.Getpid())
	p0, _ := procCPU(self)
	start := time.Now()
	for time.Since(start) < 200*time.Millisecond {
	}
	m1, err := machineCPU()
	if err != nil {
		t.Fatal(err)
	}
	p1, _ := procCPU(self)
	if m1-m0 < p1-p0-2*ticks(1) {
		t.Errorf("machine busy time grew by %s, less than this process's %s", m1-m0, p1-p0)
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		in := append([]float64(nil), tc.in...)
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
		for i := range in {
			if in[i] != tc.in[i] {
				t.Errorf("median reordered its input: %v", tc.in)
			}
		}
	}
}

// The ratio of a topology's rounds is the median of each round's ratio,
// over the rounds that have both systems.
func TestMedianRatio(t *testing.T) {
	r := func(system string, ops float64) result {
		return result{System: system, Workload: "grant", OpsPerS: ops}
	}
	tr := topoReport{Rounds: []round{
		{Results: []result{r("concord", 200), r("etcd", 100)}}, // 2
		{Results: []result{r("etcd", 100), r("concord", 400)}}, // 4
		{Results: []result{r("concord", 300), r("etcd", 100)}}, // 3
		{Results: []result{r("concord", 900)}},                 // no etcd: left out
	}}
	tr.summarize([]string{"grant"})
	s := tr.Medians[0]
	if s.OpsRatio == nil || *s.OpsRatio != 3 {
		t.Errorf("ratio %v, want 3", s.OpsRatio)
	}
	if s.Concord.OpsPerS != 350 || s.Etcd.OpsPerS != 100 {
		t.Errorf("medians: concord %v, etcd %v", s.Concord.OpsPerS, s.Etcd.OpsPerS)
	}
	if tr.Echo != nil || tr.KeepaliveOfEcho != nil {
		t.Errorf("echo figures with no echo results: %v %v", tr.Echo, tr.KeepaliveOfEcho)
	}
}

func TestThousands(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 999.4: "999", 999.5: "1,000", 1234567: "1,234,567"} {
		if got := thousands(in); got != want {
			t.Errorf("thousands(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.clients != 32 || cfg.rounds != 3 || cfg.duration != 10*time.Second || len(cfg.topologies) != 2 ||
		strings.Join(cfg.workloads, ",") != "grant,put,keepalive" {
		t.Errorf("defaults: %+v", cfg)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--clients", "0"}, "--clients: 0"},
		{[]string{"--rounds", "0"}, "--rounds: 0"},
		{[]string{"--duration", "0s"}, "--duration: 0s"},
		{[]string{"--warmup", "-1s"}, "--warmup: -1s"},
		{[]string{"--value-bytes", "1"}, "--value-bytes: 1"},
		{[]string{"--workloads", "grant,nope"}, `unknown workload "nope"`},
		{[]string{"--workloads", "put,put"}, `"put" twice`},
		{[]string{"--topologies", "ring"}, `unknown topology "ring"`},
		{[]string{"--topologies", "single,single"}, `"single" twice`},
		{[]string{"--json", "--markdown"}, "choose one"},
		{[]string{"extra"}, "unexpected arguments"},
	} {
		if _, err := parseFlags(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFlags(%q): %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}
