package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// opTimeout bounds one request of the load, the grants and the probes.
const opTimeout = 30 * time.Second

// phases runs the scale phases against one system's one server.
type phases struct {
	cfg     *scaleConfig
	s       *servers // s.procs[0] is the server, replaced by each restart
	t       scaleTarget
	res     *scaleResult
	dataDir string
	opened  bool
	kills   int
}

func (ph *phases) pid() string { return strconv.Itoa(ph.s.procs[0].pid()) }

// ensureOpen connects the target's clients once per server process.
func (ph *phases) ensureOpen() error {
	if ph.opened {
		return nil
	}
	if err := ph.t.open(); err != nil {
		return err
	}
	ph.opened = true
	return nil
}

// pool runs f for i = 0..n-1 on workers × inflight goroutines, the one
// running on worker w using client w mod workers, and returns how long it
// took. The first failure stops it.
func pool(ctx context.Context, what string, n, workers, inflight int, f func(ctx context.Context, c, i int) error) (time.Duration, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next, doneN atomic.Int64
	step := int64(max(n/10, 1))
	start := time.Now()
	var wg sync.WaitGroup
	for g := range workers * inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				octx, ocancel := context.WithTimeout(ctx, opTimeout)
				err := f(octx, g%workers, int(i))
				ocancel()
				if err != nil {
					cancel(fmt.Errorf("%s %d: %w", what, i, err))
					return
				}
				if d := doneN.Add(1); d%step == 0 {
					logf("  %s: %d of %d, %.0f/s", what, d, n, float64(d)/time.Since(start).Seconds())
				}
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// load writes every key once.
func (ph *phases) load(ctx context.Context) error {
	if err := ph.ensureOpen(); err != nil {
		return err
	}
	cfg := ph.cfg
	logf("  %s: loading %d keys", ph.res.System, cfg.keys)
	d, err := pool(ctx, "put", cfg.keys, cfg.clients, cfg.inflight, func(ctx context.Context, c, i int) error {
		return ph.t.put(ctx, c, scaleKey(i, cfg.readKeys))
	})
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	ph.res.LoadSeconds = ptr(d.Seconds())
	ph.res.LoadPutsPerS = ptr(float64(cfg.keys) / d.Seconds())
	logf("  %s: loaded %d keys in %s, %.0f puts/s", ph.res.System, cfg.keys, d.Round(time.Millisecond), *ph.res.LoadPutsPerS)
	return nil
}

// rewrite writes every key again until each was written cfg.rewrites
// times in all.
func (ph *phases) rewrite(ctx context.Context) error {
	if err := ph.ensureOpen(); err != nil {
		return err
	}
	cfg := ph.cfg
	n := cfg.keys * (cfg.rewrites - 1)
	logf("  %s: writing every key %d more times", ph.res.System, cfg.rewrites-1)
	d, err := pool(ctx, "rewrite", n, cfg.clients, cfg.inflight, func(ctx context.Context, c, i int) error {
		return ph.t.put(ctx, c, scaleKey(i%cfg.keys, cfg.readKeys))
	})
	if err != nil {
		return fmt.Errorf("rewrites: %w", err)
	}
	ph.res.RewritePutsPerS = ptr(float64(n) / d.Seconds())
	return nil
}

// memory reads the server's resident memory and the size of its data
// directory, after cfg.settle.
func (ph *phases) memory(afterRewrites bool) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := sleep(ctx, ph.cfg.settle); err != nil {
			return err
		}
		rss, peak, err := vmRSS(ph.pid())
		if err != nil {
			return err
		}
		du, err := dirUsage(ph.dataDir)
		if err != nil {
			return err
		}
		logf("  %s: resident memory %s (at most %s since its start), data directory %s", ph.res.System, mib(float64(rss)), mib(float64(peak)), mib(float64(du)))
		if afterRewrites {
			ph.res.RSSAfterRewrite, ph.res.RSSPeakRewrite, ph.res.DiskAfterRewrite = &rss, &peak, &du
		} else {
			ph.res.RSSAfterLoad, ph.res.RSSPeakLoad, ph.res.DiskAfterLoad = &rss, &peak, &du
		}
		return nil
	}
}

