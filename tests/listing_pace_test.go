package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/tests/freeport"
)

// putOnce puts key through nc, an error for anything but a success reply.
func putOnce(nc *nats.Conn, key string, value int) error {
	body, _ := json.Marshal(schema.KVPutRequest{Key: key, Value: json.RawMessage(fmt.Sprint(value))})
	m, err := nc.Request("concord.kv.put", body, 10*time.Second)
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	if code := m.Header.Get(schema.HeaderErrorCode); code != "" {
		return fmt.Errorf("put %s: %s %s", key, code, m.Header.Get(schema.HeaderError))
	}
	return nil
}

// writeUntil puts keys under prefix from workers requesters, back to back,
// until ctx ends; it returns the first error, or nil.
func writeUntil(ctx context.Context, nc *nats.Conn, prefix string, workers int) func() error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				if err := putOnce(nc, fmt.Sprintf("%s%d.%d", prefix, w, i%100), i); err != nil && ctx.Err() == nil {
					mu.Lock()
					first = errors.Join(first, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	return func() error { wg.Wait(); return first }
}

// Listings beside writes: while puts are in flight, listings of many keys
// pause (the node counts the time in concord_listing_paused_seconds_total)
// and still return every key, in order, as it stood; with
// --listing-share 1 they never pause.
func TestListingsGiveWayToWrites(t *testing.T) {
	t.Parallel()
	const keys = 3000
	for _, c := range []struct {
		name   string
		flags  []string
		pauses bool
	}{
		{"default", nil, true},
		{"share 1", []string{"--listing-share", "1"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
			n := startNode(t, nodeOpts{flags: append([]string{"--metrics-listen", addr}, c.flags...)})
			cl := connect(t, n.natsURL)
			putMany(t, n, "lp.", keys, 0)
			before := scrapeMetrics(t, addr).value("concord_listing_paused_seconds_total")

			ctx, stop := context.WithCancel(context.Background())
			wait := writeUntil(ctx, cl.nc, "lpw.", 4)
			for range 10 {
				g := cl.get(map[string]any{"prefix": "lp.", "limit": keys})
				if len(g.KVs) != keys || g.More {
					stop()
					t.Fatalf("a listing beside writes returned %d keys (more: %v), want %d", len(g.KVs), g.More, keys)
				}
				for i, kv := range g.KVs {
					if want := fmt.Sprintf("lp.%05d", i); kv.Key != want || string(kv.Value) != fmt.Sprint(i) {
						stop()
						t.Fatalf("record %d of a listing beside writes is %s=%s, want %s=%d", i, kv.Key, kv.Value, want, i)
					}
				}
			}
			stop()
			if err := wait(); err != nil {
				t.Fatalf("the writes beside the listings: %v", err)
			}
			paused := scrapeMetrics(t, addr).value("concord_listing_paused_seconds_total") - before
			switch {
			case c.pauses && paused <= 0:
				t.Fatalf("10 listings of %d keys beside writes paused %vs, want some", keys, paused)
			case !c.pauses && paused != 0:
				t.Fatalf("with --listing-share 1 the listings paused %vs", paused)
			}
		})
	}
}
