package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The comparison driver (tests/etcdbench, `make bench-etcd`) lives in a
// module of its own, so etcd's client stays out of Concord's; these tests
// build it, run its own unit tests, and run it against Concord and its echo
// floor without etcd, so `make test` needs no etcd server and the driver
// cannot rot. With CONCORD_TEST_ETCD=1 and etcd on PATH, one more test runs
// the comparison itself.

// concordBinVar tells the driver's own tests where the concord binary is
// (tests/etcdbench/scale_reader_test.go), so they need not build it again.
const concordBinVar = "CONCORD_TEST_BINARY"

var (
	etcdbenchOnce sync.Once
	etcdbenchPath string
	etcdbenchErr  string
)

// etcdbench builds the driver once per run (next to the concord binary)
// after running go vet and its unit tests, and returns its path.
func etcdbench(t *testing.T) string {
	t.Helper()
	etcdbenchOnce.Do(func() {
		path := filepath.Join(filepath.Dir(binPath), "etcdbench")
		for _, args := range [][]string{{"vet", "./..."}, {"test", "-count=1", "./..."}, {"build", "-o", path, "."}} {
			p := newProc(t, 10*time.Minute, "go", args...)
			p.cmd.Dir = "etcdbench"
			// Its tests that need a node use the binary built here.
			p.cmd.Env = append(p.cmd.Env, concordBinVar+"="+binPath)
			if out, err := p.combinedOutput(); err != nil {
				etcdbenchErr = "go " + strings.Join(args, " ") + " in tests/etcdbench: " + err.Error() + "\n" + string(out)
				return
			}
		}
		etcdbenchPath = path
	})
	if etcdbenchPath == "" {
		t.Fatal(etcdbenchErr)
	}
	return etcdbenchPath
}

// ebResult, ebStats and ebReport are the parts of the driver's --json
// document these tests read.
type ebResult struct {
	Workload    string             `json:"workload"`
	System      string             `json:"system"`
	Ops         int64              `json:"ops"`
	OpsPerS     float64            `json:"ops_per_s"`
	P50ms       float64            `json:"p50_ms"`
	P99ms       float64            `json:"p99_ms"`
	P999ms      float64            `json:"p999_ms"`
	Errors      int64              `json:"errors"`
	ServerCPUus float64            `json:"server_cpu_us_per_op"`
	ByProcess   map[string]float64 `json:"server_cpu_us_per_op_by_process"`
	ClientCPUus float64            `json:"client_cpu_us_per_op"`
	BusyPct     float64            `json:"busy_pct"`
	OtherPct    float64            `json:"other_pct"`
}

type ebStats struct {
	OpsPerS      float64   `json:"ops_per_s"`
	Errors       int64     `json:"errors"`
	RoundOpsPerS []float64 `json:"ops_per_s_by_round"`
}

type ebReport struct {
	Clients    int      `json:"clients"`
	Rounds     int      `json:"rounds"`
	DurationS  float64  `json:"duration_s"`
	Workloads  []string `json:"workloads"`
	Etcd       string   `json:"etcd_version"`
	Topologies []struct {
		Name   string `json:"name"`
		Nodes  int    `json:"nodes"`
		Rounds []struct {
			Round   int        `json:"round"`
			Order   []string   `json:"order"`
			Results []ebResult `json:"results"`
		} `json:"rounds"`
		Medians []struct {
			Workload string   `json:"workload"`
			Concord  *ebStats `json:"concord"`
			Etcd     *ebStats `json:"etcd"`
			OpsRatio *float64 `json:"ops_ratio"`
		} `json:"medians"`
		Echo            *ebStats `json:"echo"`
		KeepaliveOfEcho *float64 `json:"concord_keepalive_of_echo"`
	} `json:"topologies"`
}

// ebRun is one run of the driver.
type ebRun struct {
	cmd    *exec.Cmd
	tmp    string // its TMPDIR
	stdout bytes.Buffer
	mu     sync.Mutex
	stderr bytes.Buffer
	done   chan struct{}
	err    error
}

// startEtcdbench starts the driver with args and its own TMPDIR; the
// process is killed at cleanup whatever happened.
func startEtcdbench(t *testing.T, args ...string) *ebRun {
	t.Helper()
	r := &ebRun{tmp: t.TempDir(), done: make(chan struct{})}
	p := newProc(t, 8*time.Minute, etcdbench(t), args...)
	r.cmd = p.cmd
	r.cmd.Env = append(os.Environ(), "TMPDIR="+r.tmp)
	r.cmd.Stdout = &r.stdout
	stderr, err := r.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			r.mu.Lock()
			r.stderr.WriteString(sc.Text() + "\n")
			r.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, stderr)
		r.err = p.wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		p.kill()
		<-r.done
		if t.Failed() {
			t.Logf("etcdbench stderr:\n%s", r.errText())
		}
	})
	return r
}