// restart times --restart-tries restarts (restartOnce) and keeps their
// median: kill the server with SIGKILL, start it again with the same
// command line, and time from the start to the first answer of a
// linearizable get of key 0: the connection is tried every 10 ms, and the
// get again after every failure (for Concord: NATS "no responders" while
// the node restores, then 503 until it leads).
func (ph *phases) restart(afterRewrites bool) func(context.Context) error {
	return func(ctx context.Context) error {
		var tries []float64
		for range ph.cfg.restartTries {
			d, err := ph.restartOnce(ctx)
			if err != nil {
				return err
			}
			tries = append(tries, d)
		}
		m := median(tries)
		if len(tries) > 1 {
			logf("  %s: restarts answered in %s s, median %.2f s", ph.res.System, joinSeconds(tries), m)
		}
		if afterRewrites {
			ph.res.RestartRewriteS, ph.res.RestartRewriteTries = &m, tries
		} else {
			ph.res.RestartS, ph.res.RestartTries = &m, tries
		}
		return nil
	}
}

// restartOnce kills the server with SIGKILL, starts it again and returns
// the seconds from the start until a linearizable get answered.
func (ph *phases) restartOnce(ctx context.Context) (float64, error) {
	ph.t.close()
	ph.opened = false
	ph.kills++
	old := ph.s.procs[0]
	old.stopMu.Lock()
	old.stopped = true // its exit is expected: stop must not report it
	old.stopMu.Unlock()
	logf("  %s: kill -9 %d", old.name, old.pid())
	_ = old.cmd.Process.Kill()
	<-old.done
	p, err := startProc(old.name, restartLogPath(old.logPath, ph.kills), old.cmd.Path, old.cmd.Args[1:]...)
	if err != nil {
		return 0, err
	}
	ph.s.procs[0] = p
	start := time.Now()
	deadline := start.Add(ph.cfg.restartTimeout)
	key := scaleKey(0, ph.cfg.readKeys)
	var last error
	for {
		if err := p.exited(); err != nil {
			return 0, fmt.Errorf("restart: %w", err)
		}
		if tcpUp(ph.t.addr()) {
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			last = ph.t.probe(actx, key)
			cancel()
			if last == nil {
				break
			}
		} else {
			last = fmt.Errorf("nothing listens on %s yet", ph.t.addr())
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("restart: no answer after %s: %v\n%s", ph.cfg.restartTimeout, last, p.tail(10))
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return 0, err
		}
	}
	d := time.Since(start).Seconds()
	logf("  %s: answered %.2f s after its restart", ph.res.System, d)
	return d, ph.ensureOpen()
}

// restartSuffix is what restartLogPath adds to a server's log file name.
var restartSuffix = regexp.MustCompile(`\.restart[0-9]+\.log$`)

// restartLogPath is the log file of a server's restart number kill, from
// the log file of its last run: n1.log, then n1.restart1.log,
// n1.restart2.log, ...
func restartLogPath(last string, kill int) string {
	base := strings.TrimSuffix(restartSuffix.ReplaceAllString(last, ".log"), ".log")
	return base + fmt.Sprintf(".restart%d.log", kill)
}

// joinSeconds formats durations in seconds as "1.23, 4.56".
func joinSeconds(s []float64) string {
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = fmt.Sprintf("%.2f", v)
	}
	return strings.Join(parts, ", ")
}

// count times count_only reads over every key.
func (ph *phases) count(ctx context.Context) error {
	if err := ph.ensureOpen(); err != nil {
		return err
	}
	var tries []float64
	for range ph.cfg.countTries {
		cctx, cancel := context.WithTimeout(ctx, opTimeout)
		t0 := time.Now()
		n, err := ph.t.count(cctx)
		d := time.Since(t0)
		cancel()
		if err != nil {
			return fmt.Errorf("count: %w", err)
		}
		if n != int64(ph.cfg.keys) {
			return fmt.Errorf("count: %d keys, want %d", n, ph.cfg.keys)
		}
		tries = append(tries, float64(d)/float64(time.Millisecond))
		ph.res.Count = &n
	}
	ph.res.CountMSTries = tries
	ph.res.CountMS = ptr(median(tries))
	logf("  %s: count_only over %d keys: %.1f ms (median of %d)", ph.res.System, ph.cfg.keys, *ph.res.CountMS, len(tries))
	return nil
}

