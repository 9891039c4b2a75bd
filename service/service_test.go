package service

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/internal/testnats"
	"github.com/concord-io/concord/service/internal/testwait"
)

// startTest starts an in-process node on random ports in a temp dir and
// waits until it leads.
func startTest(t testing.TB, mod func(*Config)) (*Service, *nats.Conn) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.NATSListen = "127.0.0.1:0"
	cfg.RaftAddr = "127.0.0.1:0"
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if mod != nil {
		mod(&cfg)
	}
	s, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	nc, err := nats.Connect(s.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	deadline := time.Now().Add(15 * time.Second)
	for {
		msg, err := nc.Request("concord.lease.list", []byte(`{}`), time.Second)
		if err == nil && msg.Header.Get(schema.HeaderErrorCode) == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node not serving: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s, nc
}

// Many clients at once, every endpoint, watchers listening: run under
// -race. Every acknowledged put of a key that was never deleted is there.
func TestConcurrentClientsKeepStateConsistent(t *testing.T) {
	s, nc := startTest(t, nil)
	var events sync.Map
	sub, err := nc.Subscribe("concord.watch.>", func(m *nats.Msg) {
		var ev schema.Event
		if json.Unmarshal(m.Data, &ev) == nil {
			events.Store(fmt.Sprintf("%d/%d", ev.Revision, ev.OpIndex), ev.Key)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	const clients, rounds = 16, 30
	testwait.Concurrently(t, clients, func(c int) error {
		var g schema.LeaseGrantReply
		if e := testnats.Request(t, nc, "concord.lease.grant", map[string]any{"ttl": 60}, &g); e != nil {
			return e
		}
		for r := 0; r < rounds; r++ {
			key := fmt.Sprintf("c%d.k%d", c, r)
			if e := testnats.Request(t, nc, "concord.kv.put", map[string]any{"key": key, "value": r, "lease": g.ID}, nil); e != nil {
				return e
			}
			if e := testnats.Request(t, nc, "concord.lease.keepalive", map[string]any{"id": g.ID}, nil); e != nil {
				return e
			}
			var got schema.KVGetReply
			if e := testnats.Request(t, nc, "concord.kv.get", map[string]any{"key": key}, &got); e != nil || len(got.KVs) != 1 {
				return fmt.Errorf("read-your-write of %s: %v %+v", key, e, got)
			}
		}
		return nil
	})
	var count int
	s.sm.Read(func(st *fsm.State) { count = st.KeyCount() })
	if count != clients*rounds {
		t.Fatalf("%d keys, want %d", count, clients*rounds)
	}
}

// Raft never hands no-op and barrier entries to the FSM; a read right after
// the leader's barrier must not wait for an index the FSM will not reach.
func TestLinearizableReadWithNonCommandTail(t *testing.T) {
	s, nc := startTest(t, nil)
	var l raft.Log
	if err := s.store.GetLog(s.raft.LastIndex(), &l); err != nil {
		t.Fatal(err)
	}
	if l.Type == raft.LogCommand {
		t.Fatalf("test premise: the last entry %d is a command", l.Index)
	}
	start := time.Now()
	var g schema.KVGetReply
	if e := testnats.Request(t, nc, "concord.kv.get", map[string]any{"prefix": ""}, &g); e != nil {
		t.Fatal(e)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatalf("read took %s", time.Since(start))
	}
}

// Expired leases go to Raft in batches of ExpireBatch.
func TestProposeExpireBatches(t *testing.T) {
	s, _ := startTest(t, func(c *Config) { c.ExpireBatch = 50 })
	now, ok := s.clock.now()
	if !ok {
		t.Fatal("leader clock not running")
	}
	ids := make([]int64, 120)
	for i := range ids {
		ids[i] = int64(1000 + i) // unknown leases: each batch applies as a no-op
	}
	before := s.raft.LastIndex()
	if err := s.proposeExpire(context.Background(), now, []fsm.DueLeases{{IDs: ids}}); err != nil {
		t.Fatal(err)
	}
	if got := s.raft.LastIndex() - before; got != 3 {
		t.Fatalf("120 expirations took %d log entries, want 3 (50+50+20)", got)
	}
	// Two tenants' due leases go in commands of their own.
	before = s.raft.LastIndex()
	if err := s.proposeExpire(context.Background(), now, []fsm.DueLeases{{IDs: ids[:60]}, {Tenant: "ACC", IDs: ids[:10]}}); err != nil {
		t.Fatal(err)
	}
	if got := s.raft.LastIndex() - before; got != 3 {
		t.Fatalf("60 and 10 expirations of two tenants took %d log entries, want 3 (50+10, 10)", got)
	}
	before = s.raft.LastIndex()
	if err := s.proposeExpire(context.Background(), now, nil); err != nil {
		t.Fatal(err)
	}
	if got := s.raft.LastIndex() - before; got != 1 {
		t.Fatalf("a tick took %d entries, want 1", got)
	}
}

func TestLeaseClockStandsStillWhenStopped(t *testing.T) {
	var c leaseClock
	if _, ok := c.now(); ok {
		t.Fatal("a clock that never started reports time")
	}
	c.startAt(5000)
	first, _ := c.now()
	time.Sleep(20 * time.Millisecond)
	second, ok := c.now()
	if !ok || first < 5000 || second < first+20 {
		t.Fatalf("clock read %d then %d", first, second)
	}
	c.stop()
	if _, ok := c.now(); ok {
		t.Fatal("stopped clock reports time")
	}
}

func TestConfigRejectsNonsense(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"tick":   func(c *Config) { c.TickInterval = time.Microsecond },
		"batch":  func(c *Config) { c.ExpireBatch = -1 },
		"prefix": func(c *Config) { c.SubjectPrefix = "a.>" },
		"ttl":    func(c *Config) { c.MinTTL = -1 },
		// A share of 0 is the default; below 0.1 a listing would crawl.
		"listing share small":  func(c *Config) { c.ListingShare = 0.05 },
		"listing share big":    func(c *Config) { c.ListingShare = 1.5 },
		"listing share NaN":    func(c *Config) { c.ListingShare = math.NaN() },
		"wal segment negative": func(c *Config) { c.WALSegmentMB = -1 },
		"wal segment huge":     func(c *Config) { c.WALSegmentMB = 2048 },
	} {
		cfg := DefaultConfig()
		mod(&cfg)
		cfg.fillDefaults()
		if err := cfg.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The Raft log store's own counters reach the node's registry: on a new
// node every entry in the log was written through them.
func TestWALMetricsCountTheLog(t *testing.T) {
	s, nc := startTest(t, nil)
	for i := 0; i < 20; i++ {
		if e := testnats.Request(t, nc, "concord.kv.put", map[string]any{"key": fmt.Sprintf("wal.%d", i), "value": i}, nil); e != nil {
			t.Fatal(e)
		}
	}
	fams, err := s.metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		if m := f.GetMetric(); len(m) == 1 && m[0].Counter != nil {
			got[f.GetName()] = m[0].Counter.GetValue()
		}
	}
	last := float64(s.raft.LastIndex())
	if w := got["raft_wal_log_entries_written_total"]; w != last || last < 21 {
		t.Errorf("raft_wal_log_entries_written_total = %v, want the last index %v", w, last)
	}
	if a := got["raft_wal_log_appends_total"]; a < 1 || a > last {
		t.Errorf("raft_wal_log_appends_total = %v, want 1..%v", a, last)
	}
	if got["raft_wal_log_entry_bytes_written_total"] <= 0 || got["raft_wal_stable_sets_total"] < 1 {
		t.Errorf("raft_wal counters: %v", got)
	}
}
