package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/internal/testnats"
	"github.com/concord-io/concord/subjects"
)

func TestRemoteRoutes(t *testing.T) {
	routes := func(us ...string) []*url.URL {
		var out []*url.URL
		for _, u := range us {
			p, err := url.Parse(u)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, p)
		}
		return out
	}
	cases := []struct {
		routes []*url.URL
		host   string
		port   int
		want   int
	}{
		// The usual list names every server, this one included.
		{routes("nats://127.0.0.1:6222", "nats://127.0.0.1:6223", "nats://127.0.0.1:6224"), "127.0.0.1", 6222, 2},
		{routes("nats://localhost:6222", "nats://10.255.255.1:6222"), "0.0.0.0", 6222, 1},
		{routes("nats://127.0.0.1:6223"), "127.0.0.1", 6222, 1},
		// Another machine's server on the same port is not this one.
		{routes("nats://10.255.255.1:6222"), "127.0.0.1", 6222, 1},
		{nil, "127.0.0.1", 6222, 0},
	}
	for _, c := range cases {
		if got := remoteRoutes(c.routes, c.host, c.port); got != c.want {
			t.Errorf("remoteRoutes(%v, %s:%d) = %d, want %d", c.routes, c.host, c.port, got, c.want)
		}
	}
}

func TestEmbeddedSettle(t *testing.T) {
	lone := &server.Options{}
	seed := &server.Options{Cluster: server.ClusterOpts{Port: 6222}}
	leafSeed := &server.Options{LeafNode: server.LeafNodeOpts{Port: 7422}}
	if got := embeddedSettle(lone, 0); got != 0 {
		t.Errorf("a lone server: %s, want 0 (interest is exact)", got)
	}
	if got := embeddedSettle(seed, 0); got != seedSettle {
		t.Errorf("a seed that others route to: %s, want %s", got, seedSettle)
	}
	if got := embeddedSettle(leafSeed, 0); got != seedSettle {
		t.Errorf("a leaf node hub: %s, want %s", got, seedSettle)
	}
	if got := embeddedSettle(seed, 2); got != bootstrapSettle {
		t.Errorf("routes up: %s, want %s", got, bootstrapSettle)
	}
}

// recordingHooks records what a fence did to its node, in order.
type recordingHooks struct {
	mu     sync.Mutex
	events []string
}

func (r *recordingHooks) add(e string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recordingHooks) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.events
	r.events = nil
	return e
}

func (r *recordingHooks) hooks() FenceHooks {
	return FenceHooks{
		Hold:    func() { r.add("hold") },
		Release: func() { r.add("release") },
		Gauge:   func(v float64) { r.add(fmt.Sprintf("gauge %v", v)) },
		Changed: func() { r.add("changed") },
	}
}

func nodeAnswer(t *testing.T, id, cluster string) *nats.Msg {
	t.Helper()
	b, err := json.Marshal(schema.NodeInfo{ID: id, ClusterID: cluster, State: "follower"})
	if err != nil {
		t.Fatal(err)
	}
	return &nats.Msg{Data: b}
}

