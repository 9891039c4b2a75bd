package service

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/metrics"
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

// testWatchService is a Service with what the bus watch touches, and no
// NATS or Raft.
func testWatchService(t *testing.T) *Service {
	t.Helper()
	names, _ := subjects.New(subjects.DefaultPrefix)
	s := &Service{log: slog.New(slog.NewTextHandler(io.Discard, nil)), names: names, fenceCh: make(chan struct{}, 1)}
	s.metrics = metrics.New(metricsSource{s})
	return s
}

func nodeAnswer(t *testing.T, id, cluster string) *nats.Msg {
	t.Helper()
	b, err := json.Marshal(schema.NodeInfo{ID: id, ClusterID: cluster, State: "follower"})
	if err != nil {
		t.Fatal(err)
	}
	return &nats.Msg{Data: b}
}

// A foreign answer fences at once (clock held, loop woken), rounds without
// one count towards clearing, and busClearRounds of them clear it.
func TestBusWatchFencesAndClears(t *testing.T) {
	s := testWatchService(t)
	ours := "aaaaaaaaaaaaaaaa"
	w := &busWatch{s: s, foreign: map[string]string{}}
	w.ours.Store(&ours)
	if !s.clock.startAt(5) {
		t.Fatal("clock refused to start")
	}

	w.answer(nodeAnswer(t, "n1", ours))
	w.answer(nodeAnswer(t, "n4", "")) // a joiner: no cluster yet
	w.endRound(ours)
	if s.conflict.Load() != nil {
		t.Fatal("conflict without another cluster")
	}

	w.answer(nodeAnswer(t, "n1", "bbbbbbbbbbbbbbbb"))
	c := s.conflict.Load()
	if c == nil {
		t.Fatal("no conflict after another cluster answered")
	}
	if msg := c.String(); !strings.Contains(msg, ours) || !strings.Contains(msg, "bbbbbbbbbbbbbbbb") {
		t.Fatalf("conflict text %q does not name both clusters", msg)
	}
	if _, ok := s.clock.now(); ok {
		t.Fatal("the lease clock runs during the conflict")
	}
	if s.clock.startAt(5) {
		t.Fatal("the lease clock started during the conflict")
	}
	select {
	case <-s.fenceCh:
	default:
		t.Fatal("the leadership loop was not woken")
	}
	if e := s.conflictError(); e == nil || e.Name != schema.ErrUnavailable {
		t.Fatalf("the reply during the conflict: %v, want unavailable", e)
	}

	// A third cluster adds to the conflict; its start stays.
	w.answer(nodeAnswer(t, "n9", "cccccccccccccccc"))
	if c2 := s.conflict.Load(); len(c2.theirs) != 2 || c2.since != c.since {
		t.Fatalf("conflict after a third cluster: %+v", c2)
	}

	// The round that heard them does not count; silence does not count.
	w.endRound(ours)
	w.endRound(ours)
	for round := 1; round <= busClearRounds; round++ {
		if s.conflict.Load() == nil {
			t.Fatalf("cleared after %d clean rounds, want %d", round-1, busClearRounds)
		}
		w.answer(nodeAnswer(t, "n1", ours))
		w.endRound(ours)
	}
	if s.conflict.Load() != nil {
		t.Fatalf("not cleared after %d clean rounds", busClearRounds)
	}
	if !s.clock.startAt(5) {
		t.Fatal("the lease clock cannot start after the conflict")
	}
	if e := s.conflictError(); e != nil {
		t.Fatalf("the reply after the conflict: %v", e)
	}
}
