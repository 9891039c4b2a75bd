package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"
)

// opFunc sends request number n of one client and checks its reply. ctx
// ends when the run does (Ctrl-C, or the window's end plus requestGrace).
type opFunc func(ctx context.Context, n int) error

// requestGrace is how long a request sent just before the window closes
// may take before the run gives up on it.
const requestGrace = 10 * time.Second

// maxClientErrors stops a client that keeps failing, so a dead server does
// not turn into a tight loop of instant errors; the failures are counted.
const maxClientErrors = 100

// result is what one workload measured against one system in one round.
type result struct {
	Workload string  `json:"workload"`
	System   string  `json:"system"` // concord, etcd or echo
	Ops      int64   `json:"ops"`    // replies received within the window
	OpsPerS  float64 `json:"ops_per_s"`
	P50ms    float64 `json:"p50_ms"`
	P99ms    float64 `json:"p99_ms"`
	P999ms   float64 `json:"p999_ms"`
	// Errors counts failed requests, warm-up included; FirstError is the
	// first of them.
	Errors     int64  `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// ServerCPUus is the CPU time (user + system) the system's server
	// processes used in the window, in microseconds per op, summed over
	// processes; ServerCPUByProcess splits it.
	ServerCPUus        float64            `json:"server_cpu_us_per_op"`
	ServerCPUByProcess map[string]float64 `json:"server_cpu_us_per_op_by_process"`
	// ClientCPUus is this program's own CPU time per op, its helper
	// processes' included (config.helperPIDs): the load generator runs on
	// the same cores.
	ClientCPUus float64 `json:"client_cpu_us_per_op"`
	// BusyPct is server plus client CPU as a share of all the machine's
	// cores over the window; OtherPct is what every other process on the
	// machine used, the noise this figure carries.
	BusyPct  float64 `json:"busy_pct"`
	OtherPct float64 `json:"other_pct"`
	// NodeP99ms is the p99 of the same requests as the Concord node
	// measured them, from taking each to sending its reply, as the upper
	// bound of its histogram bucket (warm-up included); set only by the
	// scale reads phase (scale_nodetail.go).
	NodeP99ms *float64 `json:"node_p99_ms,omitempty"`
}

// measure runs one closed-loop workload: every client sends its next
// request as soon as the previous one is answered, from now until warm-up
// plus duration. Only replies that arrive after the warm-up count, and the
// CPU time of procs and of this process is read at the window's two edges.
func measure(ctx context.Context, cfg *config, system, workload string, ops []opFunc, procs []*proc) (result, error) {
	logf("  %s %s: measuring (%s warm-up, then %s)", system, workload, cfg.warmup, cfg.duration)
	start := time.Now()
	ws := start.Add(cfg.warmup)
	we := ws.Add(cfg.duration)
	lctx, cancel := context.WithDeadline(ctx, we.Add(requestGrace))
	defer cancel()

	type clientState struct {
		lat      []time.Duration
		errs     int64
		firstErr error
	}
	states := make([]clientState, len(ops))
	var wg sync.WaitGroup
	for i, op := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := &states[i]
			for n := 0; st.errs < maxClientErrors; n++ {
				t0 := time.Now()
				if !t0.Before(we) || lctx.Err() != nil {
					return
				}
				err := op(lctx, n)
				t1 := time.Now()
				if err != nil {
					if lctx.Err() != nil && ctx.Err() != nil {
						return // interrupted, not failed
					}
					st.errs++
					if st.firstErr == nil {
						st.firstErr = fmt.Errorf("client %d: %w", i, err)
					}
					continue
				}
				if !t1.Before(ws) && t1.Before(we) {
					st.lat = append(st.lat, t1.Sub(t0))
				}
			}
		}()
	}
	before, err1 := sampleAt(ctx, ws, procs, cfg.helperPIDs)
	after, err2 := sampleAt(ctx, we, procs, cfg.helperPIDs)
	wg.Wait()
	if ctx.Err() != nil {
		return result{}, ctx.Err()
	}
	if err1 != nil {
		return result{}, err1
	}
	if err2 != nil {
		return result{}, err2
	}

	r := result{Workload: workload, System: system, ServerCPUByProcess: map[string]float64{}}
	var all []time.Duration
	for i := range states {
		st := &states[i]
		all = append(all, st.lat...)
		r.Errors += st.errs
		if r.FirstError == "" && st.firstErr != nil {
			r.FirstError = st.firstErr.Error()
		}
	}
	sort.Slice(all, func(a, b int) bool { return all[a] < all[b] })
	r.Ops = int64(len(all))
	window := after.at.Sub(before.at)
	r.OpsPerS = float64(r.Ops) / cfg.duration.Seconds()
	r.P50ms, r.P99ms, r.P999ms = pct(all, 0.5), pct(all, 0.99), pct(all, 0.999)
	var server time.Duration
	for _, p := range procs {
		d := after.procs[p.name] - before.procs[p.name]
		server += d
		r.ServerCPUByProcess[p.name] = perOp(d, r.Ops)
	}
	client := after.self - before.self
	r.ServerCPUus, r.ClientCPUus = perOp(server, r.Ops), perOp(client, r.Ops)
	cores := float64(cfg.cores) * window.Seconds()
	r.BusyPct = 100 * (server + client).Seconds() / cores
	r.OtherPct = 100 * max(0, (after.machine-before.machine-server-client).Seconds()) / cores
	logf("  %s %s: %.0f ops/s, p50 %.2f ms, p99 %.2f ms, server %.0f µs/op", system, workload, r.OpsPerS, r.P50ms, r.P99ms, r.ServerCPUus)
	if r.Errors > 0 {
		logf("%s %s: %d failed requests; the first: %s", system, workload, r.Errors, r.FirstError)
	}
	return r, nil
}

// cpuSample is the CPU time used so far by each process, by this program
// (its helper processes included) and by the whole machine, at one moment.
type cpuSample struct {
	at      time.Time
	procs   map[string]time.Duration
	self    time.Duration
	machine time.Duration
}

// sampleAt waits until t, then reads the CPU times; helpers' counts as
// this program's own.
func sampleAt(ctx context.Context, t time.Time, procs []*proc, helpers []int) (cpuSample, error) {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return cpuSample{}, ctx.Err()
	case <-timer.C:
	}
	s := cpuSample{at: time.Now(), procs: map[string]time.Duration{}}
	var err error
	for _, p := range procs {
		if s.procs[p.name], err = procCPU(strconv.Itoa(p.pid())); err != nil {
			return s, fmt.Errorf("%s: %w", p.name, err)
		}
	}
	if s.self, err = procCPU(strconv.Itoa(os.Getpid())); err != nil {
		return s, err
	}
	for _, pid := range helpers {
		d, err := procCPU(strconv.Itoa(pid))
		if err != nil {
			return s, fmt.Errorf("helper process %d: %w", pid, err)
		}
		s.self += d
	}
	if s.machine, err = machineCPU(); err != nil {
		return s, err
	}
	return s, nil
}

func perOp(d time.Duration, ops int64) float64 {
	if ops == 0 {
		return 0
	}
	return float64(d) / float64(time.Microsecond) / float64(ops)
}

func pct(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[int(float64(len(sorted)-1)*q)]) / float64(time.Millisecond)
}
