package robustness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	cc "github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/tests/linearize"
)

// The network fault scenarios of etcd's robustness suite, run one after
// the other on one 3-node cluster under one workload: Go clients, each
// starting on a different node's server (so one is always on the side a
// fault cuts off), doing puts and linearizable reads of a few register
// keys and keeping leases alive; raw NATS subscribers on every server and
// a Go Watch. After the last fault the history is checked: linearizable
// (porcupine), no write answered "nothing changed" applied, every watcher
// ordered with no revision twice and every event true to the change log,
// the Go Watch complete, no lease expired before its last acknowledged
// keep-alive allowed, and the replicas byte-identical. Each fault logs the
// share of operations served during it and the time to recover after it.

// fault is one scenario: what it cuts, given the leader at its start.
type fault struct {
	name string
	// apply makes the cut; the scenario checks that it took effect.
	apply func(lab *netLab, leader string, followers []string)
	// checkCut lists host pairs (from, to) that must no longer reach.
	checkCut func(leader string, followers []string) [][2]string
	hold     time.Duration
	// flaps, when above 0, repeats cut and heal that many times, each
	// half of hold.
	flaps int
}

func faults() []fault {
	scale := time.Duration(1)
	long := 30 * time.Second
	if longProfile() {
		scale, long = 2, 120*time.Second
	}
	leaderBoth := func(lab *netLab, leader string, followers []string) { lab.cut(leader, both, followers...) }
	leaderPairs := func(leader string, followers []string) [][2]string {
		var out [][2]string
		for _, f := range followers {
			out = append(out, [2]string{leader, f}, [2]string{f, leader})
		}
		return out
	}
	return []fault{
		{name: "blackholed leader", apply: leaderBoth, checkCut: leaderPairs, hold: 6 * time.Second * scale},
		{name: "leader inbound dropped", hold: 6 * time.Second * scale,
			apply:    func(lab *netLab, leader string, followers []string) { lab.cut(leader, inbound, followers...) },
			checkCut: leaderPairs}, // a dial needs both ways
		{name: "leader outbound dropped", hold: 6 * time.Second * scale,
			apply:    func(lab *netLab, leader string, followers []string) { lab.cut(leader, outbound, followers...) },
			checkCut: leaderPairs},
		{name: "bridge: a follower cut from the leader only", hold: 6 * time.Second * scale,
			apply: func(lab *netLab, leader string, followers []string) { lab.cut(followers[0], both, leader) },
			checkCut: func(leader string, followers []string) [][2]string {
				return [][2]string{{followers[0], leader}, {leader, followers[0]}}
			}},
		{name: "flapping leader links", apply: leaderBoth, hold: 3 * time.Second, flaps: 4 * int(scale)},
		{name: "long blackhole of the leader", apply: leaderBoth, checkCut: leaderPairs, hold: long},
	}
}

func TestNetworkFaults(t *testing.T) {
	lab := newNetLab(t, "n1", "n2", "n3", "cl")
	c := startLabCluster(t, lab, "n1", "n2", "n3")
	w := startFaultWorkload(t, lab, c)
	time.Sleep(3 * time.Second)
	for _, f := range faults() {
		if !t.Run(f.name, func(t *testing.T) { runFault(t, lab, c, w, f) }) {
			break
		}
	}
	w.stop()
	w.check(t, c)
}