func (r *ebRun) errText() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stderr.String()
}

// wait waits for the driver to exit and returns its exit code.
func (r *ebRun) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(timeout):
		t.Fatalf("etcdbench still running after %s", timeout)
	}
	if r.err == nil {
		return 0
	}
	if ee, ok := r.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	t.Fatalf("etcdbench: %v", r.err)
	return -1
}

var startedPid = regexp.MustCompile(`started (.+) \(pid (\d+)\)`)

// checkNothingLeft checks that every server the driver said it started has
// gone, and that it removed its temporary directory.
func (r *ebRun) checkNothingLeft(t *testing.T, wantServers int) {
	t.Helper()
	started := startedPid.FindAllStringSubmatch(r.errText(), -1)
	if len(started) < wantServers {
		t.Errorf("the driver reported %d servers started, want at least %d", len(started), wantServers)
	}
	for _, m := range started {
		// A pid that is back in use must belong to someone else.
		cmdline, err := os.ReadFile("/proc/" + m[2] + "/cmdline")
		if err != nil {
			continue
		}
		stat, _ := os.ReadFile("/proc/" + m[2] + "/stat")
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && bytes.HasPrefix(stat[i+1:], []byte(" Z")) {
			continue // a zombie has exited
		}
		if bytes.Contains(cmdline, []byte(filepath.Dir(binPath))) || bytes.Contains(cmdline, []byte(r.tmp)) {
			t.Errorf("%s (pid %s) still running: %q", m[1], m[2], cmdline)
		}
	}
	if left, _ := os.ReadDir(r.tmp); len(left) > 0 {
		t.Errorf("the driver left %d entries in its TMPDIR, the first %s", len(left), left[0].Name())
	}
}

// Without etcd, the driver runs Concord, one node and then three, and the
// echo responder on Concord's bus, for two rounds; every figure it prints
// is consistent with the rounds it reports, and nothing is left running.
func TestEtcdbenchSmokeConcordOnly(t *testing.T) {
	workloads := []string{"grant", "put", "keepalive", "get-serializable"}
	r := startEtcdbench(t, "--concord", binPath, "--only-concord", "--json", "--rounds", "2", "--clients", "2",
		"--duration", "300ms", "--warmup", "100ms", "--workloads", strings.Join(workloads, ","))
	if code := r.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("exit code %d\nstdout:\n%s", code, r.stdout.Bytes())
	}
	r.checkNothingLeft(t, 2*(1+1)+2*(3+1))
	var rep ebReport
	if err := json.Unmarshal(r.stdout.Bytes(), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, r.stdout.Bytes())
	}
	if rep.Clients != 2 || rep.Rounds != 2 || rep.DurationS != 0.3 || !slices.Equal(rep.Workloads, workloads) || rep.Etcd != "" {
		t.Errorf("report header: %+v", rep)
	}
	if len(rep.Topologies) != 2 || rep.Topologies[0].Name != "single" || rep.Topologies[0].Nodes != 1 ||
		rep.Topologies[1].Name != "cluster" || rep.Topologies[1].Nodes != 3 {
		t.Fatalf("topologies: %+v", rep.Topologies)
	}
	for _, topo := range rep.Topologies {
		var nodes []string
		for i := 1; i <= topo.Nodes; i++ {
			nodes = append(nodes, fmt.Sprintf("concord n%d", i))
		}
		if len(topo.Rounds) != 2 {
			t.Fatalf("%s: %d rounds", topo.Name, len(topo.Rounds))
		}
		byRound := map[string][]float64{} // system/workload → ops/s by round
		for _, rd := range topo.Rounds {
			if !slices.Equal(rd.Order, []string{"concord"}) {
				t.Errorf("%s round %d: order %v", topo.Name, rd.Round, rd.Order)
			}
			if len(rd.Results) != len(workloads)+1 {
				t.Errorf("%s round %d: %d results", topo.Name, rd.Round, len(rd.Results))
			}
			for _, x := range rd.Results {
				what := topo.Name + " " + x.System + " " + x.Workload
				byRound[x.System+"/"+x.Workload] = append(byRound[x.System+"/"+x.Workload], x.OpsPerS)
				if x.Ops < 1 || x.Errors != 0 || !benchNear(x.OpsPerS, float64(x.Ops)/0.3) {
					t.Errorf("%s: %d ops, %.1f ops/s, %d errors", what, x.Ops, x.OpsPerS, x.Errors)
				}
				if !(x.P50ms > 0 && x.P50ms <= x.P99ms && x.P99ms <= x.P999ms) {
					t.Errorf("%s: p50 %.3f, p99 %.3f, p999 %.3f ms", what, x.P50ms, x.P99ms, x.P999ms)
				}
				want := nodes
				if x.System == "echo" {
					want = append([]string{"echo"}, nodes...)
				} else if x.System != "concord" {
					t.Errorf("%s: system %q", what, x.System)
				}
				var keys []string
				var sum float64
				for k, v := range x.ByProcess {
					keys = append(keys, k)
					sum += v
				}
				slices.Sort(keys)
				slices.Sort(want)
				if !slices.Equal(keys, want) || !benchNear(sum, x.ServerCPUus) {
					t.Errorf("%s: server CPU %.1f µs/op, by process %v; want processes %v", what, x.ServerCPUus, x.ByProcess, want)
				}
				if x.ServerCPUus < 0 || x.ClientCPUus < 0 || x.BusyPct < 0 || x.OtherPct < 0 {
					t.Errorf("%s: negative CPU figures %+v", what, x)
				}
			}
		}
		// Two rounds: each median is the mean of the rounds, and the
		// echo fraction is the median of the per-round fractions.
		if len(topo.Medians) != len(workloads) {
			t.Errorf("%s: %d medians", topo.Name, len(topo.Medians))
		}
		for i, m := range topo.Medians {
			rounds := byRound["concord/"+workloads[i]]
			if m.Workload != workloads[i] || m.Concord == nil || m.Etcd != nil || m.OpsRatio != nil ||
				!slices.Equal(m.Concord.RoundOpsPerS, rounds) || len(rounds) != 2 || !benchNear(m.Concord.OpsPerS, (rounds[0]+rounds[1])/2) {
				t.Errorf("%s median %d: %+v, rounds %v", topo.Name, i, m, rounds)
			}
		}
		ka, echo := byRound["concord/keepalive"], byRound["echo/keepalive"]
		if topo.Echo == nil || len(echo) != 2 || !slices.Equal(topo.Echo.RoundOpsPerS, echo) {
			t.Errorf("%s: echo median %+v, rounds %v", topo.Name, topo.Echo, echo)
		} else if f := topo.KeepaliveOfEcho; f == nil || !benchNear(*f, (ka[0]/echo[0]+ka[1]/echo[1])/2) {
			t.Errorf("%s: keep-alive of echo %v, rounds keep-alive %v, echo %v", topo.Name, f, ka, echo)
		}
	}
}

