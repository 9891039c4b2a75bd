package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// machine describes where the run happened.
type machine struct {
	CPU      string `json:"cpu"`
	Cores    int    `json:"cores"`
	MemGiB   int    `json:"mem_gib"`
	Kernel   string `json:"kernel"`
	LoadAvg1 string `json:"load_avg_1m_before"` // load average of the minute before the run
}

func readMachine() machine {
	m := machine{CPU: "unknown", Cores: runtime.NumCPU(), Kernel: "unknown", LoadAvg1: "unknown"}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.Atoi(f[1])
				m.MemGiB = (kb + 1<<19) >> 20
			}
		}
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(data))
	}
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(data)); len(f) > 0 {
			m.LoadAvg1 = f[0]
		}
	}
	return m
}

// stats are one system's figures for one workload: the median of each
// over the rounds, taken separately.
type stats struct {
	OpsPerS      float64   `json:"ops_per_s"`
	P50ms        float64   `json:"p50_ms"`
	P99ms        float64   `json:"p99_ms"`
	ServerCPUus  float64   `json:"server_cpu_us_per_op"`
	ClientCPUus  float64   `json:"client_cpu_us_per_op"`
	BusyPct      float64   `json:"busy_pct"`
	OtherPct     float64   `json:"other_pct"`
	Errors       int64     `json:"errors"` // over all rounds
	RoundOpsPerS []float64 `json:"ops_per_s_by_round"`
}

// summary is one workload on one topology: both systems' medians and
// Concord ÷ etcd, the median of the per-round ratios (each round's pair ran
// back to back, so it shares the machine's mood).
type summary struct {
	Workload string   `json:"workload"`
	Concord  *stats   `json:"concord,omitempty"`
	Etcd     *stats   `json:"etcd,omitempty"`
	OpsRatio *float64 `json:"ops_ratio,omitempty"`
	CPURatio *float64 `json:"server_cpu_ratio,omitempty"`
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// medianOf returns the medians of rs, or nil if there are none.
func medianOf(rs []result) *stats {
	if len(rs) == 0 {
		return nil
	}
	var st stats
	col := func(f func(r result) float64) float64 {
		var xs []float64
		for _, r := range rs {
			xs = append(xs, f(r))
		}
		return median(xs)
	}
	st.OpsPerS = col(func(r result) float64 { return r.OpsPerS })
	st.P50ms = col(func(r result) float64 { return r.P50ms })
	st.P99ms = col(func(r result) float64 { return r.P99ms })
	st.ServerCPUus = col(func(r result) float64 { return r.ServerCPUus })
	st.ClientCPUus = col(func(r result) float64 { return r.ClientCPUus })
	st.BusyPct = col(func(r result) float64 { return r.BusyPct })
	st.OtherPct = col(func(r result) float64 { return r.OtherPct })
	for _, r := range rs {
		st.Errors += r.Errors
		st.RoundOpsPerS = append(st.RoundOpsPerS, r.OpsPerS)
	}
	return &st
}

// find returns the result of system and workload in a round.
func (rd *round) find(system, workload string) (result, bool) {
	for _, r := range rd.Results {
		if r.System == system && r.Workload == workload {
			return r, true
		}
	}
	return result{}, false
}

// medianRatio is the median over rounds of f(a)/f(b) for the rounds that
// have both results, or nil.
func (tr *topoReport) medianRatio(sysA, sysB, workload string, f func(result) float64) *float64 {
	var xs []float64
	for i := range tr.Rounds {
		a, okA := tr.Rounds[i].find(sysA, workload)
		b, okB := tr.Rounds[i].find(sysB, workload)
		if okA && okB && f(b) > 0 {
			xs = append(xs, f(a)/f(b))
		}
	}
	if len(xs) == 0 {
		return nil
	}
	m := median(xs)
	return &m
}

func (tr *topoReport) summarize(workloads []string) {
	collect := func(system, workload string) []result {
		var rs []result
		for i := range tr.Rounds {
			if r, ok := tr.Rounds[i].find(system, workload); ok {
				rs = append(rs, r)
			}
		}
		return rs
	}
	ops := func(r result) float64 { return r.OpsPerS }
	cpu := func(r result) float64 { return r.ServerCPUus }
	for _, w := range workloads {
		tr.Medians = append(tr.Medians, summary{Workload: w,
			Concord: medianOf(collect("concord", w)), Etcd: medianOf(collect("etcd", w)),
			OpsRatio: tr.medianRatio("concord", "etcd", w, ops), CPURatio: tr.medianRatio("concord", "etcd", w, cpu)})
	}
	tr.Echo = medianOf(collect("echo", "keepalive"))
	tr.KeepaliveOfEcho = tr.medianRatio("concord", "echo", "keepalive", ops)
}

func (tr *topoReport) title() string {
	if tr.Nodes == 1 {
		return "single: 1 Concord node against 1 etcd member"
	}
	return fmt.Sprintf("%s: %d Concord nodes against %d etcd members", tr.Name, tr.Nodes, tr.Nodes)
}

func (rep *report) header(w io.Writer, prefix string) {
	m := rep.Machine
	fmt.Fprintf(w, "%sConcord against etcd on %s, the run took %s\n", prefix, rep.Date, rep.elapsed.Round(time.Second))
	fmt.Fprintf(w, "%smachine: %d × %s, %d GiB, Linux %s; load average %s when the run began\n", prefix, m.Cores, m.CPU, m.MemGiB, m.Kernel, m.LoadAvg1)
	etcd := rep.Etcd
	if etcd == "" {
		etcd = "not run (--only-concord)"
	}
	fmt.Fprintf(w, "%sconcord %s; etcd: %s\n", prefix, rep.Concord, etcd)
	fmt.Fprintf(w, "%s%d clients, each on its own connection with 1 request in flight; %gs warm-up, then %gs measured per workload; %d-byte values\n",
		prefix, rep.Clients, rep.WarmupS, rep.DurationS, rep.ValueBytes)
	fmt.Fprintf(w, "%smedian of %d round(s); each round starts a fresh Concord and a fresh etcd, and which goes first alternates\n", prefix, rep.Rounds)
}

func fmtRatio(x *float64) string {
	if x == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *x)
}