// reads measures closed-loop puts alone, then beside readers that read
// the readers' prefix whole, page after page, pass after pass; in
// cfg.readRounds rounds, since one window's p99 moves by a third from one
// to the next on a shared machine (five by default: with three, the ratio
// shown for one build ranged from 1.6 to 2.3 over one morning's runs). It
// shows the round whose p99 ratio is the median (the lower middle one for
// an even count), and the median of every pass of every round.
func (ph *phases) reads(ctx context.Context) error {
	if err := ph.ensureOpen(); err != nil {
		return err
	}
	type round struct {
		alone, beside *result
		passes        int
		pages         int
	}
	var rounds []round
	var allPasses []float64
	for r := range ph.cfg.readRounds {
		alone, beside, passes, pages, err := ph.readRound(ctx)
		if err != nil {
			return fmt.Errorf("reads, round %d: %w", r+1, err)
		}
		rounds = append(rounds, round{alone, beside, len(passes), pages})
		allPasses = append(allPasses, passes...)
		if alone.P99ms > 0 {
			ph.res.PutP99Growths = append(ph.res.PutP99Growths, beside.P99ms/alone.P99ms)
		}
		node := ""
		if alone.NodeP99ms != nil && beside.NodeP99ms != nil {
			node = fmt.Sprintf(" (the node's own p99: ≤ %.1f ms alone, ≤ %.1f ms beside)", *alone.NodeP99ms, *beside.NodeP99ms)
		}
		logf("  %s: reads round %d: put p99 %.2f ms alone, %.2f ms beside %d read passes%s", ph.res.System, r+1, alone.P99ms, beside.P99ms, len(passes), node)
	}
	growth := func(r round) float64 {
		if r.alone.P99ms <= 0 {
			return 0
		}
		return r.beside.P99ms / r.alone.P99ms
	}
	sort.SliceStable(rounds, func(i, j int) bool { return growth(rounds[i]) < growth(rounds[j]) })
	mid := rounds[(len(rounds)-1)/2]
	ph.res.PutAlone, ph.res.PutReads = mid.alone, mid.beside
	ph.res.ReadPasses, ph.res.ReadPages = ptr(mid.passes), ptr(mid.pages)
	if len(allPasses) > 0 {
		ph.res.ReadPassMS = ptr(median(allPasses))
	}
	if mid.alone.P99ms > 0 {
		ph.res.PutP99Growth = ptr(growth(mid))
	}
	logf("  %s: %d read passes over %d keys (%d pages each) in %d rounds, median %.0f ms", ph.res.System, len(allPasses), ph.cfg.readPrefixKeys(), mid.pages, len(rounds), median(allPasses))
	return nil
}