// runFault applies f to the current leader, holds it, heals, and logs
// availability during the fault and recovery after it.
func runFault(t *testing.T, lab *netLab, c *labCluster, w *faultWorkload, f fault) {
	leader, followers := c.roles(60 * time.Second)
	before := w.okRate(time.Now().Add(-3*time.Second), time.Now())
	start := time.Now()
	if f.flaps > 0 {
		for i := 0; i < f.flaps; i++ {
			f.apply(lab, leader, followers)
			time.Sleep(f.hold / 2)
			lab.heal()
			time.Sleep(f.hold / 2)
		}
	} else {
		f.apply(lab, leader, followers)
		for _, p := range f.checkCut(leader, followers) {
			if lab.reaches(p[0], raftAddr(lab, p[1]), time.Second) {
				lab.heal()
				t.Fatalf("the cut from %s to %s did not take effect", p[0], p[1])
			}
		}
		time.Sleep(f.hold - time.Since(start))
		lab.heal()
	}
	healed := time.Now()
	during := w.okRate(start, healed)
	recovery := w.recover(t, c, healed)
	checkLogVolume(t, c, f, start, healed)
	t.Logf("%s (leader %s, %s): %.0f ops/s served during the fault, %.0f before (%.0f%%); recovered %s after the heal",
		f.name, leader, healed.Sub(start).Round(100*time.Millisecond), during, before, 100*during/max(before, 1), recovery.Round(100*time.Millisecond))
	w.report = append(w.report, fmt.Sprintf("%s: %.0f%% of the ops/s before it, recovered %s after the heal", f.name, 100*during/max(before, 1), recovery.Round(100*time.Millisecond)))
}

// faultWorkload is the load every fault runs under.
type faultWorkload struct {
	t       *testing.T
	lab     *netLab
	hist    *linearize.History
	clients []*cc.Client
	raw     map[string]*nats.Conn // per server, from the client host
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	report  []string

	mu        sync.Mutex
	okTimes   []time.Time               // completions of served operations
	watched   map[string][]schema.Event // raw subscriber per server -> events
	goWatch   []schema.Event            // the Go Watch's events
	goWatchEr error                     // why the Go Watch ended early
	early     []string                  // leases that expired early
	leases    int                       // leases granted
	expired   int                       // leases that expired (legitimately or not)
	failures  map[string]int            // errors by kind, for the report
	_         struct{}                  // keep literals keyed
}

const registerKeys = 4