// Bad flags and a missing etcd stop the driver before any server starts,
// with a message that says what to do.
func TestEtcdbenchSmokeRefuses(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--concord", binPath, "--etcd", "/nonexistent/etcd"}, []string{"etcd not found", "apt-get install -y etcd-server", "--etcd PATH", "--only-concord"}},
		{[]string{"--concord", "/nonexistent/concord", "--only-concord"}, []string{"make build", "--concord PATH"}},
		{[]string{"--concord", binPath, "--only-concord", "--rounds", "0"}, []string{"--rounds: 0"}},
		{[]string{"--concord", binPath, "--only-concord", "--workloads", "grant,watch"}, []string{`unknown workload "watch"`}},
		{[]string{"--concord", binPath, "--only-concord", "--topologies", "single,single"}, []string{`"single" twice`}},
	} {
		r := startEtcdbench(t, tc.args...)
		if code := r.wait(t, time.Minute); code == 0 {
			t.Errorf("%q: exit code 0", tc.args)
		}
		out := r.errText()
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%q: stderr %q, want %q in it", tc.args, out, w)
			}
		}
		if strings.Contains(out, "started") || r.stdout.Len() > 0 {
			t.Errorf("%q: stdout %q, stderr %q: something ran", tc.args, r.stdout.Bytes(), out)
		}
	}
}