// readRound measures the puts alone, then beside the readers, and returns
// both and the readers' passes (ms each) and pages per pass.
func (ph *phases) readRound(ctx context.Context) (alone, beside *result, passes []float64, pages int, err error) {
	cfg := ph.cfg
	mcfg := &config{roundFlags: roundFlags{warmup: cfg.warmup, duration: cfg.putDuration}, cores: runtime.NumCPU()}
	ops := make([]opFunc, cfg.putClients)
	for i := range ops {
		ops[i] = func(ctx context.Context, n int) error { return ph.t.put(ctx, i, putKey(i, n)) }
	}
	check := func(r result, err error) (*result, error) {
		if err != nil {
			return nil, err
		}
		if r.Errors > 0 {
			return nil, fmt.Errorf("%d puts failed; the first: %s", r.Errors, r.FirstError)
		}
		return &r, nil
	}
	before, err := ph.putBuckets(ctx)
	if err != nil {
		return nil, nil, nil, 0, err
	}
	alone, err = check(measure(ctx, mcfg, ph.res.System, "put", ops, ph.s.procs))
	if err != nil {
		return nil, nil, nil, 0, fmt.Errorf("puts without reads: %w", err)
	}
	after, err := ph.putBuckets(ctx)
	if err != nil {
		return nil, nil, nil, 0, err
	}
	setNodeP99(alone, before, after)

	want := cfg.readPrefixKeys()
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var mu sync.Mutex
	var readErr error
	fail := func(err error) {
		mu.Lock()
		if readErr == nil {
			readErr = err
		}
		mu.Unlock()
		stop()
	}
	pass := func(ms float64, pp int) {
		mu.Lock()
		defer mu.Unlock()
		if rctx.Err() == nil { // a pass that ends after the window is not counted
			passes = append(passes, ms)
			pages = pp
		}
	}
	var wg sync.WaitGroup
	for r := range cfg.readers {
		if !cfg.readersInProcess {
			rp, err := startReaderProc(rctx, ph.res.System, ph.s.urls[0], cfg.pageLimit, want, pass)
			if err != nil {
				stop()
				wg.Wait()
				return nil, nil, nil, 0, fmt.Errorf("reads: %w", err)
			}
			logf("started %s reader %d (pid %d)", ph.res.System, r+1, rp.pid())
			mcfg.helperPIDs = append(mcfg.helperPIDs, rp.pid())
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := rp.wait(rctx); err != nil {
					fail(err)
				}
			}()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rctx.Err() == nil {
				t0 := time.Now()
				keys, pp, err := ph.t.readPass(rctx, cfg.putClients+r)
				d := time.Since(t0)
				if rctx.Err() != nil {
					return // stopped mid-pass: not counted
				}
				if err == nil && keys != want {
					err = fmt.Errorf("a pass read %d keys under %s, want %d", keys, readPrefix, want)
				}
				if err != nil {
					fail(err)
					return
				}
				pass(float64(d)/float64(time.Millisecond), pp)
			}
		}()
	}
	before, errBefore := ph.putBuckets(rctx)
	beside, err = check(measure(rctx, mcfg, ph.res.System, "put", ops, ph.s.procs))
	after, errAfter := ph.putBuckets(rctx)
	stop()
	wg.Wait()
	if readErr != nil {
		return nil, nil, nil, 0, fmt.Errorf("reads: %w", readErr)
	}
	if err != nil {
		return nil, nil, nil, 0, fmt.Errorf("puts beside reads: %w", err)
	}
	if err := errors.Join(errBefore, errAfter); err != nil {
		return nil, nil, nil, 0, err
	}
	setNodeP99(beside, before, after)
	return alone, beside, passes, pages, nil
}

// grantAll grants n leases of ttl seconds and returns their ids, the
// lease whose grant was answered last, and when the first and the last
// answers came.
func (ph *phases) grantAll(ctx context.Context, n, ttl int) (ids []int64, last int64, first, lastAt time.Time, took time.Duration, err error) {
	ids = make([]int64, n)
	var mu sync.Mutex
	took, err = pool(ctx, "grant", n, ph.cfg.clients, ph.cfg.inflight, func(ctx context.Context, c, i int) error {
		id, err := ph.t.grant(ctx, c, ttl)
		if err != nil {
			return err
		}
		now := time.Now()
		ids[i] = id
		mu.Lock()
		if first.IsZero() || now.Before(first) {
			first = now
		}
		if now.After(lastAt) {
			lastAt, last = now, id
		}
		mu.Unlock()
		return nil
	})
	return ids, last, first, lastAt, took, err
}