func startFaultWorkload(t *testing.T, lab *netLab, c *labCluster) *faultWorkload {
	t.Helper()
	w := &faultWorkload{t: t, lab: lab, hist: linearize.New(), raw: map[string]*nats.Conn{},
		watched: map[string][]schema.Event{}, failures: map[string]int{}}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	t.Cleanup(w.cancel)
	for i := range c.names {
		// Each client's pool starts on another node's server.
		var urls []string
		for j := range c.names {
			urls = append(urls, natsURL(lab, c.names[(i+j)%len(c.names)]))
		}
		gc, err := cc.Connect(cc.URL(strings.Join(urls, ",")), cc.AttemptTimeout(time.Second),
			cc.NATSOptions(nats.DontRandomize(), nats.SetCustomDialer(nsDialer{netns: lab.ns["cl"]}), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(gc.Close)
		w.clients = append(w.clients, gc)
	}
	for _, h := range c.names {
		nc, err := connectFrom(lab.ns["cl"], natsURL(lab, h), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		w.raw[h] = nc
		h := h
		if _, err := nc.Subscribe("concord.watch.reg.>", func(m *nats.Msg) {
			var ev schema.Event
			if json.Unmarshal(m.Data, &ev) == nil {
				w.mu.Lock()
				w.watched[h] = append(w.watched[h], ev)
				w.mu.Unlock()
			}
		}); err != nil {
			t.Fatal(err)
		}
		nc.Flush()
	}
	// The Go Watch outlives the workload, to see its last writes too.
	watchCtx, stopWatch := context.WithCancel(context.Background())
	t.Cleanup(stopWatch)
	watcher, err := w.clients[0].Watch(watchCtx, "reg.", true, 0)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for ev := range watcher.Events() {
			w.mu.Lock()
			w.goWatch = append(w.goWatch, ev)
			w.mu.Unlock()
		}
		if err := watcher.Err(); err != nil && !errors.Is(err, context.Canceled) {
			w.mu.Lock()
			w.goWatchEr = err
			w.mu.Unlock()
		}
	}()
	for i := range w.clients {
		w.wg.Add(2)
		go w.registers(i)
		go w.keepLeases(i)
	}
	return w
}

func (w *faultWorkload) served() {
	w.mu.Lock()
	w.okTimes = append(w.okTimes, time.Now())
	w.mu.Unlock()
}

func (w *faultWorkload) failed(kind string) {
	w.mu.Lock()
	w.failures[kind]++
	w.mu.Unlock()
}

// okRate is the served operations per second in [from, to).
func (w *faultWorkload) okRate(from, to time.Time) float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, at := range w.okTimes {
		if !at.Before(from) && at.Before(to) {
			n++
		}
	}
	return float64(n) / to.Sub(from).Seconds()
}

// registers runs puts and linearizable reads of the register keys; every
// put carries a value no other put has.
func (w *faultWorkload) registers(id int) {
	defer w.wg.Done()
	gc := w.clients[id]
	tag := fmt.Sprintf("c%d", id)
	for seq := 0; w.ctx.Err() == nil; seq++ {
		key := fmt.Sprintf("reg.%d", rand.IntN(registerKeys))
		ctx, cancel := context.WithTimeout(w.ctx, 4*time.Second)
		call := w.hist.Now()
		if rand.IntN(2) == 0 {
			in := linearize.Input{Op: linearize.Put, Key: key, Value: fmt.Sprintf("%s-%d", tag, seq), ClientTag: tag}
			_, err := gc.PutKey(ctx, key, json.RawMessage(strconv.Quote(in.Value)))
			switch {
			case err == nil:
				w.hist.Add(id, in, call, linearize.Output{})
				w.served()
			case w.ctx.Err() != nil:
				w.hist.Add(id, in, call, linearize.Output{Unknown: true})
			case errors.Is(err, cc.ErrOutcomeUnknown):
				w.hist.Add(id, in, call, linearize.Output{Unknown: true})
				w.failed("put outcome unknown")
			case errors.Is(err, cc.ErrUnavailable) || errors.Is(err, cc.ErrNotLeader):
				// The client's word that nothing changed: if it was applied
				// after all, a read or the change log shows it.
				w.hist.Refused(in, err.Error())
				w.failed("put refused")
			default:
				w.hist.Add(id, in, call, linearize.Output{Unknown: true})
				w.failed("put failed otherwise")
			}
		} else {
			in := linearize.Input{Op: linearize.Get, Key: key, ClientTag: tag}
			kv, err := gc.GetKey(ctx, key)
			switch {
			case err == nil:
				v, _ := strconv.Unquote(string(kv.Value))
				w.hist.Add(id, in, call, linearize.Output{Value: v})
				w.served()
			case errors.Is(err, cc.ErrKeyNotFound):
				w.hist.Add(id, in, call, linearize.Output{})
				w.served()
			default:
				w.failed("read failed")
			}
		}
		cancel()
	}
}

// leaseTTL is short, so that a lease that expires early shows.
const leaseTTL = 3

// keepLeases keeps one lease at a time alive every 500 ms; a keep-alive
// that finds it gone must come no earlier than the last acknowledged
// keep-alive's send time plus the ttl (the reply comes after the expiry,
// and the expiry no earlier than that bound).
func (w *faultWorkload) keepLeases(id int) {
	defer w.wg.Done()
	gc := w.clients[id]
	for w.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(w.ctx, 4*time.Second)
		sent := time.Now()
		g, err := gc.Grant(ctx, schema.LeaseGrantRequest{TTL: leaseTTL})
		cancel()
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		w.mu.Lock()
		w.leases++
		w.mu.Unlock()
		lastAck := sent
		for w.ctx.Err() == nil {
			time.Sleep(500 * time.Millisecond)
			ctx, cancel := context.WithTimeout(w.ctx, 2*time.Second)
			sent := time.Now()
			_, err := gc.KeepAlive(ctx, schema.LeaseKeepAliveRequest{ID: g.ID})
			cancel()
			if err == nil {
				lastAck = sent
				continue
			}
			if errors.Is(err, cc.ErrLeaseNotFound) {
				now := time.Now()
				w.mu.Lock()
				w.expired++
				if bound := lastAck.Add(leaseTTL * time.Second); now.Before(bound) {
					w.early = append(w.early, fmt.Sprintf("lease %d gone %s before its bound", g.ID, bound.Sub(now)))
				}
				w.mu.Unlock()
				break
			}
		}
	}
}

