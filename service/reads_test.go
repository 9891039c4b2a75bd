package service

import (
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/internal/testnats"
	"github.com/concord-io/concord/service/internal/testwait"
)

// BenchmarkPutsBesideBigReads: issue 16's "reads never stall writes" at
// the service. A node holds --bench-read-keys keys (100-byte values) under
// one prefix; 16 closed-loop clients, each on its own connection, put keys
// elsewhere, alone ("alone"), then while a reader reads the whole prefix
// back to back in pages of up to 10,000 keys ("beside-reads"). Each reports
// put latency percentiles over its b.N puts; beside-reads also reports its
// p99 over alone's (the bar: 2) and the prefix passes it read.
// Use -benchtime=Nx with N in the thousands: the percentiles come from the
// puts of one run.
func BenchmarkPutsBesideBigReads(b *testing.B) {
	s, _ := startTest(b, nil)
	keys := *benchReadKeys
	value := json.RawMessage(`"` + strings.Repeat("v", 98) + `"`)
	var next atomic.Int64
	var wg sync.WaitGroup
	var loadErr atomic.Value
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(keys); i = next.Add(1) - 1 {
				if _, e := s.srv.Propose(&fsm.Put{Key: fmt.Sprintf("r.%07d", i), Value: value}, ""); e != nil {
					loadErr.Store(e)
					return
				}
			}
		}()
	}
	wg.Wait()
	if e := loadErr.Load(); e != nil {
		b.Fatalf("load: %v", e)
	}
	const clients = 16
	conns := make([]*nats.Conn, clients+1)
	for i := range conns {
		nc, err := nats.Connect(s.NATSURL())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		conns[i] = nc
	}
	var aloneP99 float64
	for _, reads := range []bool{false, true} {
		name := "alone"
		if reads {
			name = "beside-reads"
		}
		b.Run(name, func(b *testing.B) {
			stop := make(chan struct{})
			var passes atomic.Int64
			readErr := make(chan error, 1)
			var rwg sync.WaitGroup
			if reads {
				rwg.Add(1)
				go func() {
					defer rwg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						n, err := readPrefixPass(conns[clients], "r.")
						if err == nil && n != keys {
							err = fmt.Errorf("a pass read %d keys, want %d", n, keys)
						}
						if err != nil {
							readErr <- err
							return
						}
						passes.Add(1)
					}
				}()
			}
			lat := make([]time.Duration, b.N)
			var idx atomic.Int64
			var putErr atomic.Value
			var pwg sync.WaitGroup
			b.ResetTimer()
			for c := range clients {
				pwg.Add(1)
				go func() {
					defer pwg.Done()
					for i := idx.Add(1) - 1; i < int64(b.N); i = idx.Add(1) - 1 {
						body := fmt.Sprintf(`{"key":"w.c%d.n%d","value":1}`, c, i)
						t0 := time.Now()
						msg, err := conns[c].Request("concord.kv.put", []byte(body), 10*time.Second)
						lat[i] = time.Since(t0)
						if err == nil && msg.Header.Get(schema.HeaderErrorCode) != "" {
							err = fmt.Errorf("put refused: %s", msg.Data)
						}
						if err != nil {
							putErr.Store(err)
							return
						}
					}
				}()
			}
			pwg.Wait()
			b.StopTimer()
			close(stop)
			rwg.Wait()
			select {
			case err := <-readErr:
				b.Fatalf("reads: %v", err)
			default:
			}
			if err := putErr.Load(); err != nil {
				b.Fatalf("puts: %v", err)
			}
			slices.Sort(lat)
			pct := func(p float64) float64 {
				return float64(lat[min(int(p*float64(len(lat))), len(lat)-1)]) / float64(time.Millisecond)
			}
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
			if !reads {
				aloneP99 = pct(0.99)
				return
			}
			b.ReportMetric(float64(passes.Load()), "read-passes")
			if aloneP99 > 0 {
				b.ReportMetric(pct(0.99)/aloneP99, "p99-over-alone")
			}
		})
	}
}