// `etcdbench scale` at a few hundred keys, Concord only, every phase but
// the leases' and the rewrites': it reads the prefix in the pages asked
// for, with the reader in a process of its own that is gone at the end.
func TestEtcdbenchSmokeScaleConcordOnly(t *testing.T) {
	out := filepath.Join(t.TempDir(), "scale.json")
	r := startEtcdbench(t, "scale", "--concord", binPath, "--only-concord", "--keys", "300", "--read-keys", "100",
		"--page-limit", "30", "--leases", "0", "--clients", "2", "--inflight", "2", "--put-clients", "2",
		"--restart-tries", "1", "--snapshot-tries", "1", "--count-tries", "1", "--read-rounds", "1",
		"--put-duration", "500ms", "--warmup", "100ms", "--settle", "0s", "--json-file", out)
	if code := r.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("exit code %d\nstdout:\n%s", code, r.stdout.Bytes())
	}
	// The node, the node again after its kill -9, and the reader, which
	// runs as a process of its own.
	r.checkNothingLeft(t, 3)
	if !strings.Contains(r.errText(), "started concord reader 1 (pid ") {
		t.Error("the driver did not start a reader process")
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Concord struct {
			PutAlone *ebResult `json:"put_no_reads"`
			PutReads *ebResult `json:"put_with_reads"`
			Passes   int       `json:"read_passes"`
			Pages    int       `json:"read_pages_per_pass"`
			Growths  []float64 `json:"put_p99_with_reads_over_without_rounds"`
		} `json:"concord"`
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("--json-file: %v\n%s", err, data)
	}
	c := rep.Concord
	if c.Passes < 1 || c.Pages != 4 { // 100 keys in pages of 30
		t.Errorf("%d passes of %d pages, want at least 1 of 4", c.Passes, c.Pages)
	}
	if len(c.Growths) != 1 || c.Growths[0] <= 0 {
		t.Errorf("ratios by round %v, want one", c.Growths)
	}
	for _, x := range []*ebResult{c.PutAlone, c.PutReads} {
		if x == nil || x.Ops < 1 || x.Errors != 0 || x.P99ms <= 0 || x.ClientCPUus <= 0 {
			t.Errorf("puts: %+v", x)
		}
	}
}

// Ctrl-C in the middle of a measurement stops every server and removes the
// data, and the driver exits with 130.
func TestEtcdbenchSmokeInterrupt(t *testing.T) {
	r := startEtcdbench(t, "--concord", binPath, "--only-concord", "--topologies", "cluster", "--rounds", "1",
		"--clients", "2", "--warmup", "0s", "--duration", "2m", "--workloads", "keepalive")
	// The driver says when a workload's load starts.
	checkFor(t, 2*time.Minute, 50*time.Millisecond, func() error {
		select {
		case <-r.done:
			t.Fatalf("etcdbench exited early: %v", r.err)
		default:
		}
		if !strings.Contains(r.errText(), "concord keepalive: measuring") {
			return errors.New("the keep-alive load has not started")
		}
		return nil
	})
	if err := r.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(t, time.Minute); code != 130 {
		t.Errorf("exit code %d after SIGINT, want 130", code)
	}
	if !strings.Contains(r.errText(), "interrupted; every server stopped") {
		t.Errorf("stderr does not say it was interrupted")
	}
	if r.stdout.Len() > 0 {
		t.Errorf("stdout after an interrupt: %q", r.stdout.Bytes())
	}
	r.checkNothingLeft(t, 3)
}

// With CONCORD_TEST_ETCD=1 (and etcd on PATH), the comparison itself, one
// node against one member, two short rounds: the order alternates and the
// ratio is the median of the per-round ratios.
func TestEtcdbenchWithEtcd(t *testing.T) {
	if os.Getenv("CONCORD_TEST_ETCD") == "" {
		t.Skip("set CONCORD_TEST_ETCD=1 to run the driver against etcd (apt-get install -y etcd-server)")
	}
	r := startEtcdbench(t, "--concord", binPath, "--json", "--topologies", "single", "--rounds", "2", "--clients", "2",
		"--duration", "300ms", "--warmup", "100ms")
	if code := r.wait(t, 5*time.Minute); code != 0 {
		t.Fatalf("exit code %d\nstdout:\n%s", code, r.stdout.Bytes())
	}
	r.checkNothingLeft(t, 2*3)
	var rep ebReport
	if err := json.Unmarshal(r.stdout.Bytes(), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, r.stdout.Bytes())
	}
	if rep.Etcd == "" || len(rep.Topologies) != 1 || len(rep.Topologies[0].Rounds) != 2 {
		t.Fatalf("report: %+v", rep)
	}
	topo := rep.Topologies[0]
	if !slices.Equal(topo.Rounds[0].Order, []string{"concord", "etcd"}) || !slices.Equal(topo.Rounds[1].Order, []string{"etcd", "concord"}) {
		t.Errorf("orders %v, %v", topo.Rounds[0].Order, topo.Rounds[1].Order)
	}
	for _, m := range topo.Medians {
		var ratios []float64
		for _, rd := range topo.Rounds {
			ops := map[string]float64{}
			for _, x := range rd.Results {
				if x.Workload == m.Workload {
					ops[x.System] = x.OpsPerS
					if x.Errors != 0 || x.Ops < 1 {
						t.Errorf("round %d %s %s: %d ops, %d errors", rd.Round, x.System, x.Workload, x.Ops, x.Errors)
					}
				}
			}
			ratios = append(ratios, ops["concord"]/ops["etcd"])
		}
		if m.Etcd == nil || m.OpsRatio == nil || !benchNear(*m.OpsRatio, (ratios[0]+ratios[1])/2) {
			t.Errorf("%s: ratio %v, per round %v", m.Workload, m.OpsRatio, ratios)
		}
	}
}