// recover waits until every member is reachable from the leader and a put
// through every node's own server is served; it returns the time since
// healed.
func (w *faultWorkload) recover(t *testing.T, c *labCluster, healed time.Time) time.Duration {
	t.Helper()
	c.waitMembers(60 * time.Second)
	for h, nc := range w.raw {
		for {
			data, _ := json.Marshal(map[string]any{"key": "probe." + h, "value": h})
			m, err := nc.Request("concord.kv.put", data, time.Second)
			if err == nil && m.Header.Get(schema.HeaderErrorCode) == "" {
				break
			}
			if time.Since(healed) > 60*time.Second {
				t.Fatalf("a put through %s's server not served within 60 s of the heal: %v", h, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return time.Since(healed)
}

func (w *faultWorkload) stop() {
	w.cancel()
	w.wg.Wait()
}

// check runs every check over what the workload saw.
func (w *faultWorkload) check(t *testing.T, c *labCluster) {
	t.Helper()
	if t.Failed() {
		return
	}
	// Final reads, part of the history: nothing acknowledged is lost.
	gc := w.clients[0]
	for k := 0; k < registerKeys; k++ {
		key := fmt.Sprintf("reg.%d", k)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		call := w.hist.Now()
		kv, err := gc.GetKey(ctx, key)
		cancel()
		out := linearize.Output{}
		if err == nil {
			out.Value, _ = strconv.Unquote(string(kv.Value))
		} else if !errors.Is(err, cc.ErrKeyNotFound) {
			t.Fatalf("final read of %s: %v", key, err)
		}
		w.hist.Add(0, linearize.Input{Op: linearize.Get, Key: key, ClientTag: "final"}, call, out)
	}
	log := w.changeLog(t)
	ops, unknown, refused := w.hist.Counts()
	if err := w.hist.Check(5*time.Minute, filepath.Join(t.TempDir(), "history.html")); err != nil {
		t.Error(err)
	}
	var applied []string
	for _, ev := range log {
		v, _ := strconv.Unquote(string(ev.Value))
		applied = append(applied, v)
	}
	if bad := w.hist.AppliedRefusals(applied); len(bad) > 0 {
		t.Errorf("%d writes answered \"nothing changed\" were applied: %s", len(bad), strings.Join(bad, "; "))
	}
	byRev := map[[2]int64]schema.Event{}
	for _, ev := range log {
		byRev[[2]int64{ev.Revision, int64(ev.OpIndex)}] = ev
	}
	last := log[len(log)-1].Revision
	// The Go Watch delivers every change, so wait for it to reach the end.
	deadline := time.Now().Add(15 * time.Second)
	for {
		w.mu.Lock()
		n := len(w.goWatch)
		reached := n > 0 && w.goWatch[n-1].Revision >= last
		w.mu.Unlock()
		if reached || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.goWatchEr != nil {
		t.Errorf("the Go Watch ended: %v", w.goWatchEr)
	}
	if missing, late := checkStream(t, "the Go Watch", w.goWatch, byRev); missing != 0 || late != 0 {
		seen := map[[2]int64]bool{}
		for _, ev := range w.goWatch {
			seen[[2]int64{ev.Revision, int64(ev.OpIndex)}] = true
		}
		var gaps []string
		for _, ev := range log {
			if at := [2]int64{ev.Revision, int64(ev.OpIndex)}; !seen[at] && len(gaps) < 10 {
				gaps = append(gaps, fmt.Sprint(at))
			}
		}
		t.Errorf("the Go Watch saw %d of the change log's %d events, %d out of order; missing (revision, op index): %s", len(w.goWatch), len(log), late, strings.Join(gaps, " "))
	}
	var rawReport []string
	for _, h := range c.names {
		missing, late := checkStream(t, "the raw subscriber on "+h, w.watched[h], byRev)
		rawReport = append(rawReport, fmt.Sprintf("%s %d/%d (%d late)", h, len(log)-missing, len(log), late))
	}
	if len(w.early) > 0 {
		t.Errorf("%d leases expired early: %s", len(w.early), strings.Join(w.early, "; "))
	}
	w.checkConverged(t, c)
	t.Logf("history: %d operations (%d with unknown outcome), %d writes refused; %d changes; linearizable, none refused applied",
		ops, unknown, refused, len(log))
	t.Logf("leases: %d granted, %d expired, none early; raw subscribers saw %s events (the rest are in kv.changes); failures %v",
		w.leases, w.expired, strings.Join(rawReport, ", "), w.failures)
	for _, r := range w.report {
		t.Logf("figure: %s", r)
	}
}

// checkStream checks a watcher's events: none twice, each the change
// log's event of its (revision, op index). It returns how many of the
// log's events the watcher did not keep, and how many came late: after
// one of a later revision, which the README tells a raw subscriber to
// drop (an old leader's event that sat behind a link that came back,
// arriving after the new leader's).
func checkStream(t *testing.T, who string, events []schema.Event, log map[[2]int64]schema.Event) (missing, late int) {
	t.Helper()
	var top [2]int64
	seen := map[[2]int64]bool{}
	for _, ev := range events {
		at := [2]int64{ev.Revision, int64(ev.OpIndex)}
		if seen[at] {
			t.Errorf("%s: event %v twice", who, at)
			return 0, 0
		}
		seen[at] = true
		want, ok := log[at]
		if !ok || want.Key != ev.Key || string(want.Value) != string(ev.Value) || want.Type != ev.Type {
			t.Errorf("%s: event %v (%s %s=%s) is not the change log's (%s %s=%s)", who, at, ev.Type, ev.Key, ev.Value, want.Type, want.Key, want.Value)
			return 0, 0
		}
		if at[0] < top[0] || at[0] == top[0] && at[1] < top[1] {
			late++
			continue
		}
		top = at
	}
	return len(log) - (len(events) - late), late
}

// changeLog reads every change of the register keys from kv.changes.
func (w *faultWorkload) changeLog(t *testing.T) []schema.Event {
	t.Helper()
	prefix := "reg."
	req := schema.KVChangesRequest{Prefix: &prefix, Limit: 1000}
	var out []schema.Event
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, err := w.clients[0].Changes(ctx, req)
		cancel()
		if err != nil {
			t.Fatalf("kv.changes: %v", err)
		}
		out = append(out, r.Events...)
		if !r.More {
			break
		}
		req.AfterRevision = r.NextRevision
		op := r.NextOpIndex
		req.AfterOpIndex = &op
	}
	sort.SliceStable(out, func(i, j int) bool {
		return out[i].Revision < out[j].Revision || out[i].Revision == out[j].Revision && out[i].OpIndex < out[j].OpIndex
	})
	if len(out) == 0 {
		t.Fatal("the change log holds no register changes")
	}
	return out
}

// checkConverged waits until every member has applied the same index and
// holds the same state hash there, and checks that none of them sees
// another cluster on the bus.
func (w *faultWorkload) checkConverged(t *testing.T, c *labCluster) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var why string
	for time.Now().Before(deadline) {
		data, err := request(w.raw[c.names[0]], "concord.cluster.status", schema.ClusterStatusRequest{Hash: true}, 5*time.Second)
		if err != nil {
			why = err.Error()
			time.Sleep(200 * time.Millisecond)
			continue
		}
		var st schema.ClusterStatusReply
		json.Unmarshal(data, &st)
		seen := map[string]bool{}
		for _, m := range st.Members {
			if m.Node == nil {
				seen["no answer from "+m.ID] = true
				continue
			}
			seen[fmt.Sprintf("%d/%s", m.Node.AppliedIndex, m.Node.StateHash)] = true
		}
		if len(seen) == 1 && len(st.Members) == len(c.names) {
			// One cluster on the bus: no member sees another.
			if st.Conflict != "" {
				t.Errorf("the leader reports another cluster on the bus: %s", st.Conflict)
			}
			for _, m := range st.Members {
				if m.Node.Conflict != "" {
					t.Errorf("%s reports another cluster on the bus: %s", m.ID, m.Node.Conflict)
				}
			}
			return
		}
		why = fmt.Sprint(seen)
		time.Sleep(200 * time.Millisecond)
	}
	t.Errorf("replicas did not converge within 30 s: %s", why)
}

// maxLogLinesPerMinute bounds what each node logs while a fault lasts,
// and maxRepeatEvery how often one message may repeat: a cut is logged
// (the first line of each kind, then one every 10 s saying how many like
// it were held back), not flooded. Before the election rounds' info lines
// were held back too, a leader cut off for 30 s logged "entering candidate
// state" 40 times (and a 120 s cut about 370 failed vote requests before
// those were). A flapping link is exempt from the repeat bound: each flap
// is a real change of leader, worth its lines. The most seen in a 120 s
// blackhole was 108 lines (the new leader's failed snapshot sends to the
// cut node, each kind once per 10 s, and its failed heartbeats), so the
// line bound leaves room; the repeat bound is the one that catches a flood.
const (
	maxLogLinesPerMinute = 90
	maxRepeatEvery       = 5 * time.Second
)

// checkLogVolume counts the lines each node logged from start to healed,
// and fails the fault if a node logged more than maxLogLinesPerMinute
// allows (counted over at least a minute, so that the burst of a failover
// does not count against a short fault) or repeated one message more than
// three times plus once every maxRepeatEvery.
func checkLogVolume(t *testing.T, c *labCluster, f fault, start, healed time.Time) {
	t.Helper()
	held := healed.Sub(start)
	minutes := max(held.Minutes(), 1)
	maxRepeats := 3 + int(held/maxRepeatEvery)
	var counts []string
	for _, h := range c.names {
		b, err := os.ReadFile(c.nodes[h].logPath)
		if err != nil {
			t.Fatal(err)
		}
		n, top := 0, map[string]int{}
		for _, line := range strings.Split(string(b), "\n") {
			at, ok := logTime(line)
			if !ok || at.Before(start) || at.After(healed) {
				continue
			}
			n++
			top[logMessage(line)]++
		}
		var kinds []string
		for msg, k := range top {
			if k > 2 {
				kinds = append(kinds, fmt.Sprintf("%d× %s", k, msg))
			}
			if k > maxRepeats && f.flaps == 0 {
				t.Errorf("%s logged %q %d times in the %s of %q (bound %d)", h, msg, k, held.Round(time.Second), f.name, maxRepeats)
			}
		}
		sort.Sort(sort.Reverse(sort.StringSlice(kinds)))
		counts = append(counts, fmt.Sprintf("%s %d (%s)", h, n, strings.Join(kinds, "; ")))
		if float64(n) > maxLogLinesPerMinute*minutes {
			t.Errorf("%s logged %d lines in the %s of %q (bound %d a minute); the most repeated: %s",
				h, n, held.Round(time.Second), f.name, maxLogLinesPerMinute, strings.Join(kinds, "; "))
		}
	}
	t.Logf("log lines during %q (%s): %s", f.name, held.Round(time.Second), strings.Join(counts, ", "))
}

// logTime reads the time of a line of the node's log (slog's text form).
func logTime(line string) (time.Time, bool) {
	v, ok := strings.CutPrefix(line, "time=")
	if !ok {
		return time.Time{}, false
	}
	v, _, _ = strings.Cut(v, " ")
	at, err := time.Parse(time.RFC3339Nano, v)
	return at, err == nil
}

// logMessage is a line's msg, to name what repeats.
func logMessage(line string) string {
	_, msg, ok := strings.Cut(line, " msg=")
	if !ok {
		return line
	}
	if strings.HasPrefix(msg, `"`) {
		if end := strings.Index(msg[1:], `"`); end >= 0 {
			return msg[1 : end+1]
		}
	}
	msg, _, _ = strings.Cut(msg, " ")
	return msg
}