// A foreign answer fences at once (clock held, gauge set, loop woken, in
// that order), rounds without one count towards clearing, and
// busClearRounds of them clear it (clock released, gauge cleared, loop
// woken).
func TestBusWatchFencesAndClears(t *testing.T) {
	var rec recordingHooks
	names, _ := subjects.New(subjects.DefaultPrefix)
	f := NewFence(rec.hooks(), names, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ours := "aaaaaaaaaaaaaaaa"
	w := &busWatch{f: f, foreign: map[string]string{}}
	w.ours.Store(&ours)

	w.answer(nodeAnswer(t, "n1", ours))
	w.answer(nodeAnswer(t, "n4", "")) // a joiner: no cluster yet
	w.endRound(ours)
	if f.Load() != nil || f.Err() != nil || len(rec.take()) != 0 {
		t.Fatal("conflict without another cluster")
	}

	w.answer(nodeAnswer(t, "n1", "bbbbbbbbbbbbbbbb"))
	c := f.Load()
	if c == nil {
		t.Fatal("no conflict after another cluster answered")
	}
	if msg := c.String(); !strings.Contains(msg, ours) || !strings.Contains(msg, "bbbbbbbbbbbbbbbb") {
		t.Fatalf("conflict text %q does not name both clusters", msg)
	}
	if got := strings.Join(rec.take(), ", "); got != "hold, gauge 1, changed" {
		t.Fatalf("on the conflict the node got %q, want the clock held, the gauge set and the loop woken", got)
	}
	if e := f.Err(); e == nil || e.Name != schema.ErrUnavailable || !strings.Contains(e.Description, "bbbbbbbbbbbbbbbb") {
		t.Fatalf("the reply during the conflict: %v, want unavailable naming the other cluster", e)
	}

	// A third cluster adds to the conflict, and its start stays; the node
	// is told again (the log line names every other cluster).
	w.answer(nodeAnswer(t, "n9", "cccccccccccccccc"))
	if c2 := f.Load(); len(c2.theirs) != 2 || c2.since != c.since {
		t.Fatalf("conflict after a third cluster: %+v", c2)
	}
	if got := strings.Join(rec.take(), ", "); got != "hold, gauge 1, changed" {
		t.Fatalf("on a third cluster the node got %q", got)
	}

	// The round that heard them does not count; silence does not count.
	w.endRound(ours)
	w.endRound(ours)
	for round := 1; round <= busClearRounds; round++ {
		if f.Load() == nil {
			t.Fatalf("cleared after %d clean rounds, want %d", round-1, busClearRounds)
		}
		w.answer(nodeAnswer(t, "n1", ours))
		w.endRound(ours)
	}
	if f.Load() != nil || f.Err() != nil {
		t.Fatalf("not cleared after %d clean rounds", busClearRounds)
	}
	if got := strings.Join(rec.take(), ", "); got != "release, gauge 0, changed" {
		t.Fatalf("on clearing the node got %q, want the clock released, the gauge cleared and the loop woken", got)
	}
}

// routedPair starts two in-process NATS servers, the second (the node's
// embedded one) with a route to the first; the route comes up by itself,
// and CheckRestart waits for it.
func routedPair(t *testing.T) (other *server.Server, embedded *Embedded) {
	t.Helper()
	base := func() *server.Options {
		return &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "c", Host: "127.0.0.1", Port: server.RANDOM_PORT}}
	}
	other = testnats.Start(t, base())
	o := base()
	o.Routes = server.RoutesFromStr(fmt.Sprintf("nats-route://%s", other.ClusterAddr()))
	embedded = &Embedded{Server: testnats.Start(t, o), Opts: o}
	return other, embedded
}

// A restart behind a route asks again while nobody answers, so a node of
// another cluster whose servers' interest arrives late is still heard
// and refused; a lone server's "no responders" is taken at once.
func TestCheckRestartWaitsForInterestBehindLinks(t *testing.T) {
	names, _ := subjects.New(subjects.DefaultPrefix)
	other, embedded := routedPair(t)
	nc, err := nats.Connect(embedded.Server.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	g := Guard{Prober: NewProber(nc, names), Names: names, Embedded: embedded, Wait: 10 * time.Second,
		Log: slog.New(slog.DiscardHandler)}

	// The other cluster's node starts answering 300 ms after the check
	// starts: the first probes hear "no responders".
	onc, err := nats.Connect(other.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(onc.Close)
	answer := nodeAnswer(t, "x1", "bbbbbbbbbbbbbbbb")
	time.AfterFunc(300*time.Millisecond, func() {
		_, _ = onc.Subscribe(names.Nodes(), func(m *nats.Msg) { _ = m.Respond(answer.Data) })
	})
	start := time.Now()
	err = g.CheckRestart(context.Background(), "aaaaaaaaaaaaaaaa")
	if !errors.Is(err, ErrForeignCluster) || !strings.Contains(err.Error(), "bbbbbbbbbbbbbbbb") {
		t.Fatalf("restart beside another cluster whose interest came late: %v (after %s), want a refusal naming it", err, time.Since(start))
	}

	// Without links, nobody answering is the answer.
	lone := testnats.Connect(t)
	g = Guard{Prober: NewProber(lone, names), Names: names, Wait: 10 * time.Second, Log: slog.New(slog.DiscardHandler)}
	if err := g.CheckRestart(context.Background(), "aaaaaaaaaaaaaaaa"); err != nil {
		t.Fatalf("restart on a bus of its own: %v, want nil", err)
	}
}