func fmtRounds(xs []float64) string {
	var s []string
	for _, x := range xs {
		s = append(s, fmt.Sprintf("%.0f", x))
	}
	return strings.Join(s, " ")
}

// printTable prints the medians as a text table.
func (rep *report) printTable(w io.Writer) {
	rep.header(w, "")
	row := func(workload, system string, st *stats) {
		fmt.Fprintf(w, "%-16s %-8s %9.0f %8.2f %8.2f %11.1f %11.1f %5.0f%% %5.0f%% %6d  %s\n", workload, system,
			st.OpsPerS, st.P50ms, st.P99ms, st.ServerCPUus, st.ClientCPUus, st.BusyPct, st.OtherPct, st.Errors, fmtRounds(st.RoundOpsPerS))
	}
	for _, tr := range rep.Topologies {
		fmt.Fprintf(w, "\n%s\n", tr.title())
		fmt.Fprintf(w, "%-16s %-8s %9s %8s %8s %11s %11s %6s %6s %6s  %s\n", "workload", "system", "ops/s", "p50 ms", "p99 ms",
			"server µs/op", "client µs/op", "busy", "other", "errors", "ops/s by round")
		for _, s := range tr.Medians {
			name := s.Workload
			if s.Concord != nil {
				row(name, "concord", s.Concord)
				name = ""
			}
			if s.Etcd != nil {
				row(name, "etcd", s.Etcd)
				name = ""
			}
			if s.OpsRatio != nil {
				fmt.Fprintf(w, "%-16s Concord ÷ etcd: ops/s %s, server CPU per op %s\n", name, fmtRatio(s.OpsRatio), fmtRatio(s.CPURatio))
			}
			if s.Workload == "keepalive" && tr.Echo != nil {
				row("", "echo", tr.Echo)
				fmt.Fprintf(w, "%-16s Concord's keep-alive: %s of the echo floor's ops/s\n", "", fmtRatio(tr.KeepaliveOfEcho))
			}
		}
		if !hasWorkload(tr, "keepalive") && tr.Echo != nil {
			row("echo floor", "echo", tr.Echo)
		}
	}
	fmt.Fprintf(w, "\nserver µs/op: user + system CPU time of the system's server processes in the window (summed over\n"+
		"the processes of a cluster) per op; for echo, the responder plus Concord's processes, whose embedded NATS\n"+
		"servers carry the bus. client µs/op: this program, the load generator, on the same cores. busy:\n"+
		"server + client CPU as a share of the machine's %d cores. other: CPU every other process on the\n"+
		"machine used in the window, the noise in these figures. echo: a NATS responder that sends each\n"+
		"keep-alive request back as it came, on Concord's bus, the floor of any service behind NATS.\n", rep.Machine.Cores)
}

func hasWorkload(tr topoReport, w string) bool {
	for _, s := range tr.Medians {
		if s.Workload == w {
			return true
		}
	}
	return false
}

// printMarkdown prints the medians as one Markdown table per topology, as
// docs/performance.md shows them.
func (rep *report) printMarkdown(w io.Writer) {
	rep.header(w, "- ")
	names := map[string]string{"grant": "lease grant", "put": "put with a lease", "keepalive": "keep-alive, one lease a request",
		"get": "get, linearizable", "get-serializable": "get, serializable"}
	cell := func(st *stats) string {
		if st == nil {
			return "- | - | - | -"
		}
		return fmt.Sprintf("%s | %.1f / %.1f | %.0f | %.0f", thousands(st.OpsPerS), st.P50ms, st.P99ms, st.ServerCPUus, st.ClientCPUus)
	}
	for _, tr := range rep.Topologies {
		fmt.Fprintf(w, "\n%s, median of %d rounds:\n\n", tr.title(), rep.Rounds)
		fmt.Fprintln(w, "| workload | Concord ops/s | p50 / p99 ms | server CPU µs/op | client CPU µs/op | etcd ops/s | p50 / p99 ms | server CPU µs/op | client CPU µs/op | Concord ÷ etcd, ops/s | CPU/op |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
		for _, s := range tr.Medians {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", names[s.Workload], cell(s.Concord), cell(s.Etcd), fmtRatio(s.OpsRatio), fmtRatio(s.CPURatio))
		}
		if tr.Echo != nil {
			fmt.Fprintf(w, "| NATS echo responder (the floor), keep-alive request | %s | - | - | - | - | Concord's keep-alive: %s of it | |\n",
				cell(tr.Echo), fmtRatio(tr.KeepaliveOfEcho))
		}
	}
}

// thousands formats x rounded, with commas between thousands.
func thousands(x float64) string {
	s := strconv.FormatInt(int64(x+0.5), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