// Reads that walk many entries run on a view taken after the read barrier
// (stateMachine.view). Each client writes, then reads what it wrote through
// every such read: a prefix, a range, a count, a history, a change log, a
// lease with its keys, the lease list. Each must show the write it follows
// (a stale view would not); run under -race.
func TestViewReadsSeeTheWritesBeforeThem(t *testing.T) {
	_, nc := startTest(t, nil)
	const clients, rounds = 8, 12
	testwait.Concurrently(t, clients, func(c int) error {
		var g schema.LeaseGrantReply
		if e := testnats.Request(t, nc, "concord.lease.grant", map[string]any{"ttl": 60}, &g); e != nil {
			return e
		}
		prefix := fmt.Sprintf("c%d.", c)
		for r := 0; r < rounds; r++ {
			key := fmt.Sprintf("%sk%02d", prefix, r)
			var put schema.KVPutReply
			if e := testnats.Request(t, nc, "concord.kv.put", map[string]any{"key": key, "value": r, "lease": g.ID}, &put); e != nil {
				return e
			}
			var got schema.KVGetReply
			if e := testnats.Request(t, nc, "concord.kv.get", map[string]any{"prefix": prefix}, &got); e != nil {
				return e
			}
			if got.Count != int64(r+1) || len(got.KVs) != r+1 || got.KVs[r].Key != key || got.Revision < put.Revision {
				return fmt.Errorf("prefix %s after the put of %s at %d: %d keys at revision %d", prefix, key, put.Revision, got.Count, got.Revision)
			}
			if e := testnats.Request(t, nc, "concord.kv.get", map[string]any{"range_start": prefix, "range_end": key + "~", "count_only": true}, &got); e != nil || got.Count != int64(r+1) {
				return fmt.Errorf("range count up to %s: %v %+v", key, e, got)
			}
			var h schema.KVHistoryReply
			if e := testnats.Request(t, nc, "concord.kv.history", map[string]any{"key": key}, &h); e != nil || len(h.Records) != 1 || h.Records[0].Revision != put.Revision {
				return fmt.Errorf("history of %s: %v %+v", key, e, h)
			}
			var ch schema.KVChangesReply
			if e := testnats.Request(t, nc, "concord.kv.changes", map[string]any{"key": key, "after_revision": put.Revision - 1}, &ch); e != nil || len(ch.Events) != 1 {
				return fmt.Errorf("changes of %s: %v %+v", key, e, ch)
			}
			var li schema.LeaseInfo
			if e := testnats.Request(t, nc, "concord.lease.info", map[string]any{"id": g.ID, "keys": true}, &li); e != nil || len(li.Keys) != r+1 || !slices.Contains(li.Keys, key) {
				return fmt.Errorf("lease %d after the put of %s: %v %+v", g.ID, key, e, li)
			}
			var ll schema.LeaseListReply
			if e := testnats.Request(t, nc, "concord.lease.list", map[string]any{"after": g.ID - 1, "limit": 1}, &ll); e != nil || len(ll.Leases) != 1 || ll.Leases[0].KeyCount != int64(r+1) {
				return fmt.Errorf("lease list at %d after the put of %s: %v %+v", g.ID, key, e, ll)
			}
		}
		return nil
	})
}

var benchReadKeys = flag.Int("bench-read-keys", 100_000, "keys under the prefix BenchmarkPutsBesideBigReads reads")

// readPrefixPass reads every key under prefix, page after page, and
// returns how many it read.
func readPrefixPass(nc *nats.Conn, prefix string) (int, error) {
	after, n := "", 0
	for {
		req := map[string]any{"prefix": prefix, "limit": 10_000, "keys_only": false}
		if after != "" {
			req["after"] = after
		}
		data, _ := json.Marshal(req)
		msg, err := nc.Request("concord.kv.get", data, 30*time.Second)
		if err != nil {
			return n, err
		}
		if msg.Header.Get(schema.HeaderErrorCode) != "" {
			return n, fmt.Errorf("read refused: %s", msg.Data)
		}
		var page schema.KVGetReply
		if err := json.Unmarshal(msg.Data, &page); err != nil {
			return n, err
		}
		n += len(page.KVs)
		if !page.More {
			return n, nil
		}
		if len(page.KVs) == 0 {
			return n, fmt.Errorf("an empty page after %q says more", after)
		}
		after = page.KVs[len(page.KVs)-1].Key
	}
}