// expiry grants cfg.leases leases of cfg.expiryTTL and times from the last
// one's deadline (its grant's answer plus the ttl: no later than the true
// deadline, which the server set before it answered) until none is left.
func (ph *phases) expiry(ctx context.Context) error {
	if err := ph.ensureOpen(); err != nil {
		return err
	}
	cfg := ph.cfg
	logf("  %s: granting %d leases of ttl %d s", ph.res.System, cfg.leases, cfg.expiryTTL)
	_, last, first, lastAt, took, err := ph.grantAll(ctx, cfg.leases, cfg.expiryTTL)
	if err != nil {
		return fmt.Errorf("expiry: %w", err)
	}
	spread := lastAt.Sub(first)
	ph.res.GrantSpreadS = ptr(spread.Seconds())
	ph.res.GrantsPerS = ptr(float64(cfg.leases) / took.Seconds())
	ttl := time.Duration(cfg.expiryTTL) * time.Second
	if spread >= ttl {
		logf("  %s: granting took %s, more than the ttl: the first leases expired before the last was granted (raise --expiry-ttl)", ph.res.System, spread.Round(time.Millisecond))
	}
	deadline := lastAt.Add(ttl)
	// Start asking a little before the deadline, so that a lease gone
	// early would show as a negative lag.
	if err := sleep(ctx, time.Until(deadline.Add(-time.Second))); err != nil {
		return err
	}
	logf("  %s: waiting for %d leases to expire", ph.res.System, cfg.leases)
	for {
		actx, cancel := context.WithTimeout(ctx, opTimeout)
		left, err := ph.t.leaseLeft(actx, last)
		cancel()
		if err != nil {
			return fmt.Errorf("expiry: %w", err)
		}
		now := time.Now()
		if !left {
			lag := now.Sub(deadline).Seconds()
			ph.res.ExpiryLagS = &lag
			logf("  %s: the last lease's deadline to none left: %.2f s", ph.res.System, lag)
			return nil
		}
		if now.After(deadline.Add(cfg.expiryTimeout)) {
			return fmt.Errorf("expiry: leases left %s after the last deadline", cfg.expiryTimeout)
		}
		if err := sleep(ctx, cfg.poll); err != nil {
			return err
		}
	}
}

// keepalive grants cfg.leases leases of cfg.keepaliveTTL, renews each
// every ttl/3, and after one renewal period reads the server's CPU time
// over cfg.keepaliveWindow.
func (ph *phases) keepalive(ctx context.Context) error {
	if err := ph.ensureOpen(); err != nil {
		return err
	}
	cfg := ph.cfg
	logf("  %s: granting %d leases of ttl %d s to keep alive", ph.res.System, cfg.leases, cfg.keepaliveTTL)
	ids, _, _, _, _, err := ph.grantAll(ctx, cfg.leases, cfg.keepaliveTTL)
	if err != nil {
		return fmt.Errorf("keep-alive: %w", err)
	}
	period := cfg.renewEvery()
	r := ph.t.renew(ctx, ids, period)
	defer r.stop()
	if err := sleep(ctx, period); err != nil {
		return err
	}
	self := strconv.Itoa(os.Getpid())
	s0, err1 := procCPU(ph.pid())
	o0, err2 := procCPU(self)
	n0, t0 := r.renewed.Load(), time.Now()
	logf("  %s: renewing every %s; reading the server's CPU over %s", ph.res.System, period, cfg.keepaliveWindow)
	if err := sleep(ctx, cfg.keepaliveWindow); err != nil {
		return err
	}
	s1, err3 := procCPU(ph.pid())
	o1, err4 := procCPU(self)
	n1, window := r.renewed.Load(), time.Since(t0)
	if err := errors.Join(err1, err2, err3, err4, r.stop()); err != nil {
		return fmt.Errorf("keep-alive: %w", err)
	}
	ph.res.KeepaliveCPUPct = ptr(100 * (s1 - s0).Seconds() / window.Seconds())
	ph.res.KeepaliveOwnPct = ptr(100 * (o1 - o0).Seconds() / window.Seconds())
	ph.res.KeepaliveRate = ptr(float64(n1-n0) / window.Seconds())
	logf("  %s: %.0f renewals/s, server CPU %.1f%% of a core", ph.res.System, *ph.res.KeepaliveRate, *ph.res.KeepaliveCPUPct)
	return nil
}
